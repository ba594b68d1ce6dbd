// The simulator engine's cycle counts and reports: per superstep, op and
// tile, slow paths, code and peak memory (docs/device-program.md, "Costs").

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "formats/print.h"
#include "kernels/exchange_schedule.h"
#include "sim/engine.h"

namespace tilec::sim::engine {

namespace {

// Largest-remainder apportionment of `amount` over `weights` (>= 0, sum >
// 0): shares sum exactly to amount; leftover units go to the largest
// remainders, ties to the lower index, so the split is deterministic.
std::vector<int64_t> Apportion(int64_t amount,
                               const std::vector<int64_t>& weights) {
  std::vector<int64_t> shares(weights.size(), 0);
  __int128 total = 0;
  for (int64_t w : weights) total += w;
  if (total <= 0 || amount <= 0) return shares;
  std::vector<std::pair<__int128, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const __int128 scaled = static_cast<__int128>(amount) * weights[i];
    shares[i] = static_cast<int64_t>(scaled / total);
    given += shares[i];
    remainders.push_back({scaled % total, i});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < amount; ++i, ++given) {
    ++shares[remainders[i % remainders.size()].second];
  }
  return shares;
}

// The exchange phase's cycles go to the transfers' ops by the bytes they
// deliver.
void SplitExchangeByOp(const std::vector<uint32_t>& ids,
                       const std::vector<int64_t>& weights, CycleTally* tally,
                       SuperstepReport* sr) {
  const std::vector<int64_t> shares = Apportion(sr->exchange_cycles, weights);
  for (size_t i = 0; i < ids.size(); ++i) {
    tally->Op(ids[i]).exchange_cycles += shares[i];
    sr->exchange_split.push_back({ids[i], shares[i]});
  }
}

// Adds one superstep's report to the program's totals.
void AddSuperstep(SuperstepReport sr, SimResult* r) {
  r->compute_cycles += sr.compute_cycles;
  r->exchange_cycles += sr.exchange_cycles;
  r->exchange_bound_cycles += sr.exchange_bound_cycles;
  r->exchange_scheduled_cycles += sr.exchange_scheduled_cycles;
  r->sync_cycles += sr.sync_cycles;
  r->update_cycles += sr.update_cycles;
  r->kernel_calls += sr.kernel_calls;
  r->transfers += sr.transfers;
  r->pieces += sr.pieces;
  r->bytes_sent += sr.bytes_sent;
  r->bytes_received += sr.bytes_received;
  VLOG(1) << "superstep " << sr.index << " \"" << sr.label << "\": compute "
          << sr.compute_cycles << " (tile " << sr.slowest_tile
          << "), exchange " << sr.exchange_cycles << " (tile "
          << sr.exchange_slowest_tile << ")";
  r->supersteps.push_back(std::move(sr));
}

}  // namespace

void Engine::CountStep(size_t k, CycleTally* tally, int64_t* clock,
                       SimResult* r) {
  const RunStep& rs = schedule_[k];
  const int s = rs.superstep;
  SuperstepReport sr;
  sr.index = s;
  sr.iteration = rs.iteration;
  sr.label = program_->supersteps[s]->label;
  sr.start_cycle = *clock;
  if (rs.iteration >= 1) CountIterationUpdate(s, tally, &sr);
  CountComputePhase(k, s, tally, &sr, r);
  AttributeSlowestTile(s, tally, &sr);
  if (!steps_[s].transfers.empty()) CountExchangePhase(k, s, tally, &sr, r);
  const int64_t cycles =
      sr.update_cycles + sr.compute_cycles + sr.exchange_cycles;
  *clock += cycles;
  if (rs.repeat >= 0) {
    r->repeats[rs.repeat].iteration_cycles[rs.iteration] += cycles;
  }
  AddSuperstep(std::move(sr), r);
}

void Engine::FinishCounts(CycleTally* tally, int64_t clock, SimResult* r) {
  r->total_cycles = clock;
  r->seconds = r->clock_hz > 0 ? static_cast<double>(clock) / r->clock_hz : 0;
  ReportOps(tally, r);
  ReportSlowestTiles(*tally, r);
  ReportPeakMemory(r);
}

// Each tile's kernels run in order; the slowest tile (the lowest-numbered
// one on a tie) sets the phase's length.
void Engine::CountComputePhase(size_t k, int s, CycleTally* tally,
                               SuperstepReport* sr, SimResult* r) {
  const StepPlan& plan = steps_[s];
  for (size_t i = 0; i < plan.tiles.size(); ++i) {
    const int tile = plan.tiles[i];
    int64_t sum = 0;
    for (const ComputePlan& cp : plan.computes[i]) {
      const int64_t cycles = compute_cycles_[s][cp.index];
      const int64_t extra = compute_extra_[s][cp.index];
      sum += cycles;
      OpReport& o = tally->Op(cp.compute->op);
      ++o.kernel_calls;
      o.macs += compute_macs_[s][cp.index];
      r->gemm_macs += compute_macs_[s][cp.index];
      if (extra != 0) {
        ++o.slow_path_calls;
        ++r->slow_path_calls;
        SlowPathReport& sp = tally->slow[cp.compute->kernel];
        sp.kernel = cp.compute->kernel;
        ++sp.calls;
        sp.extra_cycles += std::max<int64_t>(extra, 0);
      }
    }
    tally->step_compute[k][tile] = sum;
    tally->tile_compute[tile] += sum;
    tally->tile_calls[tile] += static_cast<int64_t>(plan.computes[i].size());
    sr->kernel_calls += static_cast<int64_t>(plan.computes[i].size());
    if (sum > sr->compute_cycles || sr->slowest_tile < 0) {
      sr->compute_cycles = sum;
      sr->slowest_tile = tile;
    }
  }
}

// Only the slowest tile's cycles are charged to ops and spans, so that the
// per-op cycles sum to the phase exactly.
void Engine::AttributeSlowestTile(int s, CycleTally* tally,
                                  SuperstepReport* sr) const {
  const StepPlan& plan = steps_[s];
  for (size_t i = 0; i < plan.tiles.size(); ++i) {
    if (plan.tiles[i] != sr->slowest_tile) continue;
    for (const ComputePlan& cp : plan.computes[i]) {
      const int64_t cycles = compute_cycles_[s][cp.index];
      tally->Op(cp.compute->op).compute_cycles += cycles;
      if (!sr->compute_spans.empty() &&
          sr->compute_spans.back().op == cp.compute->op &&
          sr->compute_spans.back().kernel == cp.compute->kernel) {
        sr->compute_spans.back().cycles += cycles;
        ++sr->compute_spans.back().calls;
      } else {
        sr->compute_spans.push_back(
            {cp.compute->op, cp.compute->kernel, cycles, 1});
      }
    }
  }
}

// Before a repeat body's superstep runs again, its tiles change the
// addresses that differ in this iteration; the slowest tile's update is
// charged, to the op that first names a renamed buffer there.
void Engine::CountIterationUpdate(int s, CycleTally* tally,
                                  SuperstepReport* sr) const {
  const StepUpdate& update = update_cycles_[s];
  if (update.cycles == 0) return;
  sr->update_cycles = update.cycles;
  sr->update_tile = update.tile;
  tally->Op(update.op).update_cycles += update.cycles;
}

const std::vector<Engine::OpTraffic>& Engine::StepTraffic(int s) {
  std::optional<std::vector<OpTraffic>>& made = step_traffic_[s];
  if (made) return *made;
  std::map<uint32_t, OpTraffic> by_op;
  for (const TransferPlan& tp : steps_[s].transfers) {
    const uint32_t op = tp.transfer->op;
    const int64_t dests = static_cast<int64_t>(tp.destinations.size());
    // A multicast is sent once and received by each destination.
    const int64_t bytes = tp.rows * tp.bytes;
    OpTraffic& o = by_op[op];
    o.op = op;
    ++o.transfers;
    o.pieces += tp.rows;
    o.bytes_sent += bytes;
    o.bytes_received += bytes * dests;
  }
  made.emplace();
  for (const auto& [op, traffic] : by_op) made->push_back(traffic);
  return *made;
}

void Engine::CountExchangePhase(size_t k, int s, CycleTally* tally,
                                SuperstepReport* sr, SimResult* r) {
  std::vector<uint32_t> ids;
  std::vector<int64_t> weights;  // bytes received
  for (const OpTraffic& t : StepTraffic(s)) {
    ids.push_back(t.op);
    weights.push_back(t.bytes_received);
    OpReport& o = tally->Op(t.op);
    o.transfers += t.transfers;
    o.pieces += t.pieces;
    o.bytes_sent += t.bytes_sent;
    o.bytes_received += t.bytes_received;
    sr->bytes_sent += t.bytes_sent;
    sr->bytes_received += t.bytes_received;
    sr->transfers += t.transfers;
    sr->pieces += t.pieces;
  }
  const StepSchedule& schedule = schedules_[s];
  int64_t slowest = -1;
  for (const auto& [t, end] : schedule.tile_end) {
    tally->step_exchange[k][t] = end;
    tally->tile_exchange[t] += end;
    if (end > slowest) {
      slowest = end;
      sr->exchange_slowest_tile = t;
    }
  }
  sr->exchange_bound_cycles = schedule.bound;
  sr->exchange_scheduled_cycles = schedule.scheduled;
  sr->sync_cycles = exchange_model_.sync_cycles;
  sr->exchange_cycles = schedule.scheduled + exchange_model_.sync_cycles;
  ++r->exchange_phases;
  SplitExchangeByOp(ids, weights, tally, sr);
}

void Engine::ReportOps(CycleTally* tally, SimResult* r) const {
  for (auto& [id, o] : tally->ops) {
    auto it = ops_.find(id);
    if (it != ops_.end()) {
      o.name = it->second->name;
      o.kind = ir::OpKindText(it->second->kind);
    }
    r->ops.push_back(std::move(o));
  }
  for (auto& [kernel, sp] : tally->slow) r->slow_paths.push_back(sp);
}

// The options_.top_tiles busiest tiles, with their per-superstep tracks.
void Engine::ReportSlowestTiles(const CycleTally& tally, SimResult* r) const {
  const int steps = static_cast<int>(tally.step_compute.size());
  std::vector<int> order(tiles_);
  for (int t = 0; t < tiles_; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return tally.tile_compute[a] + tally.tile_exchange[a] >
           tally.tile_compute[b] + tally.tile_exchange[b];
  });
  const int top = std::clamp(options_.top_tiles, 0, tiles_);
  for (int i = 0; i < top; ++i) {
    const int t = order[i];
    // Idle tiles say nothing about where the time goes.
    if (tally.tile_compute[t] + tally.tile_exchange[t] == 0) break;
    TileReport tr;
    tr.tile = t;
    tr.compute_cycles = tally.tile_compute[t];
    tr.exchange_cycles = tally.tile_exchange[t];
    tr.busy_cycles = tally.tile_compute[t] + tally.tile_exchange[t];
    tr.kernel_calls = tally.tile_calls[t];
    tr.memory_bytes = tile_extent_[t];
    for (int s = 0; s < steps; ++s) {
      tr.step_compute_cycles.push_back(tally.step_compute[s][t]);
      tr.step_exchange_cycles.push_back(tally.step_exchange[s][t]);
    }
    r->slowest_tiles.push_back(std::move(tr));
  }
}

void Engine::ReportCode(SimResult* r) const {
  int64_t most_code = -1;
  for (const fb::TileCode& c : program_->code) {
    const int64_t total =
        int64_t{c.runtime_bytes()} + c.program_bytes() + c.exchange_bytes();
    r->code_bytes_max = std::max(r->code_bytes_max, total);
    r->exchange_code_bytes_max =
        std::max<int64_t>(r->exchange_code_bytes_max, c.exchange_bytes());
    r->exchange_code_bytes.push_back(c.exchange_bytes());
    if (int64_t{c.reserved_bytes()} > most_code) {
      most_code = c.reserved_bytes();
      r->tensor_bytes = sram_bytes_ - most_code;
    }
  }
}

void Engine::ReportPeakMemory(SimResult* r) const {
  for (int t = 0; t < tiles_; ++t) {
    if (tile_extent_[t] > r->peak_memory_bytes) {
      r->peak_memory_bytes = tile_extent_[t];
      r->peak_memory_tile = t;
    }
  }
}

}  // namespace tilec::sim::engine
