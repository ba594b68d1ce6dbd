#include "passes/lower/program.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>

#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"

namespace tilec::lower {

const char* BufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kValue:
      return "value";
    case BufferKind::kStage:
      return "stage";
    case BufferKind::kPartial:
      return "partial";
    case BufferKind::kInitial:
      return "initial";
    case BufferKind::kRemote:
      return "remote";
    case BufferKind::kResult:
      return "result";
    case BufferKind::kTemp:
      return "temp";
  }
  return "?";
}

StatusOr<int64_t> CallCycles(const kernels::CostModel& model,
                             const std::vector<VBuffer>& buffers,
                             const VCall& call) {
  std::vector<kernels::Operand> operands;
  operands.reserve(call.args.size());
  for (const VSlice& s : call.args) {
    const VBuffer& b = buffers[s.buffer];
    StatusOr<kernels::DType> dtype = kernels::DTypeFromFb(b.dtype);
    if (!dtype.ok()) return dtype.status();
    operands.push_back(kernels::Operand{nullptr, static_cast<size_t>(s.bytes),
                                        *dtype, b.scale_exp});
  }
  return kernels::Cycles(model, call.kernel, operands, call.params,
                         call.fparams);
}

StatusOr<PhaseCost> CostOfPhase(const kernels::CostModel& model,
                                const std::vector<VBuffer>& buffers,
                                const Phase& phase, int tiles,
                                ExchangePrices* prices) {
  PhaseCost cost;
  if (phase.kind == Phase::Kind::kCompute) {
    std::vector<int64_t> per_tile(tiles, 0);
    for (const VCall& c : phase.calls) {
      StatusOr<int64_t> cycles = CallCycles(model, buffers, c);
      if (!cycles.ok()) {
        return Status::Internal("op " + std::to_string(c.op) + " tile " +
                                std::to_string(c.tile) + " " + c.kernel +
                                ": " + cycles.status().message());
      }
      per_tile[c.tile] += *cycles;
      ++cost.calls;
    }
    for (int t = 0; t < tiles; ++t) {
      if (per_tile[t] > cost.cycles) {
        cost.cycles = per_tile[t];
        cost.slowest_tile = t;
      }
    }
    return cost;
  }
  if (phase.transfers.empty()) return cost;
  std::vector<const VTransfer*> transfers;
  for (const VTransfer& t : phase.transfers) {
    transfers.push_back(&t);
    cost.bytes_received += t.Bytes() * static_cast<int64_t>(t.destinations.size());
    ++cost.transfers;
  }
  ExchangeCost exchange = prices ? prices->Cost(model, transfers)
                                 : CostOfExchange(model, transfers);
  cost.cycles = exchange.cycles;
  cost.bound = exchange.bound;
  cost.slowest_tile = exchange.last_tile;
  cost.starts = std::move(exchange.starts);
  return cost;
}

kernels::PhaseTraffic TrafficOf(const kernels::CostModel& model,
                                std::span<const VTransfer* const> transfers,
                                std::span<const int64_t> buffer_offsets) {
  kernels::PhaseTraffic traffic(kernels::ExchangeModel::FromTarget(model.target()));
  std::vector<int> receivers;
  std::vector<int64_t> addresses;
  auto base = [&](int buffer) -> int64_t {
    return buffer_offsets.empty() ? 0 : buffer_offsets[buffer];
  };
  for (size_t i = 0; i < transfers.size(); ++i) {
    const VTransfer& t = *transfers[i];
    receivers.clear();
    addresses.clear();
    for (const VDestination& d : t.destinations) {
      receivers.push_back(d.tile);
      addresses.push_back(base(d.buffer) + d.offset);
    }
    traffic.AddTransfer(t.src_tile, receivers, base(t.src.buffer) + t.src.offset,
                        addresses, t.src.bytes, t.rows, t.src_pitch,
                        t.dst_pitch, static_cast<uint32_t>(i), t.op);
  }
  return traffic;
}

namespace {

// The figures of the schedule that starts `traffic`'s packets at `starts`.
ExchangeCost CostOfStarts(const kernels::CostModel& model,
                          const kernels::PhaseTraffic& traffic,
                          std::vector<uint32_t> starts) {
  ExchangeCost cost;
  cost.starts = std::move(starts);
  // The tile whose part ends last: the last Pointer's receiver, else the
  // last Send's sender.
  const kernels::ScheduleFigures figures =
      kernels::FiguresOfStarts(traffic, cost.starts);
  cost.scheduled = figures.length;
  cost.bound = figures.bound;
  cost.cycles = cost.scheduled + model.sync_cycles();
  cost.last_tile = figures.last_tile;
  return cost;
}

ExchangeCost CostOfTraffic(const kernels::CostModel& model,
                           const kernels::PhaseTraffic& traffic) {
  return CostOfStarts(model, traffic, kernels::SchedulePhaseStarts(traffic));
}

}  // namespace

ExchangeCost CostOfExchange(const kernels::CostModel& model,
                            std::span<const VTransfer* const> transfers) {
  if (transfers.empty()) return {};
  return CostOfTraffic(model, TrafficOf(model, transfers));
}

std::vector<uint32_t> BackToBackStarts(
    std::span<const uint32_t> first_starts, int64_t first_length,
    std::span<const uint32_t> second_starts) {
  std::vector<uint32_t> starts(first_starts.begin(), first_starts.end());
  for (uint32_t start : second_starts) {
    starts.push_back(start + static_cast<uint32_t>(first_length));
  }
  return starts;
}

ExchangeCost CostOfMergedExchange(const kernels::CostModel& model,
                                  std::span<const VTransfer* const> transfers,
                                  std::span<const uint32_t> first_starts,
                                  int64_t first_length,
                                  std::span<const uint32_t> second_starts) {
  const kernels::PhaseTraffic traffic = TrafficOf(model, transfers);
  std::vector<uint32_t> starts =
      BackToBackStarts(first_starts, first_length, second_starts);
  CHECK_EQ(starts.size(), traffic.packets().size());
  ExchangeCost back_to_back = CostOfStarts(model, traffic, std::move(starts));
  std::optional<std::vector<uint32_t>> shorter =
      kernels::SchedulePhaseStartsShorterThan(traffic, back_to_back.scheduled);
  if (!shorter) return back_to_back;
  ExchangeCost scheduled = CostOfStarts(model, traffic, *std::move(shorter));
  return scheduled.cycles < back_to_back.cycles ? scheduled : back_to_back;
}

ExchangeCost ExchangePrices::Cost(const kernels::CostModel& model,
                                  std::span<const VTransfer* const> transfers) {
  if (transfers.empty()) return {};
  kernels::PhaseTraffic traffic = TrafficOf(model, transfers);
  for (const auto& [made, cost] : made_) {
    if (made.packets().size() == traffic.packets().size() && made == traffic) {
      return cost;
    }
  }
  ExchangeCost cost = CostOfTraffic(model, traffic);
  made_.emplace_back(std::move(traffic), cost);
  return cost;
}

StatusOr<ProgramCost> CostOfOp(const kernels::CostModel& model,
                               const std::vector<VBuffer>& buffers,
                               const OpProgram& program, int tiles) {
  ProgramCost total;
  for (const Phase& p : program.phases) {
    StatusOr<PhaseCost> c = CostOfPhase(model, buffers, p, tiles);
    if (!c.ok()) return c.status();
    total.cycles += c->cycles;
    total.calls += c->calls;
    total.transfers += c->transfers;
    total.bytes_received += c->bytes_received;
    if (p.kind == Phase::Kind::kCompute) {
      total.compute_cycles += c->cycles;
    } else if (!p.transfers.empty()) {
      total.exchange_cycles += c->cycles;
      ++total.exchange_phases;
    }
  }
  return total;
}

}  // namespace tilec::lower
