#include "passes/core/tile_plan.h"

#include <algorithm>

#include "formats/basics.h"
#include "kernels/kernels.h"

namespace tilec::passes {

// ---------------------------------------------------------------- grid

GemmGrid::RowRuns GemmGrid::StepRuns(int mi, int step) const {
  RowRuns runs;
  StepRuns(mi, step, &runs);
  return runs;
}

void GemmGrid::StepRuns(int mi, int step, RowRuns* runs) const {
  runs->clear();
  if (!interleaved) {
    const Split part{rows.Size(mi), steps};
    if (part.Size(step) > 0) {
      runs->push_back({rows.Begin(mi) + part.Begin(step),
                       rows.Begin(mi) + part.End(step)});
    }
    return;
  }
  for (int ki = 0; ki < k; ++ki) {
    const auto [r0, r1] = ReducerStepRows(mi, ki, step);
    if (r1 > r0) runs->push_back({r0, r1});
  }
}

std::pair<int64_t, int64_t> GemmGrid::ReducerStepRows(int mi, int ki,
                                                      int step) const {
  const Split reduced = ReduceRows(mi);
  const Split part{reduced.Size(ki), steps};
  const int64_t begin = rows.Begin(mi) + reduced.Begin(ki);
  return {begin + part.Begin(step), begin + part.End(step)};
}

int64_t GemmGrid::StepRowCount(int mi, int step) const {
  if (!interleaved) return Split{rows.Size(mi), steps}.Size(step);
  int64_t count = 0;
  for (int ki = 0; ki < k; ++ki) {
    const auto [r0, r1] = ReducerStepRows(mi, ki, step);
    count += r1 - r0;
  }
  return count;
}

int64_t GemmGrid::PanelRow(int mi, int step, int64_t row) const {
  int64_t before = 0;
  for (const auto& [r0, r1] : StepRuns(mi, step)) {
    if (row >= r0 && row < r1) return before + row - r0;
    before += r1 - r0;
  }
  return before;
}

Segments GemmGrid::StepPanel(int mi, int step, int64_t c0, int64_t c1) const {
  Segments panel;
  int64_t offset = 0;
  for (const auto& [r0, r1] : StepRuns(mi, step)) {
    panel.push_back({Box2(r0, r1, c0, c1), offset});
    offset += (r1 - r0) * (c1 - c0);
  }
  return panel;
}

Segments GemmGrid::StepPanelPieces(int mi, int step,
                                   std::span<const int64_t> cuts,
                                   int element_bytes, int alignment) const {
  Segments out;
  StepPanelPieces(StepRuns(mi, step), cuts, element_bytes, alignment, &out);
  return out;
}

void GemmGrid::StepPanelPieces(const RowRuns& runs,
                               std::span<const int64_t> cuts,
                               int element_bytes, int alignment,
                               Segments* out) {
  out->clear();
  int64_t bytes = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    bytes = ir::RoundUp(bytes, alignment);
    for (const auto& [r0, r1] : runs) {
      const Box piece = Box2(r0, r1, cuts[i], cuts[i + 1]);
      out->push_back({piece, bytes / element_bytes});
      bytes += piece.Elements() * element_bytes;
    }
  }
}

Box GemmGrid::StepResultBox(int mi, int ki, int ni, int step) const {
  if (interleaved) {
    const auto [r0, r1] = ReducerStepRows(mi, ki, step);
    return Box2(r0, r1, cols.Begin(ni), cols.End(ni));
  }
  const Split part{rows.Size(mi), steps};
  return IntersectBoxes(
      ResultBox(mi, ki, ni),
      Box2(rows.Begin(mi) + part.Begin(step), rows.Begin(mi) + part.End(step),
           cols.Begin(ni), cols.End(ni)));
}

int64_t GemmGrid::MostStepResultRows(int mi, int ki) const {
  int64_t most = 0;
  for (int step = 0; step < steps; ++step) {
    most = std::max(most, BoxRows(StepResultBox(mi, ki, 0, step)));
  }
  return most;
}

Box GemmGrid::ABox(int mi, int ki) const {
  return Box2(rows.Begin(mi), rows.End(mi), depth.Begin(ki), depth.End(ki));
}
Box GemmGrid::BBox(int ki, int ni) const {
  return Box2(depth.Begin(ki), depth.End(ki), cols.Begin(ni), cols.End(ni));
}
Box GemmGrid::CBox(int mi, int ni) const {
  return Box2(rows.Begin(mi), rows.End(mi), cols.Begin(ni), cols.End(ni));
}

Box GemmGrid::ResultBox(int mi, int ki, int ni) const {
  if (k == 1) return CBox(mi, ni);
  const Split part = ReduceRows(mi);
  return Box2(rows.Begin(mi) + part.Begin(ki), rows.Begin(mi) + part.End(ki),
              cols.Begin(ni), cols.End(ni));
}

fb::OwnershipT GemmGrid::ANeeded() const {
  return BlockedOwnership({m, k}, n, first, stride);
}

fb::OwnershipT GemmGrid::BNeeded() const {
  fb::OwnershipT o = BlockedOwnership({k, n}, m, first, stride);
  o.axis_order = {2, 0, 1};
  return o;
}

fb::OwnershipT GemmGrid::ResultOwnership() const {
  if (k == 1) return BlockedOwnership({m, n}, 1, first, stride);
  // Part ki of block mi is part mi*k + ki of a balanced split of all rows
  // when every block's parts start where that split's do.
  const Split whole{M, int64_t{m} * k};
  bool same = true;
  for (int mi = 0; mi < m && same; ++mi) {
    const Split part = ReduceRows(mi);
    for (int ki = 0; ki < k && same; ++ki) {
      same = rows.Begin(mi) + part.Begin(ki) == whole.Begin(mi * k + ki);
    }
  }
  if (same) return BlockedOwnership({m * k, n}, 1, first, stride);
  fb::OwnershipT o = BlockedOwnership({m, n}, 1, first, stride);
  o.sub_partitions = {k, 1};
  o.axis_order = {0, 2, 1, 3, 4};
  return o;
}

int GemmGrid::Chunks(int ki) const {
  return static_cast<int>(
      ir::CeilDiv(depth.Size(ki), std::max<int64_t>(phase_k, 1)));
}

GemmGrid MakeGemmGrid(int64_t M, int64_t K, int64_t N, int m, int k, int n,
                      int first, int stride, fb::Staging staging, int chunk_k,
                      int batch_chunks, int steps, bool interleaved) {
  GemmGrid g;
  g.steps = steps;
  // With one part of the rows per block, interleaving is contiguous.
  g.interleaved = interleaved && k > 1;
  g.M = M;
  g.K = K;
  g.N = N;
  g.m = m;
  g.k = k;
  g.n = n;
  g.first = first;
  g.stride = stride;
  g.rows = {M, m};
  g.depth = {K, k};
  g.cols = {N, n};
  g.staged = staging != fb::Staging::Complete;
  if (g.staged) {
    const int64_t per =
        staging == fb::Staging::Batched ? std::max(1, batch_chunks) : 1;
    g.phase_k = int64_t{std::max(chunk_k, 1)} * per;
  } else {
    g.phase_k = g.depth.Largest();
  }
  return g;
}

fb::DType PartialsDType(const GemmGrid& grid, fb::DType result,
                        bool allow_16bit) {
  const bool half = result == fb::DType::F16 || result == fb::DType::BF16;
  return allow_16bit && half && !grid.staged ? result : fb::DType::F32;
}

// ---------------------------------------------------------------- one tile

GemmTilePlanner::GemmTilePlanner(const GemmGrid& grid,
                                 const kernels::CostModel& model,
                                 kernels::DType a_dtype, int a_element_bytes,
                                 int alignment)
    : grid_(grid),
      model_(model),
      a_dtype_(a_dtype),
      a_element_bytes_(a_element_bytes),
      alignment_(alignment),
      copies_(model) {}

StatusOr<int64_t> GemmTilePlanner::Gemm(int64_t m, int64_t k, int64_t n) {
  const uint64_t key = (static_cast<uint64_t>(m) << 42) ^
                       (static_cast<uint64_t>(k) << 21) ^
                       static_cast<uint64_t>(n);
  if (gemm_cache_.empty()) gemm_cache_.resize(1 << 12);
  GemmEntry& e =
      gemm_cache_[(key * 0x9E3779B97F4A7C15ull) >> (64 - 12)];
  if (e.key == key) return e.cycles;
  StatusOr<int64_t> c = kernels::GemmCycles(model_, a_dtype_, m, k, n);
  if (!c.ok()) return c.status();
  e.key = key;
  e.cycles = *c;
  return *c;
}

StatusOr<int64_t> GemmTilePlanner::CopyCycles(const Box& box,
                                              const Segments& src,
                                              const Segments& dst,
                                              int element_bytes,
                                              int64_t* runs) {
  return copies_.Cycles(box, src, dst, element_bytes, runs);
}

StatusOr<int64_t> CopyPricer::Cycles(const Box& box, const Segments& src,
                                     const Segments& dst, int element_bytes,
                                     int64_t* runs) {
  if (!CountRuns(box, src, dst, &groups_)) {
    return Status::Internal("box " + FormatBox(box) + " is not held by [" +
                            SegmentsText(src) + "] or [" + SegmentsText(dst) +
                            "]");
  }
  int64_t cycles = 0;
  for (const RunGroup& g : groups_) {
    const int64_t bytes = g.elements * element_bytes;
    auto it = cache_.find(bytes);
    if (it == cache_.end()) {
      StatusOr<int64_t> c = kernels::CopyCycles(model_, bytes);
      if (!c.ok()) return c.status();
      it = cache_.emplace(bytes, *c).first;
    }
    cycles += g.count * it->second;
    if (runs != nullptr) *runs += g.count;
  }
  return cycles;
}

StatusOr<GemmTilePlan> GemmTilePlanner::Plan(const GemmTileInput& in) {
  StatusOr<GemmTileGeometry> geometry = Geometry(in);
  if (!geometry.ok()) return geometry.status();
  return Plan(*geometry, in);
}

StatusOr<GemmTileGeometry> GemmTilePlanner::Geometry(const GemmTileInput& in) {
  GemmTileGeometry geo;
  TILEC_RETURN_IF_ERROR(Geometry(in, &geo));
  return geo;
}

Status GemmTilePlanner::Geometry(const GemmTileInput& in,
                                 GemmTileGeometry* out) {
  const GemmGrid& g = grid_;
  GemmTileGeometry& geo = *out;
  geo.aliased = false;
  geo.local = false;
  const int64_t bk = g.depth.Size(in.ki), kb0 = g.depth.Begin(in.ki);
  GemmGrid::RowRuns& runs = runs_;
  g.StepRuns(in.mi, in.step, &runs);
  if (runs.empty()) {  // a block of fewer rows than steps
    geo.chunks.clear();
    return Status::Ok();
  }
  // In place needs the panel to be one run of rows.
  const Box a_box = Box2(runs[0].first, runs[0].second, kb0, kb0 + bk);
  if (in.alias_in_place && in.a_storage != nullptr && runs.size() == 1 &&
      ContiguousOffset(a_box, *in.a_storage)) {
    geo.aliased = true;
    geo.chunks.resize(1);
    GemmTileGeometry::Chunk& chunk = geo.chunks[0];
    chunk = GemmTileGeometry::Chunk();
    chunk.span = a_box;
    chunk.cuts.assign({a_box.begin[1], a_box.end[1]});
    return Status::Ok();
  }
  // Per chunk: the local parts, and the K cuts where they meet the
  // segments A is stored in: a part that spans all rows of a stored piece
  // then arrives in one copy per piece instead of one per row.
  const int tile_chunks = g.Chunks(in.ki);
  geo.chunks.resize(tile_chunks);
  std::vector<Box>& parts = parts_;
  for (int c = 0; c < tile_chunks; ++c) {
    GemmTileGeometry::Chunk& chunk = geo.chunks[c];
    const int64_t kc0 = kb0 + c * g.phase_k;
    const int64_t kc1 = std::min(kb0 + bk, kc0 + g.phase_k);
    chunk.span = Box2(runs.front().first, runs.back().second, kc0, kc1);
    chunk.cuts.assign({kc0, kc1});
    chunk.local = false;
    chunk.whole_copy_cycles = chunk.whole_copy_runs = 0;
    chunk.piece_copy_cycles = chunk.piece_copy_runs = 0;
    parts.clear();
    for (const Box& local : in.local) {
      for (const auto& [r0, r1] : runs) {
        const Box part = IntersectBoxes(local, Box2(r0, r1, kc0, kc1));
        if (part.Empty()) continue;
        parts.push_back(part);
        for (const Segment& s : *in.a_storage) {
          const Box stored = IntersectBoxes(part, s.box);
          if (stored.Empty()) continue;
          chunk.cuts.push_back(stored.begin[1]);
          chunk.cuts.push_back(stored.end[1]);
        }
      }
    }
    if (parts.empty()) continue;
    chunk.local = true;
    geo.local = true;
    std::sort(chunk.cuts.begin(), chunk.cuts.end());
    chunk.cuts.erase(std::unique(chunk.cuts.begin(), chunk.cuts.end()),
                     chunk.cuts.end());
    const int64_t whole_cuts[] = {kc0, kc1};
    Segments& whole = whole_;
    Segments& cut = cut_;
    GemmGrid::StepPanelPieces(runs, whole_cuts, a_element_bytes_, alignment_,
                              &whole);
    GemmGrid::StepPanelPieces(runs, chunk.cuts, a_element_bytes_, alignment_,
                              &cut);
    for (const Box& part : parts) {
      StatusOr<int64_t> rows = CopyCycles(part, *in.a_storage, whole,
                                          a_element_bytes_,
                                          &chunk.whole_copy_runs);
      if (!rows.ok()) return rows.status();
      StatusOr<int64_t> pieces = CopyCycles(part, *in.a_storage, cut,
                                            a_element_bytes_,
                                            &chunk.piece_copy_runs);
      if (!pieces.ok()) return pieces.status();
      chunk.whole_copy_cycles += *rows;
      chunk.piece_copy_cycles += *pieces;
    }
  }
  return Status::Ok();
}

StatusOr<GemmTilePlan> GemmTilePlanner::Plan(const GemmTileGeometry& geo,
                                             const GemmTileInput& in) {
  GemmTilePlan plan;
  TILEC_RETURN_IF_ERROR(Plan(geo, in, &plan));
  return plan;
}

Status GemmTilePlanner::Plan(const GemmTileGeometry& geo,
                             const GemmTileInput& in, GemmTilePlan* plan) {
  const int64_t bm = grid_.StepRowCount(in.mi, in.step),
                bn = grid_.cols.Size(in.ni);
  plan->aliased = geo.aliased;
  plan->chunks.resize(geo.chunks.size());
  // Both ways on this tile: one panel per chunk, or K pieces.
  int64_t cost_rows = 0, cost_pieces = 0;
  for (size_t c = 0; c < geo.chunks.size(); ++c) {
    const GemmTileGeometry::Chunk& chunk = geo.chunks[c];
    GemmChunkPlan& out = plan->chunks[c];
    StatusOr<int64_t> whole =
        Gemm(bm, chunk.cuts.back() - chunk.cuts.front(), bn);
    if (!whole.ok()) return whole.status();
    out.span = chunk.span;
    out.whole_gemm_cycles = *whole;
    out.whole_copy_cycles = chunk.whole_copy_cycles;
    // For now the K-pieced figures; replaced below if the tile keeps one
    // panel per chunk.
    out.gemm_cycles = *whole;
    out.calls = 1;
    out.copy_cycles = chunk.whole_copy_cycles;
    out.copy_runs = chunk.whole_copy_runs;
    cost_rows += *whole + chunk.whole_copy_cycles;
    if (chunk.local) {
      out.gemm_cycles = 0;
      out.calls = 0;
      for (size_t i = 0; i + 1 < chunk.cuts.size(); ++i) {
        StatusOr<int64_t> p = Gemm(bm, chunk.cuts[i + 1] - chunk.cuts[i], bn);
        if (!p.ok()) return p.status();
        out.gemm_cycles += *p;
        ++out.calls;
      }
      out.copy_cycles = chunk.piece_copy_cycles;
      out.copy_runs = chunk.piece_copy_runs;
    }
    cost_pieces += out.gemm_cycles + out.copy_cycles;
  }
  plan->k_pieced = !geo.aliased && in.k_pieces && cost_pieces < cost_rows;
  for (size_t c = 0; c < geo.chunks.size(); ++c) {
    const GemmTileGeometry::Chunk& g = geo.chunks[c];
    GemmChunkPlan& chunk = plan->chunks[c];
    if (plan->k_pieced && g.local) {
      chunk.cuts = g.cuts;
      continue;
    }
    chunk.cuts.assign({g.cuts.front(), g.cuts.back()});
    chunk.gemm_cycles = chunk.whole_gemm_cycles;
    chunk.calls = 1;
    chunk.copy_cycles = chunk.whole_copy_cycles;
    chunk.copy_runs = g.whole_copy_runs;
  }
  return Status::Ok();
}

}  // namespace tilec::passes
