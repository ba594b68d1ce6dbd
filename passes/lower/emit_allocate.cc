// emit-device's memory: each tile's code (SizeCode), then every buffer's
// lifetime in allocation slots and its address on its tile (allocate.h),
// tiles placed on two threads.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "kernels/exchange_schedule.h"
#include "passes/core/decisions.h"
#include "passes/lower/emitter.h"

namespace tilec::lower {
namespace {

using passes::Thousands;

}  // namespace

// A tile where first fit from the bottom fails: the data from before the
// program packed around the interleaved boundary, the lowest floor (of
// eight steps over standard memory) that fits; failing that, the same in
// largest-first order (allocate.h), from the bottom first. The first that
// fits is taken: the default where it fits keeps every program that
// placed before byte-identical.
Emitter::Fallback Emitter::AllocateHarder(const MemoryMap& map,
                                          const std::vector<AllocBuffer>& buffers,
                                          const std::vector<AllocRule>& rules,
                                          AllocResult* result) const {
  auto at_floors = [&](AllocOrder order, bool from_bottom) {
    AllocFailure ignored;
    if (from_bottom &&
        AllocateTile(map, buffers, rules, result, &ignored, -1, order)) {
      return true;
    }
    for (int step = 0; step <= 8; ++step) {
      const int64_t floor = map.AlignDown(
          map.base + (map.standard_end - map.base) * step / 8);
      if (AllocateTile(map, buffers, rules, result, &ignored, floor, order)) {
        return true;
      }
    }
    return false;
  };
  if (at_floors(AllocOrder::kLifetime, false)) return Fallback::kAroundBoundary;
  if (at_floors(AllocOrder::kLargestFirst, true)) return Fallback::kLargestFirst;
  return Fallback::kNone;
}

// The transfers of superstep `s` in the order EmitSuperstep emits them.
std::vector<const VTransfer*> Emitter::TransfersOf(int s) const {
  std::vector<const VTransfer*> transfers;
  for (const OpWork& w : work_) {
    for (size_t i = 0; i < w.program.phases.size(); ++i) {
      if (w.step[i] != s) continue;
      for (const VTransfer& t : w.program.phases[i].transfers) {
        transfers.push_back(&t);
      }
    }
  }
  return transfers;
}

Status Emitter::SizeCode() {
  const kernels::CodeModel code = kernels::CodeModel::FromTarget(*module_.target);
  code_.assign(tiles_, TileCodeBytes{});
  std::vector<char> takes_part(tiles_, 0);
  std::vector<int64_t> exchange(tiles_, 0);
  for (int s = 0; s < steps_; ++s) {
    std::fill(takes_part.begin(), takes_part.end(), 0);
    for (const OpWork& w : work_) {
      for (size_t i = 0; i < w.program.phases.size(); ++i) {
        if (w.step[i] != s) continue;
        for (const VCall& c : w.program.phases[i].calls) {
          code_[c.tile].program += code.CallBytes(static_cast<int64_t>(
              c.args.size() + c.params.size() + c.fparams.size()));
          takes_part[c.tile] = 1;
        }
      }
    }
    const std::vector<const VTransfer*> transfers = TransfersOf(s);
    for (const VTransfer* t : transfers) {
      takes_part[t->src_tile] = 1;
      for (const VDestination& d : t->destinations) takes_part[d.tile] = 1;
    }
    if (!transfers.empty()) {
      kernels::AddExchangeCodeBytes(code, TrafficOf(model_, transfers),
                                    &exchange);
    }
    for (int t = 0; t < tiles_; ++t) {
      if (takes_part[t]) code_[t].program += code.per_superstep;
    }
  }
  for (int t = 0; t < tiles_; ++t) {
    TileCodeBytes& c = code_[t];
    c.runtime = code.runtime;
    c.exchange = exchange[t];
    c.reserved = ir::CodeRegionBytes(*module_.target,
                                     c.runtime + c.program + c.exchange);
    if (c.reserved > map_.standard_end) {
      return Status::Infeasible(
          "tile " + std::to_string(t) + ": " +
          Thousands(c.runtime + c.program + c.exchange) +
          " B of code (runtime " + Thousands(c.runtime) + ", program " +
          Thousands(c.program) + ", exchange tables " + Thousands(c.exchange) +
          ") do not fit in the " + Thousands(map_.standard_end) +
          " B of standard memory that code lives in");
    }
  }
  return Status::Ok();
}

Status Emitter::Allocate(std::string* failure_message, bool* fits) {
  TILEC_RETURN_IF_ERROR(SizeCode());
  ComputeLifetimes();
  const std::vector<std::vector<AllocBuffer>> per_tile = BuffersPerTile();
  const std::vector<std::vector<AllocRule>> rules = RulesPerTile();
  offset_.assign(lowering_.buffers().size(), -1);
  tile_peak_.assign(tiles_, 0);
  boundary_tiles_ = 0;
  largest_first_tiles_ = 0;
  slow_pairs_.clear();
  const std::vector<TileAllocation> placed = PlaceTiles(per_tile, rules);
  for (int t = 0; t < tiles_; ++t) {
    if (per_tile[t].empty()) continue;
    if (placed[t].fallback == Fallback::kAroundBoundary) ++boundary_tiles_;
    if (placed[t].fallback == Fallback::kLargestFirst) ++largest_first_tiles_;
    if (!placed[t].fits) {
      *fits = false;
      const AllocFailure& failure = placed[t].failure;
      const std::vector<VBuffer>& buffers = lowering_.buffers();
      failure_ops_ = {buffers[failure.buffer].op};
      for (int id : failure.live) failure_ops_.insert(buffers[id].op);
      failure_summary_ = OutOfMemorySummary(t, failure);
      *failure_message = OutOfMemoryMessage(t, failure);
      return Status::Ok();
    }
    TakePlacement(t, per_tile[t], rules[t], placed[t].result);
  }
  *fits = true;
  return Status::Ok();
}

int64_t Emitter::SlotsPerStep() const {
  return static_cast<int64_t>(work_.size()) + 1;
}

void Emitter::ComputeLifetimes() {
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  const int64_t nops = static_cast<int64_t>(work_.size());
  const int64_t per_step = SlotsPerStep();
  first_.assign(buffers.size(), kForever);
  last_.assign(buffers.size(), -kForever);
  auto touch = [&](int b, int64_t slot) {
    first_[b] = std::min(first_[b], slot);
    last_[b] = std::max(last_[b], slot);
  };
  for (size_t r = 0; r < work_.size(); ++r) {
    const OpWork& w = work_[r];
    for (size_t i = 0; i < w.program.phases.size(); ++i) {
      const Phase& ph = w.program.phases[i];
      const int64_t s = w.step[i];
      if (ph.kind == Phase::Kind::kCompute) {
        const int64_t slot = s * per_step + static_cast<int64_t>(r);
        for (const VCall& c : ph.calls) {
          for (const VSlice& a : c.args) touch(a.buffer, slot);
        }
      } else {
        const int64_t slot = s * per_step + nops;
        for (const VTransfer& t : ph.transfers) {
          touch(t.src.buffer, slot);
          for (const VDestination& d : t.destinations) touch(d.buffer, slot);
        }
      }
    }
  }
  std::set<int> host_read;
  for (const auto& v : module_.values) {
    if (v->role != fb::ValueRole::Output) continue;
    for (int t : lowering_.TilesOf(v->id)) {
      host_read.insert(lowering_.Find(v->id, t)->buffer);
    }
  }
  for (const VBuffer& b : buffers) {
    if (b.host_written || b.resident) first_[b.id] = -1;
    if (b.resident || host_read.count(b.id)) last_[b.id] = kForever;
    if (first_[b.id] == kForever && last_[b.id] != -kForever) first_[b.id] = -1;
  }
  for (const BodyLowering& b : bodies_) {
    KeepBodyDataLive(b, b.first_step * per_step,
                     (b.last_step + 1) * per_step - 1, &first_, &last_);
  }
}

std::vector<std::vector<AllocBuffer>> Emitter::BuffersPerTile() const {
  std::vector<std::vector<AllocBuffer>> per_tile(tiles_);
  for (const VBuffer& b : lowering_.buffers()) {
    if (first_[b.id] > last_[b.id]) continue;  // never used
    AllocBuffer a;
    a.id = b.id;
    a.bytes = b.bytes;
    a.start = first_[b.id];
    a.end = last_[b.id];
    a.interleaved = b.interleaved;
    per_tile[b.tile].push_back(a);
  }
  return per_tile;
}

std::vector<std::vector<AllocRule>> Emitter::RulesPerTile() const {
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  std::vector<std::vector<AllocRule>> rules(tiles_);
  const std::vector<ElementRule>& element_rules = lowering_.rules();
  for (const ElementRule& r : element_rules) {
    rules[buffers[r.a].tile].push_back({r.a, r.b, r.hard});
  }
  for (const BodyLowering& b : bodies_) AddRenamedRules(b, buffers, &rules);
  return rules;
}

// Each tile's buffers are placed on their own, so two threads place tiles
// in any order and Allocate takes the results in tile order, as one thread
// would: the same offsets, and the first tile that does not fit is the one
// reported (tiles after it are not needed).
std::vector<Emitter::TileAllocation> Emitter::PlaceTiles(
    const std::vector<std::vector<AllocBuffer>>& per_tile,
    const std::vector<std::vector<AllocRule>>& rules) const {
  std::vector<TileAllocation> placed(tiles_);
  std::atomic<int> next_tile{0}, first_unfit{tiles_};
  auto place_tiles = [&] {
    for (int t = next_tile++; t < tiles_; t = next_tile++) {
      if (per_tile[t].empty() || t > first_unfit) continue;
      TileAllocation& a = placed[t];
      MemoryMap map = map_;
      map.base = code_[t].reserved;
      a.fits = AllocateTile(map, per_tile[t], rules[t], &a.result, &a.failure);
      if (!a.fits) {
        a.fallback = AllocateHarder(map, per_tile[t], rules[t], &a.result);
        a.fits = a.fallback != Fallback::kNone;
      }
      if (!a.fits) {
        int seen = first_unfit;
        while (t < seen && !first_unfit.compare_exchange_weak(seen, t)) {
        }
      }
    }
  };
  {
    std::thread second(place_tiles);
    place_tiles();
    second.join();
  }
  return placed;
}

// Names the tile, the buffer that does not fit and the shortfall, or,
// where a free gap is large enough, the live buffers whose memory elements
// it may not share.
std::string Emitter::OutOfMemorySummary(int t,
                                        const AllocFailure& failure) const {
  const VBuffer& b = lowering_.buffers()[failure.buffer];
  return "tile " + std::to_string(t) + " is out of memory at " +
         SlotText(failure.slot) + ": buffer \"" + b.name + "\" (op " +
         std::to_string(b.op) + ", " + BufferKindName(b.kind) + ", " +
         Thousands(failure.bytes) + " B" +
         (failure.interleaved ? ", interleaved memory" : "") +
         ") does not fit; live buffers " + Thousands(failure.live_bytes) +
         " B of " + Thousands(failure.region_bytes) +
         " B, largest free gap " + Thousands(failure.largest_gap) + " B, " +
         ShortfallText(failure);
}

// The summary, the orders tried (the live set is lifetime order's, where
// it failed) and the live buffers, largest first.
std::string Emitter::OutOfMemoryMessage(int t,
                                        const AllocFailure& failure) const {
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  std::vector<int> live = failure.live;
  std::sort(live.begin(), live.end(), [&](int x, int y) {
    return buffers[x].bytes != buffers[y].bytes
               ? buffers[x].bytes > buffers[y].bytes
               : x < y;
  });
  std::string live_text;
  for (int id : live) {
    const VBuffer& l = buffers[id];
    live_text += (live_text.empty() ? "" : "; ") + std::string("\"") +
                 l.name + "\" op " + std::to_string(l.op) + " " +
                 BufferKindName(l.kind) + " " + Thousands(l.bytes) + " B";
  }
  return OutOfMemorySummary(t, failure) +
         " (in lifetime order; placed around the interleaved boundary or "
         "largest first, the tile does not fit either); live: " +
         live_text;
}

std::string Emitter::ShortfallText(const AllocFailure& failure) const {
  if (failure.bytes > failure.largest_gap) {
    return "shortfall " + Thousands(failure.bytes - failure.largest_gap) +
           " B";
  }
  std::string partners;
  for (int id : failure.element_partners) {
    partners += (partners.empty() ? "\"" : ", \"") +
                lowering_.buffers()[id].name + "\"";
  }
  if (partners.empty()) return "no shortfall in bytes, but no gap admits it";
  return "no shortfall in bytes, but every gap large enough shares a memory "
         "element with a buffer it must not share one with (" +
         partners + ")";
}

std::string Emitter::SlotText(int64_t slot) const {
  const int64_t nops = static_cast<int64_t>(work_.size());
  const int64_t per_step = SlotsPerStep();
  if (slot < 0) return "the program start (host data)";
  const int64_t s = slot / per_step, r = slot % per_step;
  if (r == nops) return "superstep " + std::to_string(s) + " exchange";
  return "superstep " + std::to_string(s) + " compute of op " +
         std::to_string(work_[r].op->id) + " " + work_[r].op->name;
}

void Emitter::TakePlacement(int t, const std::vector<AllocBuffer>& buffers,
                            const std::vector<AllocRule>& rules,
                            const AllocResult& result) {
  for (size_t i = 0; i < buffers.size(); ++i) {
    offset_[buffers[i].id] = result.offsets[i];
  }
  for (int r : result.soft_dropped) {
    slow_pairs_.insert({rules[r].a, rules[r].b});
  }
  tile_peak_[t] = result.peak;
  VLOG(2) << "tile " << t << ": " << buffers.size()
          << " buffers, highest end " << result.peak << " B, "
          << result.soft_dropped.size() << " soft rules dropped";
}

}  // namespace tilec::lower
