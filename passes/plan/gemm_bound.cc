#include "passes/plan/gemm_bound.h"

#include <algorithm>

#include "formats/basics.h"
#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"
#include "kernels/fb_dtype.h"

namespace tilec::plan {
namespace {

bool Is16Bit(fb::DType d) {
  return d == fb::DType::F16 || d == fb::DType::BF16;
}

// Fastest first; ties: fewer tiles.
void SortBounds(std::vector<GemmBound>& bounds) {
  std::stable_sort(bounds.begin(), bounds.end(),
                   [](const GemmBound& x, const GemmBound& y) {
                     if (x.Cycles() != y.Cycles()) return x.Cycles() < y.Cycles();
                     return int64_t{x.m} * x.k * x.n < int64_t{y.m} * y.k * y.n;
                   });
}

}  // namespace

std::vector<int> DistinctSplits(int64_t extent, int64_t limit) {
  std::vector<int> parts;
  int64_t previous = -1;
  for (int64_t p = 1; p <= std::min(extent, limit); ++p) {
    const int64_t block = ir::CeilDiv(extent, p);
    if (block != previous) parts.push_back(static_cast<int>(p));
    previous = block;
  }
  return parts;
}

StatusOr<GemmBound> BoundOfGrid(const kernels::CostModel& model,
                                const GemmShapeDTypes& gemm, int m, int k,
                                int n) {
  StatusOr<kernels::DType> kdtype = kernels::DTypeFromFb(gemm.inputs);
  if (!kdtype.ok()) return kdtype.status();
  const int ab = ir::DTypeBytes(gemm.inputs);
  const int pb = Is16Bit(gemm.result) ? 2 : 4;
  const int64_t bm = ir::CeilDiv(gemm.M, m), bk = ir::CeilDiv(gemm.K, k),
                bn = ir::CeilDiv(gemm.N, n);
  const int64_t share = ir::CeilDiv(bm, k);
  const fb::TargetT& t = model.target();
  GemmBound b;
  b.m = m;
  b.k = k;
  b.n = n;
  StatusOr<int64_t> kernel = kernels::GemmCycles(model, *kdtype, bm, bk, bn);
  if (!kernel.ok()) return kernel.status();
  b.kernel = *kernel;
  const kernels::ExchangeModel x = kernels::ExchangeModel::FromTarget(t);
  b.delivery = x.PhaseLowerBound(bm * bk * ab);
  b.weight_bytes = bk * bn * ab;
  b.bytes = b.weight_bytes + bm * bk * ab;
  if (k > 1) {
    const int64_t received = (k - 1) * share * bn * pb;
    const int64_t sent = (bm - share) * bn * pb;
    b.partials = x.PhaseLowerBound(std::max(received, sent));
    StatusOr<int64_t> reduce = kernels::ReducePartialsCycles(model, share * bn, k);
    if (!reduce.ok()) return reduce.status();
    b.reduce = *reduce;
    b.bytes += bm * bn * pb + received;
  }
  return b;
}

std::vector<GemmBound> GridBounds(const kernels::CostModel& model,
                                  const GemmShapeDTypes& gemm, int64_t tiles,
                                  int64_t capacity) {
  std::vector<GemmBound> bounds;
  for (int m : DistinctSplits(gemm.M, tiles)) {
    for (int n : DistinctSplits(gemm.N, tiles / m)) {
      for (int k : DistinctSplits(gemm.K, tiles / (int64_t{m} * n))) {
        if (int64_t{m} * k > gemm.M) break;
        StatusOr<GemmBound> b = BoundOfGrid(model, gemm, m, k, n);
        if (b.ok() && b->bytes <= capacity) bounds.push_back(*b);
      }
    }
  }
  SortBounds(bounds);
  return bounds;
}

StatusOr<GemmBound> AttentionBoundOfGrid(const kernels::CostModel& model,
                                         const passes::AttentionGrid& grid,
                                         const AttentionDTypes& dtypes) {
  const bool scores = grid.part == passes::AttentionPart::kScores;
  StatusOr<int64_t> kernel = passes::AttentionKernelCycles(
      grid, model, scores ? dtypes.qkv : dtypes.probs, 0, 0);
  if (!kernel.ok()) return kernel.status();
  // Block 0 of a balanced split is the largest.
  int64_t received = 0;
  for (const passes::Box& b : grid.StagedBoxes(0, 0, 0, 0)) {
    received += b.Elements() * ir::DTypeBytes(dtypes.qkv);
  }
  if (!scores) {
    received += grid.ProbsBox(0, 0, 0).Elements() * ir::DTypeBytes(dtypes.probs);
  } else if (grid.cross) {
    // Cross-attention's queries are an operand of their own (not staged).
    received += grid.QueryBox(0, 0, 0).Elements() * ir::DTypeBytes(dtypes.qkv);
  }
  const fb::TargetT& t = model.target();
  GemmBound b;
  b.m = grid.m;
  b.n = grid.n;
  b.kernel = *kernel;
  b.delivery =
      kernels::ExchangeModel::FromTarget(t).PhaseLowerBound(received);
  b.bytes = received +
            grid.ResultBox(0, 0, 0, 0).Elements() * ir::DTypeBytes(dtypes.result);
  return b;
}

std::vector<GemmBound> AttentionGridBounds(const kernels::CostModel& model,
                                           const passes::AttentionGrid& grid,
                                           const AttentionDTypes& dtypes,
                                           int64_t tiles, int64_t capacity) {
  std::vector<GemmBound> bounds;
  const int64_t heads = grid.B * grid.H;
  if (heads > tiles) return bounds;
  for (int m : DistinctSplits(grid.Tq, tiles / heads)) {
    for (int n : DistinctSplits(grid.cols.extent, tiles / (heads * m))) {
      StatusOr<passes::AttentionGrid> g = grid.WithSplits(m, n);
      if (!g.ok()) continue;
      StatusOr<GemmBound> b = AttentionBoundOfGrid(model, *g, dtypes);
      if (b.ok() && b->bytes <= capacity) bounds.push_back(*b);
    }
  }
  SortBounds(bounds);
  return bounds;
}

}  // namespace tilec::plan
