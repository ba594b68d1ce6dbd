#include "passes/core/layout.h"

#include <algorithm>

#include "formats/basics.h"

namespace tilec::passes {
namespace {

// Offset of `index` (inside seg.box) in the buffer.
int64_t OffsetIn(const Segment& seg, const std::array<int64_t, kMaxRank>& index) {
  int64_t offset = 0;
  for (int a = 0; a < seg.box.rank; ++a) {
    offset = offset * (seg.box.end[a] - seg.box.begin[a]) +
             (index[a] - seg.box.begin[a]);
  }
  return seg.offset + offset;
}

// Calls fn(row start index) for every row (all but the last axis) of box.
template <typename Fn>
void ForEachRow(const Box& box, Fn&& fn) {
  if (box.Empty()) return;
  std::array<int64_t, kMaxRank> index = box.begin;
  const int outer = box.rank - 1;
  while (true) {
    fn(index);
    int a = outer - 1;
    for (; a >= 0; --a) {
      if (++index[a] < box.end[a]) break;
      index[a] = box.begin[a];
    }
    if (a < 0) return;
  }
}

void Append(std::vector<Run>* runs, Run run) {
  if (!runs->empty()) {
    Run& last = runs->back();
    if (last.src + last.count == run.src && last.dst + last.count == run.dst) {
      last.count += run.count;
      return;
    }
  }
  runs->push_back(run);
}

}  // namespace

Segments Consecutive(std::span<const Box> boxes) {
  Segments out;
  int64_t offset = 0;
  for (const Box& b : boxes) {
    out.push_back({b, offset});
    offset += b.Elements();
  }
  return out;
}

Segments AlignedPieces(std::span<const Box> boxes, int element_bytes,
                       int alignment) {
  Segments out;
  int64_t bytes = 0;
  for (const Box& b : boxes) {
    bytes = ir::RoundUp(bytes, alignment);
    out.push_back({b, bytes / element_bytes});
    bytes += b.Elements() * element_bytes;
  }
  return out;
}

int64_t Extent(const Segments& segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n = std::max(n, s.offset + s.box.Elements());
  return n;
}

int64_t TotalElements(const Segments& segments) {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.box.Elements();
  return n;
}

Box FullBox(std::span<const int64_t> shape) {
  Box box;
  box.rank = static_cast<int>(shape.size());
  for (int a = 0; a < box.rank; ++a) box.end[a] = shape[a];
  return box;
}

Box IntersectBoxes(const Box& a, const Box& b) {
  Box out;
  out.rank = a.rank;
  bool empty = false;
  for (int i = 0; i < a.rank; ++i) {
    out.begin[i] = std::max(a.begin[i], b.begin[i]);
    out.end[i] = std::min(a.end[i], b.end[i]);
    if (out.end[i] <= out.begin[i]) empty = true;
  }
  if (empty) {
    for (int i = 0; i < a.rank; ++i) out.begin[i] = out.end[i] = 0;
  }
  return out;
}

bool ContainsBox(const Box& outer, const Box& inner) {
  if (inner.Empty()) return true;
  for (int i = 0; i < inner.rank; ++i) {
    if (inner.begin[i] < outer.begin[i] || inner.end[i] > outer.end[i]) {
      return false;
    }
  }
  return true;
}

int64_t BoxWidth(const Box& box) {
  return box.rank == 0 ? 1 : box.end[box.rank - 1] - box.begin[box.rank - 1];
}

int64_t BoxRows(const Box& box) {
  const int64_t w = BoxWidth(box);
  return w == 0 ? 0 : box.Elements() / w;
}

bool MoveRuns(const Box& box, const Segments& src, const Segments& dst,
              std::vector<Run>* runs) {
  runs->clear();
  int64_t covered = 0;
  for (const Segment& s : src) {
    const Box part = IntersectBoxes(box, s.box);
    if (part.Empty()) continue;
    for (const Segment& d : dst) {
      const Box piece = IntersectBoxes(part, d.box);
      if (piece.Empty()) continue;
      covered += piece.Elements();
      const int64_t width = BoxWidth(piece);
      ForEachRow(piece, [&](const std::array<int64_t, kMaxRank>& row) {
        Append(runs, {OffsetIn(s, row), OffsetIn(d, row), width});
      });
    }
  }
  return covered == box.Elements();
}

bool CountRuns(const Box& box, const Segments& src, const Segments& dst,
               std::vector<RunGroup>* groups) {
  groups->clear();
  auto emit = [&](int64_t count, int64_t elements) {
    if (count <= 0) return;
    if (!groups->empty() && groups->back().elements == elements) {
      groups->back().count += count;
    } else {
      groups->push_back({count, elements});
    }
  };
  int64_t covered = 0;
  // The last run so far, kept open while the next piece may continue it.
  bool pending = false;
  int64_t pending_count = 0, pending_src_end = 0, pending_dst_end = 0;
  for (const Segment& s : src) {
    const Box part = IntersectBoxes(box, s.box);
    if (part.Empty()) continue;
    for (const Segment& d : dst) {
      const Box piece = IntersectBoxes(part, d.box);
      if (piece.Empty()) continue;
      covered += piece.Elements();
      const int rank = piece.rank;
      auto extent = [](const Box& b, int a) { return b.end[a] - b.begin[a]; };
      // Rows merge across axis j-1 while every axis >= j is whole on both
      // sides: runs are the sub-boxes over axes >= j.
      int j = rank - 1;
      while (j > 0 && extent(piece, j) == extent(s.box, j) &&
             extent(piece, j) == extent(d.box, j)) {
        --j;
      }
      int64_t count = 1, length = 1;
      for (int a = 0; a < rank; ++a) (a < j ? count : length) *= extent(piece, a);
      std::array<int64_t, kMaxRank> last = piece.begin;
      for (int a = 0; a < j; ++a) last[a] = piece.end[a] - 1;
      const int64_t first_src = OffsetIn(s, piece.begin);
      const int64_t first_dst = OffsetIn(d, piece.begin);
      if (pending && pending_src_end == first_src &&
          pending_dst_end == first_dst) {
        if (count == 1) {
          pending_count += length;
          pending_src_end += length;
          pending_dst_end += length;
          continue;
        }
        emit(1, pending_count + length);
        --count;
      } else if (pending) {
        emit(1, pending_count);
      }
      emit(count - 1, length);
      pending = true;
      pending_count = length;
      pending_src_end = OffsetIn(s, last) + length;
      pending_dst_end = OffsetIn(d, last) + length;
    }
  }
  if (pending) emit(1, pending_count);
  return covered == box.Elements();
}


bool SameContiguousRange(const Segments& result,
                         std::span<const Segments> operands) {
  int64_t next = result.empty() ? 0 : result[0].offset;
  for (const Segment& s : result) {
    if (s.offset != next) return false;
    next += s.box.Elements();
  }
  for (const Segments& x : operands) {
    if (x.size() != result.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (x[i].box != result[i].box ||
          x[i].offset - x[0].offset != result[i].offset - result[0].offset) {
        return false;
      }
    }
  }
  return true;
}

bool LocateRuns(const Box& box, const Segments& segments,
                std::vector<Run>* runs) {
  // Row by row in the box's row-major order, so that a single merged run
  // means the box is stored contiguously *in row-major order*.
  runs->clear();
  if (box.Empty()) return true;
  const int last = box.rank - 1;
  int64_t covered = 0;
  std::vector<const Segment*> hits;
  ForEachRow(box, [&](const std::array<int64_t, kMaxRank>& row) {
    hits.clear();
    for (const Segment& s : segments) {
      bool inside = true;
      for (int a = 0; a < last && inside; ++a) {
        inside = row[a] >= s.box.begin[a] && row[a] < s.box.end[a];
      }
      if (inside && s.box.begin[last] < box.end[last] &&
          s.box.end[last] > box.begin[last]) {
        hits.push_back(&s);
      }
    }
    std::sort(hits.begin(), hits.end(), [&](const Segment* x, const Segment* y) {
      return x->box.begin[last] < y->box.begin[last];
    });
    for (const Segment* s : hits) {
      std::array<int64_t, kMaxRank> at = row;
      at[last] = std::max(box.begin[last], s->box.begin[last]);
      const int64_t end = std::min(box.end[last], s->box.end[last]);
      const int64_t offset = OffsetIn(*s, at);
      covered += end - at[last];
      Append(runs, {offset, offset, end - at[last]});
    }
  });
  return covered == box.Elements();
}

std::optional<int64_t> ContiguousOffset(const Box& box,
                                        const Segments& segments) {
  // Fast paths: too few elements, or the box inside one segment (one run
  // when every axis below its outermost varying one is whole there).
  if (TotalElements(segments) < box.Elements()) return std::nullopt;
  for (const Segment& s : segments) {
    if (!ContainsBox(s.box, box)) continue;
    if (box.Empty()) return std::nullopt;
    int j = box.rank - 1;
    while (j > 0 && box.end[j] - box.begin[j] == s.box.end[j] - s.box.begin[j]) {
      --j;
    }
    for (int a = 0; a < j; ++a) {
      if (box.end[a] - box.begin[a] != 1) return std::nullopt;
    }
    return OffsetIn(s, box.begin);
  }
  std::vector<Run> runs;
  if (!LocateRuns(box, segments, &runs) || runs.size() != 1) {
    return std::nullopt;
  }
  return runs[0].src;
}

std::string SegmentsText(const Segments& segments) {
  std::string out;
  for (const Segment& s : segments) {
    if (!out.empty()) out += " ";
    out += FormatBox(s.box) + "@" + std::to_string(s.offset);
  }
  return out;
}

const Segments& OwnershipStorage::Of(int tile) {
  auto it = held_.find(tile);
  if (it != held_.end()) return it->second;
  return held_[tile] = Consecutive(
             HeldBoxes(ownership_, shape_, tile, view_ ? &*view_ : nullptr));
}

kernels::PhaseTraffic TrafficOfTransfers(std::span<const Transfer> transfers,
                                         int element_bytes,
                                         const fb::TargetT& target,
                                         const StorageOf& storage,
                                         bool unicast) {
  kernels::PhaseTraffic traffic(kernels::ExchangeModel::FromTarget(target));
  std::vector<RunGroup> groups;
  // The runs between the sender's storage and `receiver`'s.
  auto runs = [&](const Transfer& t, int receiver) {
    if (!CountRuns(t.box, storage(t.source_tile, true),
                   storage(receiver, false), &groups)) {
      groups.assign(1, RunGroup{1, t.elements});  // one piece, as a fallback
    }
  };
  uint32_t unicasts = 0;  // numbered as the lowering emits them
  for (size_t i = 0; i < transfers.size(); ++i) {
    const Transfer& t = transfers[i];
    if (t.destination_tiles.empty()) continue;
    if (!unicast) {
      runs(t, t.destination_tiles[0]);
      AddRunPieces(groups, element_bytes, t.source_tile, t.destination_tiles,
                   static_cast<uint32_t>(i), &traffic);
      continue;
    }
    for (const int& d : t.destination_tiles) {
      runs(t, d);
      AddRunPieces(groups, element_bytes, t.source_tile, {&d, 1}, unicasts++,
                   &traffic);
    }
  }
  return traffic;
}

void AddRunPieces(std::span<const RunGroup> groups, int element_bytes,
                  int sender, std::span<const int> receivers,
                  uint32_t transfer, kernels::PhaseTraffic* traffic) {
  uint32_t row = 0;
  for (const RunGroup& g : groups) {
    const int64_t bytes = g.elements * element_bytes;
    for (int64_t k = 0; k < g.count; ++k) {
      traffic->AddPiece(sender, receivers, bytes,
                        kernels::WordsSpanned(0, bytes), transfer, row++);
    }
  }
}

void TimeExchange(const kernels::PhaseTraffic& traffic,
                  const fb::TargetT& target, TransferCost* cost,
                  PhaseTiming timing) {
  cost->scheduled_cycles = 0;
  cost->phase_cycles = 0;
  cost->code_bytes = 0;
  cost->tile_code = nullptr;
  if (traffic.empty()) return;
  cost->scheduled_cycles = timing == PhaseTiming::kScheduled
                               ? kernels::PlannedPhaseLength(traffic)
                               : traffic.EndpointBound();
  cost->phase_cycles = cost->scheduled_cycles + target.sync_cycles;
  auto tables = std::make_shared<std::vector<int64_t>>(target.tiles, 0);
  kernels::AddExchangeCodeBytes(kernels::CodeModel::FromTarget(target),
                                traffic, tables.get());
  cost->code_bytes = MaxTileCode(tables);
  cost->tile_code = std::move(tables);
}

namespace {

// Times `cost`'s exchange phase (TimeExchange): `plan` as the lowering
// moves it, each tile storing its blocks as the ownerships hold them.
void TimePlan(const TransferPlan& plan, bool unicast, OwnershipStorage& from,
              OwnershipStorage& to, int element_bytes,
              const fb::TargetT& target, PhaseTiming timing,
              TransferCost* cost) {
  TimeExchange(TrafficOfTransfers(
                   plan.transfers, element_bytes, target,
                   [&](int tile, bool is_source) -> const Segments& {
                     return is_source ? from.Of(tile) : to.Of(tile);
                   },
                   unicast),
               target, cost, timing);
}

}  // namespace

TransferCost RedistributionCost(const fb::OwnershipT& source,
                                const fb::OwnershipT& destination,
                                std::span<const int64_t> shape,
                                int element_bytes, const fb::TargetT& target,
                                const Box* destination_view,
                                PhaseTiming timing) {
  const TransferPlan plan = PlanTransfers(source, destination, shape,
                                          element_bytes, destination_view);
  OwnershipStorage from(source, shape), to(destination, shape, destination_view);
  TransferCost cost = CostOfPlan(plan, target);
  TimePlan(plan, false, from, to, element_bytes, target, timing, &cost);
  return cost;
}

TransferCost RedistributeOpCost(const fb::OwnershipT& source,
                                const fb::OwnershipT& destination,
                                std::span<const int64_t> shape,
                                int element_bytes, const fb::TargetT& target) {
  const TransferPlan plan =
      PlanTransfers(source, destination, shape, element_bytes);
  OwnershipStorage from(source, shape), to(destination, shape);
  const PhaseTiming timing = PhaseTiming::kScheduled;
  TransferCost cost = CostOfPlan(plan, target);
  TimePlan(plan, false, from, to, element_bytes, target, timing, &cost);
  if (!SendersReceiveMulticasts(plan)) return cost;
  TransferCost unicast = CostOfPlan(plan, target, true);
  // Where the senders' load alone outlasts the multicasts' schedule (a
  // broadcast from few tiles to the whole chip), no schedule of unicasts is
  // shorter, and they are not timed.
  if (unicast.bound_cycles + target.sync_cycles >= cost.phase_cycles) {
    return cost;
  }
  TimePlan(plan, true, from, to, element_bytes, target, timing, &unicast);
  return unicast.phase_cycles < cost.phase_cycles ? unicast : cost;
}

}  // namespace tilec::passes
