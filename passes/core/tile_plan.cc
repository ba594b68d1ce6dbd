#include "passes/core/tile_plan.h"

#include <algorithm>

#include "kernels/kernels.h"

namespace tilec::passes {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

Box Box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Box b;
  b.rank = 2;
  b.begin = {r0, c0, 0, 0};
  b.end = {r1, c1, 0, 0};
  if (r1 <= r0 || c1 <= c0) b.begin = b.end = {0, 0, 0, 0};
  return b;
}

}  // namespace

// ---------------------------------------------------------------- grid

Box GemmGrid::ABox(int mi, int ki) const {
  return Box2(rows.Begin(mi), rows.End(mi), depth.Begin(ki), depth.End(ki));
}
Box GemmGrid::BBox(int ki, int ni) const {
  return Box2(depth.Begin(ki), depth.End(ki), cols.Begin(ni), cols.End(ni));
}
Box GemmGrid::CBox(int mi, int ni) const {
  return Box2(rows.Begin(mi), rows.End(mi), cols.Begin(ni), cols.End(ni));
}

fb::OwnershipT GemmGrid::ANeeded() const {
  fb::OwnershipT o = BlockedOwnership({m, k}, n, first, stride);
  o.axis_order = {0, 2, 1};
  return o;
}

int GemmGrid::Chunks(int ki) const {
  return static_cast<int>(CeilDiv(depth.Size(ki), std::max<int64_t>(phase_k, 1)));
}

GemmGrid MakeGemmGrid(int64_t M, int64_t K, int64_t N, int m, int k, int n,
                      int first, int stride, fb::Staging staging, int chunk_k,
                      int batch_chunks) {
  GemmGrid g;
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

std::vector<ReduceRange> GemmRanges(const GemmGrid& g,
                                    const fb::OwnershipT& result,
                                    std::span<const int64_t> result_shape) {
  std::vector<ReduceRange> ranges;
  ForEachHeldBoxes(result, result_shape,
                   [&](int tile, std::span<const Box> boxes) {
    for (const Box& rb : boxes) {
      const int64_t mi0 = g.rows.PartOf(rb.begin[0]);
      const int64_t mi1 = g.rows.PartOf(rb.end[0] - 1);
      const int64_t ni0 = g.cols.PartOf(rb.begin[1]);
      const int64_t ni1 = g.cols.PartOf(rb.end[1] - 1);
      for (int64_t mi = mi0; mi <= mi1; ++mi) {
        for (int64_t ni = ni0; ni <= ni1; ++ni) {
          ReduceRange r;
          r.tile = tile;
          r.mi = static_cast<int>(mi);
          r.ni = static_cast<int>(ni);
          r.box = IntersectBoxes(rb, g.CBox(r.mi, r.ni));
          if (r.box.Empty()) continue;
          for (int ki = 0; ki < g.k; ++ki) {
            if (g.Tile(r.mi, r.ni, ki) == tile) r.seed_ki = ki;
          }
          ranges.push_back(r);
        }
      }
    }
  });
  return ranges;
}

bool StridedSeeds(const GemmGrid& g, std::span<const ReduceRange> ranges) {
  for (const ReduceRange& r : ranges) {
    if (r.seed_ki < 0) continue;
    const Box block = g.CBox(r.mi, r.ni);
    // A column sub-range of a block is contiguous only as one row or as the
    // block's whole width.
    if (BoxRows(r.box) > 1 && BoxWidth(r.box) != BoxWidth(block)) return true;
  }
  return false;
}

std::vector<std::pair<int64_t, int64_t>> SeedColumnPieces(
    const GemmGrid& g, int ni, std::span<const Box> seeds) {
  std::vector<std::pair<int64_t, int64_t>> pieces;
  SeedColumnPieces(g, ni, seeds, &pieces);
  return pieces;
}

void SeedColumnPieces(const GemmGrid& g, int ni, std::span<const Box> seeds,
                      std::vector<std::pair<int64_t, int64_t>>* pieces) {
  const int64_t c0 = g.cols.Begin(ni), c1 = g.cols.End(ni);
  pieces->clear();
  pieces->push_back({c0, c1});
  // Split the piece holding each cut (a tile reduces one or two ranges).
  for (const Box& b : seeds) {
    for (int64_t cut : {b.begin[1], b.end[1]}) {
      for (size_t i = 0; i < pieces->size(); ++i) {
        auto [lo, hi] = (*pieces)[i];
        if (cut <= lo || cut >= hi) continue;
        (*pieces)[i].second = cut;
        pieces->insert(pieces->begin() + i + 1, {cut, hi});
        break;
      }
    }
  }
}

std::vector<std::pair<int64_t, int64_t>> BlockColumns(const GemmGrid& g,
                                                     int ni) {
  return {{g.cols.Begin(ni), g.cols.End(ni)}};
}

Segments PartialSegments(const GemmGrid& g, int mi,
                         std::span<const std::pair<int64_t, int64_t>> columns,
                         int alignment) {
  Segments segments;
  PartialSegments(g, mi, columns, alignment, &segments);
  return segments;
}

void PartialSegments(const GemmGrid& g, int mi,
                     std::span<const std::pair<int64_t, int64_t>> columns,
                     int alignment, Segments* segments) {
  // AlignedPieces of the F32 column pieces, without a temporary.
  segments->clear();
  int64_t bytes = 0;
  for (const auto& [c0, c1] : columns) {
    bytes = (bytes + alignment - 1) / alignment * alignment;
    const Box box = Box2(g.rows.Begin(mi), g.rows.End(mi), c0, c1);
    segments->push_back({box, bytes / 4});
    bytes += box.Elements() * 4;
  }
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

StatusOr<int64_t> GemmTilePlanner::PieceCycles(
    int64_t m, int64_t k, std::span<const std::pair<int64_t, int64_t>> columns) {
  int64_t cycles = 0;
  for (const auto& [c0, c1] : columns) {
    StatusOr<int64_t> c = Gemm(m, k, c1 - c0);
    if (!c.ok()) return c.status();
    cycles += *c;
  }
  return cycles;
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
  const int64_t r0 = g.rows.Begin(in.mi), r1 = g.rows.End(in.mi);
  const Box a_box = g.ABox(in.mi, in.ki);
  if (in.alias_in_place && in.a_storage != nullptr &&
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
  std::vector<Box>& piece_boxes = piece_boxes_;
  for (int c = 0; c < tile_chunks; ++c) {
    GemmTileGeometry::Chunk& chunk = geo.chunks[c];
    const int64_t kc0 = kb0 + c * g.phase_k;
    const int64_t kc1 = std::min(kb0 + bk, kc0 + g.phase_k);
    chunk.span = Box2(r0, r1, kc0, kc1);
    chunk.cuts.assign({kc0, kc1});
    chunk.local = false;
    chunk.whole_copy_cycles = chunk.whole_copy_runs = 0;
    chunk.piece_copy_cycles = chunk.piece_copy_runs = 0;
    parts.clear();
    for (const Box& local : in.local) {
      const Box part = IntersectBoxes(local, chunk.span);
      if (part.Empty()) continue;
      parts.push_back(part);
      for (const Segment& s : *in.a_storage) {
        const Box stored = IntersectBoxes(part, s.box);
        if (stored.Empty()) continue;
        chunk.cuts.push_back(stored.begin[1]);
        chunk.cuts.push_back(stored.end[1]);
      }
    }
    if (parts.empty()) continue;
    chunk.local = true;
    geo.local = true;
    std::sort(chunk.cuts.begin(), chunk.cuts.end());
    chunk.cuts.erase(std::unique(chunk.cuts.begin(), chunk.cuts.end()),
                     chunk.cuts.end());
    piece_boxes.clear();
    for (size_t i = 0; i + 1 < chunk.cuts.size(); ++i) {
      piece_boxes.push_back(Box2(r0, r1, chunk.cuts[i], chunk.cuts[i + 1]));
    }
    Segments& whole = whole_;
    whole.assign(1, Segment{chunk.span, 0});
    // AlignedPieces(piece_boxes), into reused memory.
    Segments& cut = cut_;
    cut.clear();
    int64_t bytes = 0;
    for (const Box& b : piece_boxes) {
      bytes = (bytes + alignment_ - 1) / alignment_ * alignment_;
      cut.push_back({b, bytes / a_element_bytes_});
      bytes += b.Elements() * a_element_bytes_;
    }
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
  const int64_t bm = grid_.rows.Size(in.mi);
  plan->aliased = geo.aliased;
  plan->chunks.resize(geo.chunks.size());
  // Both ways on this tile: one panel per chunk, or K pieces.
  int64_t cost_rows = 0, cost_pieces = 0;
  for (size_t c = 0; c < geo.chunks.size(); ++c) {
    const GemmTileGeometry::Chunk& chunk = geo.chunks[c];
    GemmChunkPlan& out = plan->chunks[c];
    StatusOr<int64_t> whole =
        PieceCycles(bm, chunk.cuts.back() - chunk.cuts.front(), in.columns);
    if (!whole.ok()) return whole.status();
    out.span = chunk.span;
    out.whole_gemm_cycles = *whole;
    out.whole_copy_cycles = chunk.whole_copy_cycles;
    // For now the K-pieced figures; replaced below if the tile keeps one
    // panel per chunk.
    out.gemm_cycles = *whole;
    out.calls = static_cast<int64_t>(in.columns.size());
    out.copy_cycles = chunk.whole_copy_cycles;
    out.copy_runs = chunk.whole_copy_runs;
    cost_rows += *whole + chunk.whole_copy_cycles;
    if (chunk.local) {
      out.gemm_cycles = 0;
      out.calls = 0;
      for (size_t i = 0; i + 1 < chunk.cuts.size(); ++i) {
        StatusOr<int64_t> p =
            PieceCycles(bm, chunk.cuts[i + 1] - chunk.cuts[i], in.columns);
        if (!p.ok()) return p.status();
        out.gemm_cycles += *p;
        out.calls += static_cast<int64_t>(in.columns.size());
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
    chunk.calls = static_cast<int64_t>(in.columns.size());
    chunk.copy_cycles = chunk.whole_copy_cycles;
    chunk.copy_runs = g.whole_copy_runs;
  }
  return Status::Ok();
}

}  // namespace tilec::passes
