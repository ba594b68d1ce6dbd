#include "passes/core/split_row_plan.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "formats/basics.h"
#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"

namespace tilec::passes {
namespace {

// Slices by their rows [r0, r1); BadInput if two row ranges overlap.
using ByRows = std::map<std::pair<int64_t, int64_t>, std::vector<int>>;
StatusOr<ByRows> SlicesByRows(std::span<const RowSlice> slices,
                              const std::string& where) {
  ByRows by_rows;
  for (size_t i = 0; i < slices.size(); ++i) {
    by_rows[{slices[i].box.begin[0], slices[i].box.end[0]}].push_back(
        static_cast<int>(i));
  }
  int64_t end = 0;
  for (const auto& [rows, members] : by_rows) {
    if (rows.first < end) {
      return Status::BadInput(where +
                              ": column slices of different row "
                              "blocks overlap; LayerNorm over split "
                              "rows needs aligned row blocks");
    }
    end = std::max(end, rows.second);
  }
  return by_rows;
}

// The row group of slice `s` among `members`, the slices over its rows (see
// SplitRowPlan::groups).
std::vector<int> RowGroup(std::span<const RowSlice> slices,
                          std::span<const int> members, int s) {
  const RowSlice& self = slices[s];
  std::map<int64_t, int> group;  // first column -> slice
  for (int i : members) {
    const RowSlice& o = slices[i];
    if (o.tile == self.tile || !group.count(o.box.begin[1])) {
      group[o.box.begin[1]] = i;
    }
  }
  group[self.box.begin[1]] = s;
  std::vector<int> out;
  for (const auto& [c0, i] : group) out.push_back(i);
  return out;
}

// The moments rows of a slice: [r0, r1) x [0, 3).
Box MomentRowsOf(const Box& b) { return Box2(b.begin[0], b.end[0], 0, 3); }

}  // namespace

bool HasSplitRows(const fb::OwnershipT& layout,
                  std::span<const int64_t> shape) {
  if (shape.size() != 2) return false;
  bool split = false;
  ForEachHeldBoxes(layout, shape, [&](int, std::span<const Box> held) {
    for (const Box& b : held) split = split || BoxWidth(b) != shape[1];
  });
  return split;
}

StatusOr<SplitRowPlan> PlanSplitRows(const fb::OwnershipT& layout,
                                     std::span<const int64_t> shape,
                                     const std::string& where) {
  SplitRowPlan plan;
  for (int t : TilesUsed(layout, shape)) {
    for (const Box& b : HeldBoxes(layout, shape, t)) {
      plan.slices.push_back({t, b});
    }
  }
  StatusOr<ByRows> by_rows = SlicesByRows(plan.slices, where);
  if (!by_rows.ok()) return by_rows.status();
  std::vector<int> gather_of(plan.slices.size(), -1);
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const Box& box = plan.slices[s].box;
    std::vector<int> group =
        RowGroup(plan.slices, by_rows->at({box.begin[0], box.end[0]}),
                 static_cast<int>(s));
    const int tile = plan.slices[s].tile;
    for (int o : group) {
      const RowSlice& from = plan.slices[o];
      if (o == static_cast<int>(s) || from.tile == tile) continue;
      if (gather_of[o] < 0) {
        gather_of[o] = static_cast<int>(plan.gathers.size());
        Transfer t;
        t.source_tile = from.tile;
        t.box = MomentRowsOf(from.box);
        t.elements = t.box.Elements();
        t.bytes = t.elements * 4;
        plan.gathers.push_back(std::move(t));
      }
      plan.gathers[gather_of[o]].destination_tiles.push_back(tile);
    }
    plan.groups.push_back(std::move(group));
  }
  return plan;
}

int64_t GatherReceiveBound(int64_t rows, int64_t column_parts,
                           const fb::TargetT& target) {
  const int64_t bytes = (column_parts - 1) * rows * 3 * 4;
  return ir::CeilDiv(bytes, std::max(1, target.exchange_bytes_per_cycle));
}

StatusOr<SplitRowCost> PriceSplitRows(const SplitRowPlan& plan,
                                      fb::DType out_dtype,
                                      const kernels::CostModel& model,
                                      const fb::TargetT& target,
                                      PhaseTiming timing) {
  StatusOr<kernels::DType> kout = kernels::DTypeFromFb(out_dtype);
  if (!kout.ok()) return kout.status();
  SplitRowCost cost;
  const int T = target.tiles;
  std::vector<int64_t> moments(T, 0), normalize(T, 0);
  cost.scratch.assign(T, 0);
  for (size_t s = 0; s < plan.slices.size(); ++s) {
    const RowSlice& slice = plan.slices[s];
    const int64_t rows = BoxRows(slice.box), w = BoxWidth(slice.box);
    const int64_t bytes = rows * 3 * 4;
    const int64_t members = static_cast<int64_t>(plan.groups[s].size());
    StatusOr<int64_t> m = kernels::LnMomentsCycles(model, rows, w);
    if (!m.ok()) return m.status();
    moments[slice.tile] += *m;
    for (int o : plan.groups[s]) {
      if (o == static_cast<int>(s) || plan.slices[o].tile != slice.tile) {
        continue;
      }
      StatusOr<int64_t> copy = kernels::CopyCycles(model, bytes);
      if (!copy.ok()) return copy.status();
      normalize[slice.tile] += *copy;
    }
    StatusOr<int64_t> combine =
        kernels::CombineMomentsCycles(model, rows, members);
    if (!combine.ok()) return combine.status();
    StatusOr<int64_t> norm = kernels::NormalizeCycles(model, *kout, rows, w);
    if (!norm.ok()) return norm.status();
    normalize[slice.tile] += *combine + *norm;
    // Its partial, the group's others, the combined moments.
    cost.scratch[slice.tile] += bytes * (members + 1);
  }
  TransferPlan gather;
  gather.transfers = plan.gathers;
  cost.exchange = CostOfPlan(gather, target);
  kernels::PhaseTraffic traffic(kernels::ExchangeModel::FromTarget(target));
  for (size_t i = 0; i < plan.gathers.size(); ++i) {
    const Transfer& t = plan.gathers[i];
    traffic.AddPiece(t.source_tile, t.destination_tiles, t.bytes,
                     kernels::WordsSpanned(0, t.bytes),
                     static_cast<uint32_t>(i), 0);
  }
  TimeExchange(traffic, target, &cost.exchange, timing);
  cost.phases = plan.gathers.empty() ? 0 : 1;
  int64_t together = 0;
  for (int t = 0; t < T; ++t) {
    cost.moments = std::max(cost.moments, moments[t]);
    cost.normalize = std::max(cost.normalize, normalize[t]);
    together = std::max(together, moments[t] + normalize[t]);
  }
  cost.compute = cost.phases == 0 ? together : cost.moments + cost.normalize;
  return cost;
}

}  // namespace tilec::passes
