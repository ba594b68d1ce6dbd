#include "passes/core/attention_plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "formats/basics.h"
#include "kernels/fb_dtype.h"
#include "kernels/kernels.h"
#include "passes/core/tile_plan.h"

namespace tilec::passes {
namespace {

Box Box4(int64_t b, int64_t h, int64_t r0, int64_t r1, int64_t c0,
         int64_t c1) {
  Box box;
  box.rank = 4;
  box.begin = {b, h, r0, c0};
  box.end = {b + 1, h + 1, r1, c1};
  return box;
}

// blocked(B x H) over a [B*T, H*D] view with each block cut again into
// row_parts x col_parts, `replicas` copies, grid axes in `order`: the
// sub-partitions are left out when they are all 1 (the canonical form).
fb::OwnershipT HeadBlocks(const AttentionGrid& g, int row_parts,
                          int col_parts, int replicas,
                          std::vector<int32_t> order_with_sub,
                          std::vector<int32_t> order_without_sub) {
  fb::OwnershipT o = BlockedOwnership(
      {static_cast<int32_t>(g.B), static_cast<int32_t>(g.H)}, replicas,
      g.first);
  if (row_parts > 1 || col_parts > 1) {
    o.sub_partitions = {row_parts, col_parts};
    o.axis_order = std::move(order_with_sub);
  } else {
    o.axis_order = std::move(order_without_sub);
  }
  // The identity order is written as none.
  bool identity = true;
  for (size_t i = 0; i < o.axis_order.size(); ++i) {
    identity = identity && o.axis_order[i] == static_cast<int32_t>(i);
  }
  if (identity) o.axis_order.clear();
  return o;
}

}  // namespace

Box AttentionGrid::View(int which) const {
  if (!cross) {
    return Box2(first_image * Tk, (first_image + B) * Tk, which * H * D,
                (which + 1) * H * D);
  }
  // kv [B*Tk, 2HD]: k heads, then v heads; q is an operand of its own.
  if (which == 0) return Box2(0, B * Tq, 0, H * D);
  return Box2(0, B * Tk, (which - 1) * H * D, which * H * D);
}

std::vector<int> AttentionGrid::StagedViews() const {
  if (part == AttentionPart::kScores) {
    return cross ? std::vector<int>{1} : std::vector<int>{0, 1};
  }
  return {2};
}

std::vector<Box> AttentionGrid::StagedBoxes(int64_t b, int64_t h, int mi,
                                            int ni) const {
  const int64_t k0 = (cross ? 0 : H) * D, v0 = (cross ? H : 2 * H) * D;
  const int64_t image = first_image + b;
  if (part == AttentionPart::kScores) {
    const Box k = Box2(image * Tk + cols.Begin(ni), image * Tk + cols.End(ni),
                       k0 + h * D, k0 + (h + 1) * D);
    if (cross) return {k};
    return {QueryBox(b, h, mi), k};
  }
  const int64_t c0 = v0 + h * D;
  return {Box2(image * Tk, (image + 1) * Tk, c0 + cols.Begin(ni),
               c0 + cols.End(ni))};
}

Box AttentionGrid::QueryBox(int64_t b, int64_t h, int mi) const {
  const int64_t image = first_image + b;
  return Box2(image * Tq + rows.Begin(mi), image * Tq + rows.End(mi), h * D,
              (h + 1) * D);
}

fb::OwnershipT AttentionGrid::QueryNeeded() const { return StagedNeeded(0); }

fb::OwnershipT AttentionGrid::StagedNeeded(int which) const {
  switch (which) {
    case 0:  // q: rows mi of head h, every ni
      return HeadBlocks(*this, m, 1, n, {}, {});
    case 1:  // k: rows ni of head h, every mi
      return HeadBlocks(*this, n, 1, m, {0, 1, 4, 2, 3}, {});
    default:  // v: all rows, columns ni of head h, every mi
      return HeadBlocks(*this, 1, n, m, {0, 1, 4, 2, 3}, {});
  }
}

Box AttentionGrid::ProbsBox(int64_t b, int64_t h, int mi) const {
  return Box4(b, h, rows.Begin(mi), rows.End(mi), 0, Tk);
}

fb::OwnershipT AttentionGrid::ProbsNeeded() const {
  return BlockedOwnership({static_cast<int32_t>(B), static_cast<int32_t>(H),
                           m, 1},
                          n, first);
}

Box AttentionGrid::ResultBox(int64_t b, int64_t h, int mi, int ni) const {
  if (part == AttentionPart::kScores) {
    return Box4(b, h, rows.Begin(mi), rows.End(mi), cols.Begin(ni),
                cols.End(ni));
  }
  return Box2(b * Tq + rows.Begin(mi), b * Tq + rows.End(mi),
              h * D + cols.Begin(ni), h * D + cols.End(ni));
}

fb::OwnershipT AttentionGrid::ResultOwnership() const {
  if (part == AttentionPart::kScores) {
    return BlockedOwnership({static_cast<int32_t>(B), static_cast<int32_t>(H),
                             m, n},
                            1, first);
  }
  return HeadBlocks(*this, m, n, 1, {}, {});
}

void AttentionGrid::ForEachTile(
    const std::function<void(int64_t, int64_t, int, int, int)>& fn) const {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int mi = 0; mi < m; ++mi) {
        for (int ni = 0; ni < n; ++ni) fn(b, h, mi, ni, Tile(b, h, mi, ni));
      }
    }
  }
}

StatusOr<AttentionGrid> MakeAttentionGrid(AttentionPart part,
                                          std::span<const int64_t> qkv_shape,
                                          std::span<const int64_t> probs_shape,
                                          int64_t heads, int64_t head_dim,
                                          int m, int n, int first,
                                          int64_t first_image) {
  auto shape_text = [](std::span<const int64_t> s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) {
      t += (i ? "," : "") + std::to_string(s[i]);
    }
    return t + "]";
  };
  // The staged operand's columns tell the forms apart: the fused qkv
  // (3HD, Tq = Tk) or the kv of a cross-attention (2HD).
  const bool cross = qkv_shape.size() == 2 && heads >= 1 && head_dim >= 1 &&
                     qkv_shape[1] == 2 * heads * head_dim;
  if (probs_shape.size() != 4 || qkv_shape.size() != 2 || heads < 1 ||
      head_dim < 1 || probs_shape[1] != heads || probs_shape[3] < 1 ||
      (!cross && probs_shape[2] != probs_shape[3]) ||
      (cross && first_image != -1) || first_image < -1 ||
      (first_image == -1 &&
       qkv_shape[0] != probs_shape[0] * probs_shape[3]) ||
      (first_image >= 0 &&
       (qkv_shape[0] % probs_shape[3] != 0 ||
        qkv_shape[0] < (first_image + probs_shape[0]) * probs_shape[3])) ||
      (!cross && qkv_shape[1] != 3 * heads * head_dim)) {
    return Status::BadInput(
        "attention shapes disagree: qkv " + shape_text(qkv_shape) +
        (first_image >= 0 ? " from image " + std::to_string(first_image)
                          : std::string()) +
        ", scores/probabilities " + shape_text(probs_shape) + ", " +
        std::to_string(heads) + " heads of " + std::to_string(head_dim) +
        " (expected qkv [B*T, 3*H*D] and [B, H, T, T], or kv [B*Tk, 2*H*D] "
        "and [B, H, Tq, Tk])");
  }
  AttentionGrid g;
  g.part = part;
  g.cross = cross;
  g.B = probs_shape[0];
  g.H = heads;
  g.Tq = probs_shape[2];
  g.Tk = probs_shape[3];
  g.D = head_dim;
  g.first_image = std::max<int64_t>(first_image, 0);
  g.first = first;
  if (first < 0) {
    return Status::BadInput("attention first=" + std::to_string(first) +
                            " is not a tile");
  }
  return g.WithSplits(m, n);
}

StatusOr<AttentionGrid> AttentionGrid::WithSplits(int m_parts,
                                                  int n_parts) const {
  const bool scores = part == AttentionPart::kScores;
  const int64_t col_extent = scores ? Tk : D;
  if (m_parts < 1 || n_parts < 1 || m_parts > Tq || n_parts > col_extent) {
    return Status::BadInput(
        "attention m=" + std::to_string(m_parts) + " n=" +
        std::to_string(n_parts) + " does not fit " + std::to_string(Tq) +
        " query rows and " + std::to_string(col_extent) +
        (scores ? " keys" : " head columns") +
        " (needs 1 <= m <= Tq and 1 <= n <= " + (scores ? "Tk)" : "D)"));
  }
  AttentionGrid g = *this;
  g.m = m_parts;
  g.n = n_parts;
  g.rows = {Tq, m_parts};
  g.cols = {col_extent, n_parts};
  return g;
}

TransferPlan AttentionDelivery(const AttentionGrid& grid,
                               const fb::OwnershipT& qkv_owner,
                               std::span<const int64_t> qkv_shape,
                               int element_bytes) {
  TransferPlan merged;
  for (int which : grid.StagedViews()) {
    const Box view = grid.View(which);
    TransferPlan plan = PlanTransfers(qkv_owner, grid.StagedNeeded(which),
                                      qkv_shape, element_bytes, &view);
    for (Transfer& t : plan.transfers) merged.transfers.push_back(std::move(t));
    for (LocalCopy& c : plan.local_copies) merged.local_copies.push_back(c);
  }
  return merged;
}

StatusOr<int64_t> AttentionKernelCycles(const AttentionGrid& grid,
                                        const kernels::CostModel& model,
                                        fb::DType a_dtype, int mi, int ni) {
  StatusOr<kernels::DType> dtype = kernels::DTypeFromFb(a_dtype);
  if (!dtype.ok()) return dtype.status();
  return kernels::GemmCycles(model, *dtype, grid.rows.Size(mi), grid.Inner(),
                             grid.cols.Size(ni));
}

namespace {

// What the grid position on `tile` stages.
std::vector<Box> StagedBoxesOf(const AttentionGrid& grid, int tile) {
  const int pos = tile - grid.first;
  const int ni = pos % grid.n, mi = (pos / grid.n) % grid.m;
  const int64_t bh = pos / (grid.n * grid.m);
  return grid.StagedBoxes(bh / grid.H, bh % grid.H, mi, ni);
}

}  // namespace

StatusOr<AttentionCost> PriceAttention(const AttentionGrid& grid,
                                       const fb::OwnershipT& qkv_owner,
                                       std::span<const int64_t> qkv_shape,
                                       fb::DType qkv_dtype,
                                       fb::DType probs_dtype,
                                       const kernels::CostModel& model,
                                       const fb::TargetT& target,
                                       PhaseTiming timing) {
  const int eb = ir::DTypeBytes(qkv_dtype);
  const TransferPlan plan = AttentionDelivery(grid, qkv_owner, qkv_shape, eb);
  AttentionCost cost;
  cost.exchange = CostOfPlan(plan, target);
  cost.phases = plan.transfers.empty() ? 0 : 1;
  if (timing == PhaseTiming::kLowerBound) {
    // Each transfer one fragment at either end, which no schedule beats;
    // building the pieces took most of the time a schedule did.
    if (cost.phases > 0) {
      cost.exchange.scheduled_cycles = cost.exchange.bound_cycles;
      cost.exchange.phase_cycles =
          cost.exchange.bound_cycles + target.sync_cycles;
    }
  } else {
    OwnershipStorage held(qkv_owner, qkv_shape);
    std::map<int, Segments> staged_storage;
    TimeExchange(
        TrafficOfTransfers(plan.transfers, eb, target,
                           [&](int tile, bool source) -> const Segments& {
                             if (source) return held.Of(tile);
                             auto it = staged_storage.find(tile);
                             if (it != staged_storage.end()) return it->second;
                             return staged_storage[tile] =
                                        Consecutive(StagedBoxesOf(grid, tile));
                           }),
        target, &cost.exchange, timing);
  }
  // Local copies, per tile into the staging buffer of the box they fill.
  std::vector<int64_t> copies(target.tiles, 0);
  CopyPricer pricer(model);
  for (const LocalCopy& lc : plan.local_copies) {
    const Segments src = Consecutive(HeldBoxes(qkv_owner, qkv_shape, lc.tile));
    // The destination box is the staged box that contains it.
    Box staged;
    for (const Box& s : StagedBoxesOf(grid, lc.tile)) {
      if (!IntersectBoxes(s, lc.box).Empty()) staged = s;
    }
    const Segments dst = {Segment{staged, 0}};
    StatusOr<int64_t> c = pricer.Cycles(lc.box, src, dst, eb);
    if (!c.ok()) return c.status();
    copies[lc.tile] += *c;
  }
  const fb::DType a_dtype =
      grid.part == AttentionPart::kScores ? qkv_dtype : probs_dtype;
  int64_t combined = 0;
  Status status;
  grid.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
    if (!status.ok()) return;
    StatusOr<int64_t> k = AttentionKernelCycles(grid, model, a_dtype, mi, ni);
    if (!k.ok()) {
      status = k.status();
      return;
    }
    if (*k > cost.kernel_cycles) {
      cost.kernel_cycles = *k;
      cost.busiest_tile = t;
    }
    cost.copy_cycles = std::max(cost.copy_cycles, copies[t]);
    combined = std::max(combined, copies[t] + *k);
    int64_t staged = 0;
    for (const Box& s : grid.StagedBoxes(b, h, mi, ni)) {
      staged += s.Elements() * eb;
    }
    cost.stage_bytes = std::max(cost.stage_bytes, staged);
  });
  if (!status.ok()) return status;
  cost.compute = cost.phases == 0 ? combined
                                  : cost.copy_cycles + cost.kernel_cycles;
  return cost;
}

}  // namespace tilec::passes
