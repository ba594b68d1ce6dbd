#include "passes/plan/cost.h"

#include <glog/logging.h>

#include <algorithm>
#include <unordered_map>

#include "formats/print.h"
#include "kernels/kernels.h"
#include "passes/core/tile_plan.h"

namespace tilec::plan {
namespace {

using passes::BlockedOwnership;
using passes::Box;
using passes::FormatOwnership;
using passes::Segments;
using passes::TransferCost;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string OwnKey(const fb::OwnershipT& o) { return FormatOwnership(o); }

fb::OwnershipT WithOrder(fb::OwnershipT o, std::vector<int32_t> order) {
  o.axis_order = std::move(order);
  return o;
}

}  // namespace

std::string CutsText(const Cuts& cuts) {
  if (!cuts) return "";
  return " cut(" + std::to_string(cuts->extent) + "/" +
         std::to_string(cuts->parts) + ")";
}

std::string ShapeKey(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

StatusOr<Coster> Coster::Create(const fb::TargetT& target,
                                const PriceOptions& options) {
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(target);
  if (!model.ok()) return model.status();
  Coster c;
  c.model_ = *model;
  c.options_ = options;
  return c;
}

int Coster::KGranule(fb::DType dtype) const {
  const char* kernel =
      dtype == fb::DType::F32 ? "gemm_f32"
      : (dtype == fb::DType::FP8E4M3 || dtype == fb::DType::FP8E5M2)
          ? "gemm_fp8"
          : "gemm_f16";
  StatusOr<const fb::KernelFormulaT*> f = model().Formula(kernel);
  int granule = 1;
  if (f.ok()) {
    for (const auto& term : (*f)->terms) {
      for (const auto& factor : term->factors) {
        if (factor->variable == "K")
          granule = std::max(granule, factor->divisor);
      }
    }
  }
  return granule;
}

fb::DType Coster::GemmDType(const Graph& graph, int op) const {
  if (options_.gemm_dtype) return *options_.gemm_dtype;
  return graph.value(graph.op(op).operands[0]).dtype;
}

int Coster::StoredBytes(const Graph& graph, int value) const {
  const ValueNode& v = graph.value(value);
  if (options_.gemm_dtype && v.role == fb::ValueRole::Weight &&
      !v.uses.empty()) {
    bool only_resident = true;
    for (const auto& [op, slot] : v.uses) {
      only_resident =
          only_resident && graph.op(op).slots[slot] == SlotRole::kResident;
    }
    if (only_resident) return DTypeBytes(*options_.gemm_dtype);
  }
  return DTypeBytes(v.dtype);
}

std::string Coster::CheckRecipe(const Graph& graph, int op,
                                const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const ValueNode& result = graph.value(node.result);
  const int tiles = target().tiles;
  auto kind_name = [](OpClass c) {
    switch (c) {
      case OpClass::kGemm:
        return "gemm";
      case OpClass::kElementwise:
        return "elementwise";
      case OpClass::kRowWise:
        return "rowwise";
      case OpClass::kCopy:
        return "copy";
    }
    return "?";
  };
  const fb::RecipeKind expected =
      node.op_class == OpClass::kGemm          ? fb::RecipeKind::Gemm
      : node.op_class == OpClass::kElementwise ? fb::RecipeKind::Elementwise
      : node.op_class == OpClass::kRowWise     ? fb::RecipeKind::RowWise
                                               : fb::RecipeKind::Copy;
  if (r.kind != expected) {
    const std::string kind = kind_name(node.op_class);
    return graph.OpLabel(op) + " is a " + ir::OpKindText(node.kind) +
           " and needs " + (kind[0] == 'e' ? "an " : "a ") + kind + " recipe";
  }
  if (r.kind == fb::RecipeKind::Gemm) {
    const auto& a = graph.value(node.operands[0]).shape;
    const auto& b = graph.value(node.operands[1]).shape;
    const int64_t M = a[0], K = a[1], N = b[1];
    if (r.m > M || r.k > K || int64_t{r.n} * r.k > N) {
      return "gemm m=" + std::to_string(r.m) + " k=" + std::to_string(r.k) +
             " n=" + std::to_string(r.n) + " does not fit [" +
             std::to_string(M) + "," + std::to_string(K) + "] x [" +
             std::to_string(K) + "," + std::to_string(N) +
             "] (needs m <= M, k <= K and n*k <= N)";
    }
    const int64_t used = int64_t{r.m} * r.n * r.k;
    if (r.first_tile < 0 || r.first_tile + used > tiles) {
      return "gemm grid of " + std::to_string(used) + " tiles from tile " +
             std::to_string(r.first_tile) + " exceeds the target's " +
             std::to_string(tiles) + " tiles";
    }
    if (r.staging != fb::Staging::Complete) {
      const int granule = KGranule(GemmDType(graph, op));
      if (r.chunk_k < 1 || r.chunk_k % granule != 0) {
        return "chunk_k=" + std::to_string(r.chunk_k) +
               " must be a positive multiple of the kernel's K granule " +
               std::to_string(granule);
      }
    }
    if (r.staging == fb::Staging::Batched && r.batch_chunks < 1) {
      return "batched(N) needs N >= 1";
    }
    return "";
  }
  const std::string invalid =
      passes::ValidateOwnership(r.layout, result.shape, tiles);
  if (!invalid.empty()) return invalid;
  if (r.kind == fb::RecipeKind::Elementwise) {
    if (r.layout.kind == fb::OwnershipKind::Blocked && r.layout.replicas != 1) {
      return "an elementwise layout is blocked(rows x channels) without "
             "replicas or flat, not " +
             FormatOwnership(r.layout);
    }
  } else if (r.kind == fb::RecipeKind::RowWise) {
    if (r.layout.kind != fb::OwnershipKind::Blocked || r.layout.replicas != 1 ||
        r.layout.partitions.back() != 1) {
      return "a row-wise op needs complete rows: blocked(p x 1) without "
             "replicas, not " +
             FormatOwnership(r.layout);
    }
  }
  return "";
}

fb::OwnershipT Coster::StagedOwnership(const Recipe& r) const {
  return WithOrder(BlockedOwnership({r.m, r.k}, r.n, r.first_tile), {0, 2, 1});
}

fb::OwnershipT Coster::ResultOwnership(const Graph& graph, int op,
                                       const Recipe& r) const {
  (void)graph;
  (void)op;
  if (r.kind == fb::RecipeKind::Gemm) {
    return BlockedOwnership({r.m, r.n * r.k}, 1, r.first_tile);
  }
  return r.layout;
}

std::optional<fb::OwnershipT> Coster::Required(const Graph& graph, int op,
                                               const Recipe& r,
                                               int slot) const {
  switch (graph.op(op).slots[slot]) {
    case SlotRole::kStaged:
    case SlotRole::kSource:
      return std::nullopt;
    case SlotRole::kResident:
      return WithOrder(BlockedOwnership({r.k, r.n}, r.m, r.first_tile),
                       {2, 1, 0});
    case SlotRole::kLayout:
      return r.layout;
    case SlotRole::kVector: {
      const fb::OwnershipT& l = r.layout;
      if (l.kind == fb::OwnershipKind::Flat) {
        return BlockedOwnership({1}, l.tiles, l.first_tile, l.tile_stride);
      }
      // Column parts become the bias's parts and row parts its replicas;
      // the layout's order carries over (rows axis -> replica axis 1,
      // columns axis -> axis 0; the layout has no replicas).
      fb::OwnershipT v = BlockedOwnership({l.partitions[1]}, l.partitions[0],
                                          l.first_tile, l.tile_stride);
      if (!l.axis_order.empty()) {
        for (int32_t axis : l.axis_order) {
          if (axis == 0) v.axis_order.push_back(1);
          if (axis == 1) v.axis_order.push_back(0);
        }
      } else {
        v.axis_order = {1, 0};
      }
      if (v.axis_order == std::vector<int32_t>{0, 1}) v.axis_order.clear();
      return v;
    }
    case SlotRole::kRowParam: {
      const fb::OwnershipT& l = r.layout;
      int64_t row_tiles = 1;
      for (int32_t p : l.partitions) row_tiles *= p;
      return BlockedOwnership({1}, static_cast<int>(row_tiles), l.first_tile,
                              l.tile_stride);
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- caches

TransferCost Coster::Transfer(std::span<const int64_t> shape, int element_bytes,
                              const fb::OwnershipT& from,
                              const fb::OwnershipT& to) const {
  std::string key = ShapeKey(shape) + "*" + std::to_string(element_bytes) +
                    " " + OwnKey(from) + " -> " + OwnKey(to);
  auto it = cache_->transfers.find(key);
  if (it != cache_->transfers.end()) return it->second;
  TransferCost cost =
      passes::EstimateTransferCost(from, to, shape, element_bytes, target());
  cache_->transfers.emplace(std::move(key), cost);
  return cost;
}

bool Coster::SamePlacement(std::span<const int64_t> shape,
                           const fb::OwnershipT& a,
                           const fb::OwnershipT& b) const {
  if (passes::SameOwnership(a, b)) return true;
  std::string key = ShapeKey(shape) + " " + OwnKey(a) + " = " + OwnKey(b);
  auto it = cache_->placements.find(key);
  if (it != cache_->placements.end()) return it->second;
  const bool same = passes::SamePlacement(a, b, shape);
  cache_->placements.emplace(std::move(key), same);
  return same;
}

TileBytes Coster::BytesPerTile(std::span<const int64_t> shape,
                               int element_bytes,
                               const fb::OwnershipT& ownership) const {
  std::string key = ShapeKey(shape) + "*" + std::to_string(element_bytes) +
                    " " + OwnKey(ownership);
  auto it = cache_->bytes.find(key);
  if (it != cache_->bytes.end()) return it->second;
  auto bytes = std::make_shared<const std::vector<int64_t>>(
      passes::BytesPerTile(ownership, shape, element_bytes, tiles()));
  cache_->bytes.emplace(std::move(key), bytes);
  return bytes;
}

TileBytes Coster::UniformScratch(int first_tile, int64_t count,
                                 int64_t bytes) const {
  auto v = std::make_shared<std::vector<int64_t>>(tiles(), 0);
  for (int64_t t = first_tile; t < first_tile + count && t < tiles(); ++t) {
    (*v)[t] = bytes;
  }
  return v;
}

// ---------------------------------------------------------------- prices

StatusOr<OpCost> Coster::PriceOp(const Graph& graph, int op,
                                 const Recipe& recipe,
                                 const fb::OwnershipT* source,
                                 std::span<const Cuts> cuts) const {
  const OpNode& node = graph.op(op);
  const bool needs_source =
      node.op_class == OpClass::kGemm || node.op_class == OpClass::kCopy;
  std::string key = std::to_string(op) + " " + recipe.Text();
  if (needs_source) {
    if (source == nullptr) {
      return Status::Internal(graph.OpLabel(op) + ": priced without a source");
    }
    key += " <- " + OwnKey(*source);
  }
  std::vector<Cuts> slot_cuts(node.operands.size());
  for (size_t i = 0; i < cuts.size() && i < slot_cuts.size(); ++i) {
    slot_cuts[i] = cuts[i];
    if (cuts[i]) key += " [" + std::to_string(i) + "]" + CutsText(cuts[i]);
  }
  auto it = cache_->prices.find(key);
  if (it != cache_->prices.end()) return it->second;
  const std::string invalid = CheckRecipe(graph, op, recipe);
  if (!invalid.empty()) {
    return Status::Internal(graph.OpLabel(op) + ": " + invalid);
  }
  StatusOr<OpCost> cost = Status::Internal("unpriced");
  switch (node.op_class) {
    case OpClass::kGemm:
      cost = PriceGemm(graph, op, recipe, *source, slot_cuts[0]);
      break;
    case OpClass::kElementwise:
      cost = PriceElementwise(graph, op, recipe, slot_cuts);
      break;
    case OpClass::kRowWise:
      cost = PriceRowWise(graph, op, recipe);
      break;
    case OpClass::kCopy:
      cost = PriceCopy(graph, op, recipe, *source, slot_cuts[0]);
      break;
  }
  if (!cost.ok()) {
    return cost.status().WithContext(graph.OpLabel(op) + " " + recipe.Text());
  }
  VLOG(2) << graph.OpLabel(op) << " " << recipe.Text() << ": compute "
          << cost->compute << " + exchange " << cost->exchange << " ("
          << cost->phases << " phases), scratch " << cost->max_scratch
          << " B; " << cost->detail;
  cache_->prices.emplace(std::move(key), *cost);
  return cost;
}

StatusOr<OpCost> Coster::PriceGemm(const Graph& graph, int op, const Recipe& r,
                                   const fb::OwnershipT& source,
                                   const Cuts& source_cuts) const {
  const OpNode& node = graph.op(op);
  const ValueNode& a = graph.value(node.operands[0]);
  const ValueNode& b = graph.value(node.operands[1]);
  const ValueNode& out = graph.value(node.result);
  const int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
  const fb::DType dtype = GemmDType(graph, op);
  const int ab = DTypeBytes(dtype);
  StatusOr<kernels::DType> kdtype = kernels::DTypeFromFb(dtype);
  if (!kdtype.ok()) return kdtype.status();
  StatusOr<kernels::DType> kout = kernels::DTypeFromFb(out.dtype);
  if (!kout.ok()) return kout.status();
  const int T = tiles();
  const int align = std::max(1, target().alignment);
  const passes::GemmGrid g =
      passes::MakeGemmGrid(M, K, N, r.m, r.k, r.n, r.first_tile, 1, r.staging,
                           r.chunk_k, r.batch_chunks);
  // The calls write the output directly (no K pieces then: an F16 output
  // must be rounded once) unless staged calls accumulate in F32.
  const bool to_value = r.k == 1 && (!g.staged || out.dtype == fb::DType::F32);
  OpCost cost;

  // Left operand: cast at its owners when priced in another dtype.
  TileBytes fp8_copy;
  int64_t operand_cast = 0;
  if (dtype != a.dtype) {
    const int64_t held = passes::MaxBytesPerTile(source, a.shape, 1);
    StatusOr<int64_t> cast = kernels::CastCycles(model(), 1, held);
    if (!cast.ok()) return cast.status();
    operand_cast = *cast;
    fp8_copy = BytesPerTile(a.shape, ab, source);
  }

  // The parts of its panel each tile copies locally (tiles ascending, so
  // tile t's are local_boxes[local_at[t] .. local_at[t + 1])), and how the
  // tiles with such parts store A.
  const fb::OwnershipT staged = StagedOwnership(r);
  std::vector<Box> local_boxes;
  std::vector<int> local_at(T + 1, 0);
  passes::ForEachLocalCopy(source, staged, a.shape,
                           [&](int t, const Box& box) {
    if (t >= T) return;
    local_boxes.push_back(box);
    ++local_at[t + 1];
  });
  for (int t = 0; t < T; ++t) local_at[t + 1] += local_at[t];
  auto local_of = [&](int t) {
    return std::span<const Box>(local_boxes.data() + local_at[t],
                                local_at[t + 1] - local_at[t]);
  };
  std::vector<Segments> a_storage(T);
  if (!local_boxes.empty()) {
    passes::ForEachHeldBoxes(source, a.shape,
                             [&](int t, std::span<const Box> boxes) {
      if (t >= T || local_at[t] == local_at[t + 1]) return;
      a_storage[t] = passes::StoredSegments(
          boxes, source_cuts ? &*source_cuts : nullptr, ab, align);
    });
  }

  // Output ranges of a K split (result tiles ascending), and the seeds each
  // grid tile holds: seed_boxes[seed_at[t] .. seed_at[t + 1]).
  std::vector<passes::ReduceRange> ranges;
  std::vector<Box> seed_boxes;
  std::vector<int> seed_at(T + 1, 0);
  if (r.k > 1) {
    ranges = passes::GemmRanges(g, ResultOwnership(graph, op, r), out.shape);
    for (const passes::ReduceRange& rr : ranges) {
      if (rr.seed_ki < 0 || rr.tile >= T) continue;
      seed_boxes.push_back(rr.box);
      ++seed_at[rr.tile + 1];
    }
  }
  for (int t = 0; t < T; ++t) seed_at[t + 1] += seed_at[t];
  auto seeds_of = [&](int t) {
    return std::span<const Box>(seed_boxes.data() + seed_at[t],
                                seed_at[t + 1] - seed_at[t]);
  };
  // Split partials (seeds read in place by cutting the GEMM calls at them)
  // need a weight the host can place as column pieces: used once.
  const bool pieceable = b.role == fb::ValueRole::Weight && b.uses.size() == 1;
  const bool can_split =
      r.k > 1 && pieceable && passes::StridedSeeds(g, ranges);

  // Exchange: staging (one phase, or one per chunk) and the partials.
  const int chunks = g.Chunks(0);  // part 0 has the largest depth
  const TransferCost stage = Transfer(a.shape, ab, source, staged);
  const bool staging_exchange = stage.transfers > 0;
  if (staging_exchange) {
    if (chunks == 1) {
      cost.exchange += stage.phase_cycles;
    } else {
      // Each chunk's phase carries its share of every tile's bytes and, at
      // most, all of its fragments.
      const int64_t per_phase =
          target().sync_cycles +
          model().TileExchangeCycles(CeilDiv(stage.max_bytes_sent, chunks),
                                     CeilDiv(stage.max_bytes_received, chunks),
                                     stage.max_fragments);
      cost.exchange += chunks * per_phase;
    }
    cost.phases += chunks;
    cost.exchange_bytes += stage.bytes_received;
  }
  // The partials' exchange phase: every range's k - 1 remote partials (F32)
  // from their tiles, each sent as one piece per run: one run if the range
  // is contiguous in the sender's partial (a whole column piece, or one
  // row), else one per row. Fragments per piece, as the lowering emits them
  // (a strided transfer's pieces are costed as transfers of their own).
  struct PartialsPhase {
    int64_t cycles = 0;
    int64_t bytes = 0;  // received, over all tiles
  };
  // A range is sent by every other grid tile of its block; a block's ranges
  // partition its columns (one row block), so per block the ranges are
  // found by their first and last column. Without split partials a range
  // is one run where it spans its block's width (or one row).
  const int64_t cols_key = N + 1;
  std::vector<int64_t> block_bytes(int64_t{g.m} * g.n, 0),
      block_runs(int64_t{g.m} * g.n, 0), range_runs(ranges.size());
  // (block * (N + 1) + column, range index), sorted: the ranges by their
  // first and by their last column.
  std::vector<std::pair<int64_t, int>> range_at_begin, range_at_end;
  range_at_begin.reserve(ranges.size());
  range_at_end.reserve(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    const passes::ReduceRange& rr = ranges[i];
    const int64_t b = int64_t{rr.mi} * g.n + rr.ni;
    const int64_t rows = passes::BoxRows(rr.box);
    range_runs[i] = rows == 1 || passes::BoxWidth(rr.box) == g.cols.Size(rr.ni)
                        ? 1
                        : rows;
    block_bytes[b] += rr.box.Elements() * 4;
    block_runs[b] += range_runs[i];
    range_at_begin.push_back({b * cols_key + rr.box.begin[1], static_cast<int>(i)});
    range_at_end.push_back({b * cols_key + rr.box.end[1], static_cast<int>(i)});
  }
  std::sort(range_at_begin.begin(), range_at_begin.end());
  std::sort(range_at_end.begin(), range_at_end.end());
  // The range whose first (last) column is `key`, or -1.
  auto find_range = [](const std::vector<std::pair<int64_t, int>>& index,
                       int64_t key) {
    auto it = std::lower_bound(index.begin(), index.end(),
                               std::make_pair(key, -1));
    return it != index.end() && it->first == key ? it->second : -1;
  };
  // Bytes sent and received per tile, and pieces without split partials:
  // receivers get k partials per range, less the seed if they hold it;
  // senders send every range of their block but their own seeds.
  std::vector<int64_t> sent(T, 0), received(T, 0), pieces(T, 0);
  int64_t remote_bytes = 0;
  if (r.k > 1) {
    for (size_t i = 0; i < ranges.size(); ++i) {
      const passes::ReduceRange& rr = ranges[i];
      if (rr.tile >= T) continue;
      const int64_t remote = r.k - (rr.seed_ki >= 0 ? 1 : 0);
      received[rr.tile] += remote * rr.box.Elements() * 4;
      pieces[rr.tile] += remote * range_runs[i];
      remote_bytes += remote * rr.box.Elements() * 4;
    }
    for (int mi = 0; mi < g.m; ++mi) {
      for (int ni = 0; ni < g.n; ++ni) {
        const int64_t b = int64_t{mi} * g.n + ni;
        for (int ki = 0; ki < r.k; ++ki) {
          const int S = g.Tile(mi, ni, ki);
          if (S >= T) continue;
          sent[S] += block_bytes[b];
          pieces[S] += block_runs[b];
          for (const Box& seed : seeds_of(S)) {
            const int i =
                find_range(range_at_begin, b * cols_key + seed.begin[1]);
            sent[S] -= seed.Elements() * 4;
            pieces[S] -= range_runs[i];
          }
        }
      }
    }
  }
  std::vector<int64_t> fewer(T, 0);  // pieces saved by split partials
  auto partials_phase = [&](bool split) {
    PartialsPhase p;
    if (r.k <= 1) return p;
    p.bytes = remote_bytes;
    std::fill(fewer.begin(), fewer.end(), 0);
    if (split) {
      // S's partial is cut at its seeds, so a range that begins and ends at
      // such cuts (a neighbour of a seed reaching the next cut) is one
      // whole piece: one run instead of one per row.
      for (int mi = 0; mi < g.m; ++mi) {
        for (int ni = 0; ni < g.n; ++ni) {
          const int64_t b = int64_t{mi} * g.n + ni;
          for (int ki = 0; ki < r.k; ++ki) {
            const int S = g.Tile(mi, ni, ki);
            if (S >= T || seed_at[S] == seed_at[S + 1]) continue;
            auto is_cut = [&](int64_t c) {
              if (c == g.cols.Begin(ni) || c == g.cols.End(ni)) return true;
              for (const Box& seed : seeds_of(S)) {
                if (c == seed.begin[1] || c == seed.end[1]) return true;
              }
              return false;
            };
            int done[4];
            int ndone = 0;
            for (const Box& seed : seeds_of(S)) {
              for (int side = 0; side < 2; ++side) {
                const int q = find_range(
                    side == 0 ? range_at_end : range_at_begin,
                    b * cols_key + (side == 0 ? seed.begin[1] : seed.end[1]));
                if (q < 0) continue;
                const Box& qb = ranges[q].box;
                if (ranges[q].tile == S || !is_cut(qb.begin[1]) ||
                    !is_cut(qb.end[1]) ||
                    std::find(done, done + ndone, q) != done + ndone) {
                  continue;
                }
                if (ndone < 4) done[ndone++] = q;
                const int64_t saving = range_runs[q] - 1;
                fewer[S] += saving;
                if (ranges[q].tile < T) fewer[ranges[q].tile] += saving;
              }
            }
          }
        }
      }
    }
    int64_t slowest = -1;
    for (int t = 0; t < T; ++t) {
      const int64_t n = pieces[t] - fewer[t];
      if (n == 0) continue;
      slowest = std::max(
          slowest, model().TileExchangeCycles(sent[t], received[t], n));
    }
    if (slowest >= 0) p.cycles = target().sync_cycles + slowest;
    return p;
  };
  const PartialsPhase partials = partials_phase(false);

  // Compute, as the lowering emits it (docs/lowering.md): phases C0 (local
  // copies of chunk 0), then per chunk c the calls of chunk c with the
  // copies of chunk c+1, the last with the seed copies or the accumulator's
  // conversion; then the reduction's calls. A phase costs its slowest
  // tile; compute phases without an exchange between them merge.
  passes::GemmTilePlanner planner(g, model(), *kdtype, ab, align);
  passes::CopyPricer copier(model());
  // Phase groups: compute phases with no exchange between them merge.
  const int nphases = chunks + 2;
  std::vector<int> group(nphases, 0);
  for (int c = 1; c < nphases; ++c) {
    const bool exchange_before =
        c <= chunks ? staging_exchange : partials.bytes > 0;
    group[c] = group[c - 1] + (exchange_before ? 1 : 0);
  }
  const int ngroups = group.back() + 1;
  // Every tile's reduction calls (one per range it reduces, all partials in
  // one epoch) and the conversion of a staged k = 1 accumulator (the
  // cheaper of a cast and a one-partial reduction): the same in every
  // variant.
  std::vector<int64_t> reduce(T, 0), convert(T, 0);
  for (const passes::ReduceRange& rr : ranges) {
    if (rr.tile >= T) continue;
    StatusOr<int64_t> c =
        kernels::ReducePartialsCycles(model(), rr.box.Elements(), r.k);
    if (!c.ok()) return c.status();
    reduce[rr.tile] += *c;
  }
  // Variants: seeds read in place by split partials or not, K pieces or
  // not (index split * 2 + k_pieces).
  struct Variant {
    std::vector<int64_t> group_max;
    int64_t gemm = 0;    // the slowest tile's GEMM calls
    int64_t copies = 0;  // the slowest tile's staging copies
    int64_t k_pieced = 0;
    int64_t seed_copies = 0;
    int64_t compute = 0;
  };
  std::vector<Variant> variants(4);
  for (Variant& v : variants) v.group_max.assign(ngroups, 0);
  const bool try_pieces = !to_value;
  bool all_aliased = true;
  std::vector<int64_t> sums(ngroups);
  passes::GemmTilePlan tile_plan;
  passes::GemmTileGeometry geometry;
  // What one tile adds to a variant's phases (to `second` too, if given:
  // the same tile without K pieces, or with K pieces it does not take).
  auto add = [&](Variant& v, Variant* second, int t, bool aliased,
                 bool k_pieced, std::span<const int64_t> chunk_gemm,
                 std::span<const int64_t> chunk_copies, int64_t seed_copies) {
    std::fill(sums.begin(), sums.end(), 0);
    int64_t gemm = 0, copies = 0;
    if (aliased) {
      sums[group[1]] += chunk_gemm[0];
      gemm = chunk_gemm[0];
    } else {
      const size_t n = chunk_gemm.size();
      sums[group[0]] += chunk_copies[0];
      copies = chunk_copies[0];
      for (size_t i = 0; i < n; ++i) {
        sums[group[i + 1]] +=
            chunk_gemm[i] + (i + 1 < n ? chunk_copies[i + 1] : 0);
        gemm += chunk_gemm[i];
      }
    }
    sums[group[chunks]] += seed_copies + convert[t];
    sums[group[chunks + 1]] += reduce[t];
    for (Variant* w : {&v, second}) {
      if (w == nullptr) continue;
      for (int k = 0; k < ngroups; ++k) {
        w->group_max[k] = std::max(w->group_max[k], sums[k]);
      }
      w->gemm = std::max(w->gemm, gemm);
      w->copies = std::max(w->copies, copies);
      w->k_pieced += k_pieced;
      w->seed_copies = std::max(w->seed_copies, seed_copies);
    }
  };
  // Tiles without a local part of A: their calls depend only on the block
  // sizes and the column pieces' widths (a few distinct keys per op).
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>
      plain_calls;
  std::vector<int64_t> chunk_gemm, chunk_copies, key;
  Segments partial, seed_dst(1);
  std::vector<char> plain_seen(2 * static_cast<size_t>(g.n) * g.k, 0);
  std::vector<std::pair<int64_t, int64_t>> columns;
  for (int mi = 0; mi < g.m; ++mi) {
    for (int ni = 0; ni < g.n; ++ni) {
      for (int ki = 0; ki < g.k; ++ki) {
        const int t = g.Tile(mi, ni, ki);
        if (t >= T) continue;
        passes::GemmTileInput in;
        in.mi = mi;
        in.ni = ni;
        in.ki = ki;
        in.local = local_of(t);
        in.a_storage = in.local.empty() ? nullptr : &a_storage[t];
        // A tile that could use A in place holds its panel: it has a local
        // part too.
        const bool plain = in.local.empty();
        // A tile without a local part adds what every such tile of the same
        // row block size and grid column does (its calls, seeds, reduction
        // and conversion depend on nothing else): once is enough.
        if (plain) {
          const size_t key_index =
              (static_cast<size_t>(g.rows.Size(mi) == g.rows.Largest() ? 0
                                                                       : 1) *
                   g.n +
               ni) *
                  g.k +
              ki;
          if (plain_seen[key_index]) continue;
          plain_seen[key_index] = 1;
        }
        if (!plain) TILEC_RETURN_IF_ERROR(planner.Geometry(in, &geometry));
        const passes::GemmTileGeometry* geo = &geometry;
        if (r.k == 1 && !to_value) {
          const int64_t bm = g.rows.Size(mi), bn = g.cols.Size(ni);
          StatusOr<int64_t> cast = kernels::CastCycles(model(), bm, bn);
          StatusOr<int64_t> one =
              kernels::ReducePartialsCycles(model(), bm * bn, 1);
          if (!cast.ok()) return cast.status();
          if (!one.ok()) return one.status();
          convert[t] = std::min(*cast, *one);
        }
        for (int split = 0; split <= (can_split ? 1 : 0); ++split) {
          if (split) {
            passes::SeedColumnPieces(g, ni, seeds_of(t), &columns);
          } else {
            columns.assign(1, {g.cols.Begin(ni), g.cols.End(ni)});
          }
          in.columns = columns;
          // Seeds not contiguous in the partial are copied out of it.
          int64_t seed_copies = 0;
          if (seed_at[t] < seed_at[t + 1]) {
            passes::PartialSegments(g, mi, columns, align, &partial);
            for (const Box& box : seeds_of(t)) {
              if (passes::ContiguousOffset(box, partial)) continue;
              seed_dst[0] = passes::Segment{box, 0};
              StatusOr<int64_t> c = copier.Cycles(box, partial, seed_dst, 4);
              if (!c.ok()) return c.status();
              seed_copies += *c;
            }
          }
          const int kp_max = !to_value ? 1 : 0;
          if (plain) {
            const int64_t bm = g.rows.Size(mi), bk = g.depth.Size(ki);
            key.assign({bm, bk});
            for (const auto& [c0, c1] : columns) key.push_back(c1 - c0);
            auto it = std::find_if(
                plain_calls.begin(), plain_calls.end(),
                [&](const auto& entry) { return entry.first == key; });
            if (it == plain_calls.end()) {
              std::vector<int64_t> calls;
              for (int c = 0; c < g.Chunks(ki); ++c) {
                const int64_t width = std::min(bk - c * g.phase_k, g.phase_k);
                StatusOr<int64_t> p = planner.PieceCycles(bm, width, columns);
                if (!p.ok()) return p.status();
                calls.push_back(*p);
              }
              plain_calls.emplace_back(key, std::move(calls));
              it = plain_calls.end() - 1;
            }
            chunk_copies.assign(it->second.size(), 0);
            add(variants[split * 2], kp_max ? &variants[split * 2 + 1] : nullptr,
                t, false, false, it->second, chunk_copies, seed_copies);
            continue;
          }
          // One plan with K pieces allowed also gives the chunks' figures
          // as whole panels (K pieces off).
          passes::GemmTilePlan* plan = &tile_plan;
          in.k_pieces = kp_max == 1;
          TILEC_RETURN_IF_ERROR(planner.Plan(*geo, in, plan));
          // Without K pieces; the same figures serve the K-pieces variant
          // unless this tile takes them.
          for (int kp = 0; kp <= (plan->k_pieced ? 1 : 0); ++kp) {
            const bool pieced = kp == 1;
            chunk_gemm.clear();
            chunk_copies.clear();
            for (const passes::GemmChunkPlan& c : plan->chunks) {
              chunk_gemm.push_back(pieced ? c.gemm_cycles
                                          : c.whole_gemm_cycles);
              chunk_copies.push_back(pieced ? c.copy_cycles
                                            : c.whole_copy_cycles);
            }
            Variant* second =
                kp_max && !plan->k_pieced ? &variants[split * 2 + 1] : nullptr;
            add(variants[split * 2 + kp], second, t, plan->aliased, pieced,
                chunk_gemm, chunk_copies, seed_copies);
          }
          all_aliased = all_aliased && plan->aliased;
        }
        if (plain) all_aliased = false;
      }
    }
  }
  for (Variant& v : variants) {
    for (int64_t m : v.group_max) v.compute += m;
  }
  // expand-reduce reads strided seeds in place by splitting the partials
  // where that is cheaper than copying them; emit-device then cuts staged
  // panels into K pieces where the op gains.
  PartialsPhase split_partials;
  if (can_split) split_partials = partials_phase(true);
  const bool split =
      can_split && variants[2].compute + split_partials.cycles <
                       variants[0].compute + partials.cycles;
  const Variant* best = &variants[split ? 2 : 0];
  const PartialsPhase& reduction = split ? split_partials : partials;
  if (reduction.bytes > 0) {
    cost.exchange += reduction.cycles;
    cost.phases += 1;
    cost.exchange_bytes += reduction.bytes;
  }
  bool k_pieced = false;
  if (try_pieces) {
    const Variant& kp = variants[split ? 3 : 1];
    if (kp.k_pieced > 0 && kp.compute < best->compute) {
      k_pieced = true;
      best = &kp;
    }
  }
  cost.compute = best->compute + operand_cast;
  cost.detail = "gemm " + std::to_string(best->gemm) + " (" +
                std::to_string(g.rows.Largest()) + "x" +
                std::to_string(g.depth.Largest()) + "x" +
                std::to_string(g.cols.Largest()) + " blocks";
  if (split) cost.detail += ", split partials";
  if (k_pieced) {
    cost.detail += ", K pieces on " + std::to_string(best->k_pieced) + " tiles";
  }
  cost.detail += ")";
  if (best->copies > 0) {
    cost.detail += " +local copies " + std::to_string(best->copies);
  }
  if (operand_cast > 0) {
    cost.detail += " +operand cast " + std::to_string(operand_cast);
  }
  if (cost.phases > 0) {
    cost.detail += " +exchange " + std::to_string(cost.phases) + " phases " +
                   std::to_string(cost.exchange);
  }
  if (r.k > 1) {
    cost.detail += " +reduce " + std::to_string(r.k) + " partials over " +
                   std::to_string(ranges.size()) + " ranges";
    if (best->seed_copies > 0) cost.detail += ", seeds copied";
  }

  // Scratch per grid tile at the largest block: the staging buffer (the
  // panel, or two chunk buffers) and the F32 accumulator while the calls
  // run; the accumulator and the reduction's buffers (k-1 remote partials,
  // and a copy of the seed unless it is read in place) after.
  const int64_t bm = g.rows.Largest(), bk = g.depth.Largest(),
                bn = g.cols.Largest();
  const bool f32_partials = r.k > 1 || !to_value;
  const int64_t partial_bytes = f32_partials ? bm * bn * 4 : 0;
  int64_t receive_bytes = 0;
  if (!all_aliased) {
    receive_bytes = r.staging == fb::Staging::Complete
                        ? bm * bk * ab
                        : std::min(bm * bk, 2 * bm * g.phase_k) * ab;
  }
  int64_t reduce_buffers = 0;
  if (r.k > 1) {
    const int64_t box = bm * CeilDiv(N, int64_t{r.n} * r.k);
    reduce_buffers = (r.k - 1 + (best->seed_copies > 0 ? 1 : 0)) * box * 4;
  }
  const int64_t peak_scratch =
      std::max(receive_bytes + partial_bytes, partial_bytes + reduce_buffers);
  const int64_t grid = int64_t{r.m} * r.n * r.k;
  auto scratch = std::make_shared<std::vector<int64_t>>(
      *UniformScratch(r.first_tile, grid, peak_scratch));
  int64_t fp8_max = 0;
  if (fp8_copy) {
    for (size_t t = 0; t < scratch->size(); ++t) {
      (*scratch)[t] += (*fp8_copy)[t];
      fp8_max = std::max(fp8_max, (*fp8_copy)[t]);
    }
  }
  cost.scratch = scratch;
  cost.max_scratch = *std::max_element(scratch->begin(), scratch->end());
  cost.scratch_text = "A staging " + std::to_string(receive_bytes) +
                      " B, partials " + std::to_string(partial_bytes) +
                      " B, reduction " + std::to_string(reduce_buffers) + " B";
  if (fp8_copy) {
    cost.scratch_text += ", cast operand " + std::to_string(fp8_max) + " B";
  }
  return cost;
}

StatusOr<int64_t> Coster::StepCycles(const ElementwiseStep& step, int64_t rows,
                                     int64_t w) const {
  StatusOr<kernels::DType> out = kernels::DTypeFromFb(step.out_dtype);
  if (!out.ok()) return out.status();
  if (step.kernel == "add") return kernels::AddCycles(model(), rows, w);
  if (step.kernel == "gelu") return kernels::GeluCycles(model(), rows, w);
  if (step.kernel == "cast") return kernels::CastCycles(model(), rows, w);
  if (step.kernel == "bias_gelu") {
    // The kernel's formula follows its output: an FP8 result is the
    // bias_gelu_fp8 formula, as the simulator charges it.
    return kernels::BiasGeluCycles(model(), *out, rows, w);
  }
  if (step.kernel == "bias_gelu_fp8") {
    return kernels::BiasGeluCycles(model(), kernels::DType::kFp8E4M3, rows, w);
  }
  if (step.kernel == "ln_moments") {
    return kernels::LnMomentsCycles(model(), rows, w);
  }
  return Status::Internal("no cycle function for kernel " + step.kernel);
}

Cuts Coster::ResultCuts(const Graph& graph, int op, const Recipe& r,
                        std::span<const Cuts> cuts) const {
  const OpNode& node = graph.op(op);
  if (node.op_class == OpClass::kGemm) {
    if (r.k <= 1) return std::nullopt;
    const int64_t N = graph.value(node.result).shape[1];
    const passes::Split cols{N, r.n}, result{N, int64_t{r.n} * r.k};
    const auto key = std::make_tuple(N, r.n, r.k);
    auto it = cache_->spans.find(key);
    if (it == cache_->spans.end()) {
      bool spans = false;
      for (int64_t j = 0; j < result.parts && !spans; ++j) {
        if (result.Size(j) == 0) continue;
        spans = cols.PartOf(result.Begin(j)) != cols.PartOf(result.End(j) - 1);
      }
      it = cache_->spans.emplace(key, spans).first;
    }
    return it->second ? Cuts(cols) : std::nullopt;
  }
  if (node.op_class == OpClass::kElementwise) {
    for (size_t i = 0; i < node.slots.size() && i < cuts.size(); ++i) {
      if (node.slots[i] == SlotRole::kLayout && cuts[i]) return cuts[i];
    }
  }
  return std::nullopt;
}

StatusOr<OpCost> Coster::PriceElementwise(const Graph& graph, int op,
                                          const Recipe& r,
                                          std::span<const Cuts> cuts) const {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  const fb::OwnershipT& l = r.layout;
  const int align = std::max(1, target().alignment);
  const Cuts result_cuts = ResultCuts(graph, op, r, cuts);
  // Steps that need row structure (a per-column operand, row moments).
  bool row_free = true;
  for (const ElementwiseStep& step : node.steps) {
    row_free = row_free && !step.uses_vector && step.kernel != "ln_moments";
  }
  // Operands stored in other pieces than the result are gathered per piece.
  std::vector<int> gathered;
  for (size_t i = 0; i < node.slots.size(); ++i) {
    if (node.slots[i] != SlotRole::kLayout) continue;
    const Cuts c = i < cuts.size() ? cuts[i] : std::nullopt;
    if (c != result_cuts) gathered.push_back(static_cast<int>(i));
  }
  passes::CopyPricer copier(model());
  // One tile holding `held`: one call per step and stored piece (its
  // boxes, or the pieces they are cut into), or, where the steps need no
  // rows and the result and every full-size operand hold the tile's range
  // back to back in the same boxes (passes::SameContiguousRange), one call
  // per step over the whole range.
  std::vector<Segments> operands;
  auto tile_cycles = [&](std::span<const Box> held) -> StatusOr<int64_t> {
    int64_t elements = 0;
    for (const Box& box : held) elements += box.Elements();
    if (elements == 0) return int64_t{0};
    int64_t total = 0;
    const Segments stored = passes::StoredSegments(
        held, result_cuts ? &*result_cuts : nullptr, DTypeBytes(out.dtype),
        align);
    if (row_free && gathered.empty() && stored.size() > 1) {
      operands.clear();
      for (size_t i = 0; i < node.slots.size(); ++i) {
        if (node.slots[i] != SlotRole::kLayout) continue;
        const Cuts c = i < cuts.size() ? cuts[i] : std::nullopt;
        operands.push_back(passes::StoredSegments(
            held, c ? &*c : nullptr, StoredBytes(graph, node.operands[i]),
            align));
      }
      if (passes::SameContiguousRange(stored, operands)) {
        for (const ElementwiseStep& step : node.steps) {
          StatusOr<int64_t> c = StepCycles(step, 1, elements);
          if (!c.ok()) return c.status();
          total += *c;
        }
        return total;
      }
    }
    for (const passes::Segment& piece : stored) {
      for (const ElementwiseStep& step : node.steps) {
        StatusOr<int64_t> c = StepCycles(step, passes::BoxRows(piece.box),
                                         passes::BoxWidth(piece.box));
        if (!c.ok()) return c.status();
        total += *c;
      }
      for (int i : gathered) {
        const int eb = StoredBytes(graph, node.operands[i]);
        const Segments from = passes::StoredSegments(
            held, cuts[i] ? &*cuts[i] : nullptr, eb, align);
        if (passes::ContiguousOffset(piece.box, from)) continue;
        StatusOr<int64_t> c = copier.Cycles(
            piece.box, from, Segments{passes::Segment{piece.box, 0}}, eb);
        if (!c.ok()) return c.status();
        total += *c;
      }
    }
    return total;
  };
  OpCost cost;
  if (l.kind == fb::OwnershipKind::Blocked && !result_cuts &&
      gathered.empty()) {
    // The first tile has the largest block and every formula grows with it.
    const std::vector<Box> held = passes::HeldBoxes(l, out.shape, l.first_tile);
    StatusOr<int64_t> c = tile_cycles(held);
    if (!c.ok()) return c.status();
    cost.compute = *c;
  } else {
    Status status;
    passes::ForEachHeldBoxes(l, out.shape,
                             [&](int t, std::span<const Box> held) {
      (void)t;
      if (!status.ok()) return;
      StatusOr<int64_t> c = tile_cycles(held);
      if (!c.ok()) {
        status = c.status();
        return;
      }
      cost.compute = std::max(cost.compute, *c);
    });
    if (!status.ok()) return status;
  }
  std::string kernels;
  for (const ElementwiseStep& step : node.steps) {
    kernels += (kernels.empty() ? "" : "+") + step.kernel;
  }
  cost.detail = kernels + " " + std::to_string(cost.compute);
  if (result_cuts) cost.detail += " (stored" + CutsText(result_cuts) + ")";
  return cost;
}

StatusOr<OpCost> Coster::PriceRowWise(const Graph& graph, int op,
                                      const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  int64_t rows = 1;
  const size_t rank = out.shape.size();
  for (size_t a = 0; a + 1 < rank; ++a) {
    rows *= CeilDiv(out.shape[a], r.layout.partitions[a]);
  }
  const int64_t w = out.shape[rank - 1];
  StatusOr<kernels::DType> kout = kernels::DTypeFromFb(out.dtype);
  if (!kout.ok()) return kout.status();
  StatusOr<int64_t> c = node.kind == fb::OpKind::Softmax
                            ? kernels::SoftmaxCycles(model(), rows, w)
                            : kernels::LayerNormCycles(model(), *kout, rows, w);
  if (!c.ok()) return c.status();
  OpCost cost;
  cost.compute = *c;
  cost.detail =
      std::string(node.kind == fb::OpKind::Softmax ? "softmax" : "layernorm") +
      " " + std::to_string(rows) + "x" + std::to_string(w) + " " +
      std::to_string(*c);
  return cost;
}

StatusOr<TransferCost> Coster::Redistribution(std::span<const int64_t> shape,
                                    int element_bytes,
                                    const fb::OwnershipT& from,
                                    const Cuts& from_cuts,
                                    const fb::OwnershipT& to,
                                    const Cuts& to_cuts) const {
  std::string key = ShapeKey(shape) + "*" + std::to_string(element_bytes) +
                    " " + OwnKey(from) + CutsText(from_cuts) + " -> " +
                    OwnKey(to) + CutsText(to_cuts);
  auto it = cache_->redistributions.find(key);
  if (it != cache_->redistributions.end()) return it->second;
  TransferCost cost = Transfer(shape, element_bytes, from, to);
  // Local copies per tile as the lowering emits them: only tiles that copy
  // something need their storage.
  const int T = tiles();
  const int align = std::max(1, target().alignment);
  std::vector<Box> boxes;
  std::vector<int> box_at(T + 1, 0);
  passes::ForEachLocalCopy(from, to, shape, [&](int t, const Box& box) {
    if (t >= T) return;
    boxes.push_back(box);
    ++box_at[t + 1];
  });
  for (int t = 0; t < T; ++t) box_at[t + 1] += box_at[t];
  std::vector<int64_t> copies(T, 0);
  if (!boxes.empty()) {
    std::vector<Segments> src(T);
    passes::ForEachHeldBoxes(from, shape, [&](int t, std::span<const Box> b) {
      if (t >= T || box_at[t] == box_at[t + 1]) return;
      src[t] = passes::StoredSegments(b, from_cuts ? &*from_cuts : nullptr,
                                      element_bytes, align);
    });
    passes::CopyPricer copier(model());
    Segments dst;
    Status status;
    passes::ForEachHeldBoxes(to, shape, [&](int t, std::span<const Box> b) {
      if (t >= T || box_at[t] == box_at[t + 1] || !status.ok()) return;
      // A tile whose source storage is the destination's natural storage
      // uses it in place.
      if (src[t] == passes::Consecutive(b)) return;
      dst = passes::StoredSegments(b, to_cuts ? &*to_cuts : nullptr,
                                   element_bytes, align);
      for (int i = box_at[t]; i < box_at[t + 1]; ++i) {
        StatusOr<int64_t> c =
            copier.Cycles(boxes[i], src[t], dst, element_bytes);
        if (!c.ok()) {
          status = c.status();
          return;
        }
        copies[t] += *c;
      }
    });
    if (!status.ok()) return status;
  }
  cost.local_copy_cycles = 0;
  cost.copy_bottleneck_tile = -1;
  for (int t = 0; t < T; ++t) {
    if (copies[t] > cost.local_copy_cycles) {
      cost.local_copy_cycles = copies[t];
      cost.copy_bottleneck_tile = t;
    }
  }
  cache_->redistributions.emplace(std::move(key), cost);
  return cost;
}

StatusOr<OpCost> Coster::PriceCopy(const Graph& graph, int op, const Recipe& r,
                                   const fb::OwnershipT& source,
                                   const Cuts& source_cuts) const {
  const OpNode& node = graph.op(op);
  const ValueNode& in = graph.value(node.operands[0]);
  OpCost cost;
  if (SamePlacement(in.shape, source, r.layout)) return cost;
  StatusOr<TransferCost> moved = Redistribution(
      in.shape, DTypeBytes(in.dtype), source, source_cuts, r.layout,
      std::nullopt);
  if (!moved.ok()) return moved.status();
  const TransferCost& t = *moved;
  cost.compute = t.local_copy_cycles;
  cost.exchange = t.phase_cycles;
  cost.phases = t.transfers > 0 ? 1 : 0;
  cost.exchange_bytes = t.bytes_received;
  cost.detail = "copy phase " + std::to_string(t.phase_cycles) +
                ", local copies " + std::to_string(t.local_copy_cycles);
  return cost;
}

}  // namespace tilec::plan
