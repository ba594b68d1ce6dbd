#include "passes/plan/cost.h"

#include <glog/logging.h>

#include <algorithm>

#include "formats/print.h"
#include "kernels/kernels.h"

namespace tilec::plan {
namespace {

using passes::BlockedOwnership;
using passes::FormatOwnership;
using passes::TransferCost;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string OwnKey(const fb::OwnershipT& o) { return FormatOwnership(o); }

fb::OwnershipT WithOrder(fb::OwnershipT o, std::vector<int32_t> order) {
  o.axis_order = std::move(order);
  return o;
}

}  // namespace

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
                                 const fb::OwnershipT* source) const {
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
  auto it = cache_->prices.find(key);
  if (it != cache_->prices.end()) return it->second;
  const std::string invalid = CheckRecipe(graph, op, recipe);
  if (!invalid.empty()) {
    return Status::Internal(graph.OpLabel(op) + ": " + invalid);
  }
  StatusOr<OpCost> cost = Status::Internal("unpriced");
  switch (node.op_class) {
    case OpClass::kGemm:
      cost = PriceGemm(graph, op, recipe, *source);
      break;
    case OpClass::kElementwise:
      cost = PriceElementwise(graph, op, recipe);
      break;
    case OpClass::kRowWise:
      cost = PriceRowWise(graph, op, recipe);
      break;
    case OpClass::kCopy:
      cost = PriceCopy(graph, op, recipe, *source);
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
                                   const fb::OwnershipT& source) const {
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

  // The slowest tile has the largest block: balanced splits put the larger
  // parts first, and every formula grows with M, K and N.
  const int64_t bm = CeilDiv(M, r.m), bk = CeilDiv(K, r.k),
                bn = CeilDiv(N, r.n);
  // K per GEMM call: one call (Complete), one per chunk (Streamed), one per
  // batch of chunks (Batched).
  int64_t per_call = bk;
  if (r.staging == fb::Staging::Streamed)
    per_call = std::min<int64_t>(bk, r.chunk_k);
  if (r.staging == fb::Staging::Batched) {
    per_call = std::min<int64_t>(bk, int64_t{r.chunk_k} * r.batch_chunks);
  }
  const int64_t calls = CeilDiv(bk, per_call);
  OpCost cost;
  int64_t gemm_cycles = 0;
  for (int64_t c = 0; c < calls; ++c) {
    const int64_t kc = std::min(per_call, bk - c * per_call);
    StatusOr<int64_t> cycles =
        kernels::GemmCycles(model(), *kdtype, bm, kc, bn);
    if (!cycles.ok()) return cycles.status();
    gemm_cycles += *cycles;
  }
  cost.compute += gemm_cycles;
  cost.detail = "gemm " + std::to_string(calls) + "x(" + std::to_string(bm) +
                "x" + std::to_string(per_call) + "x" + std::to_string(bn) +
                ")=" + std::to_string(gemm_cycles);
  // An F32 accumulator when partial sums exist or several calls add up.
  const bool f32_partials = r.k > 1 || calls > 1;
  const int64_t partial_bytes = f32_partials ? bm * bn * 4 : 0;
  if (r.k == 1 && calls > 1) {
    StatusOr<int64_t> cast = kernels::CastCycles(model(), bm, bn);
    if (!cast.ok()) return cast.status();
    cost.compute += *cast;
    cost.detail += " +cast " + std::to_string(*cast);
  }

  // Left operand: cast at its owners when priced in another dtype, then
  // delivered onto the grid per the staging.
  TileBytes fp8_copy;
  if (dtype != a.dtype) {
    const int64_t held = passes::MaxBytesPerTile(source, a.shape, 1);
    StatusOr<int64_t> cast = kernels::CastCycles(model(), 1, held);
    if (!cast.ok()) return cast.status();
    cost.compute += *cast;
    cost.detail += " +operand cast " + std::to_string(*cast);
    fp8_copy = BytesPerTile(a.shape, ab, source);
  }
  const fb::OwnershipT staged = StagedOwnership(r);
  int64_t stage_phases = 0;
  int64_t receive_bytes = 0;
  if (!SamePlacement(a.shape, source, staged)) {
    const TransferCost t = Transfer(a.shape, ab, source, staged);
    // Complete: one phase. Streamed and Batched: one phase per call, each
    // carrying its share of every tile's bytes and, at most, all of its
    // fragments.
    const int64_t phases_wanted =
        r.staging == fb::Staging::Complete ? 1 : calls;
    stage_phases = t.transfers > 0 ? phases_wanted : 0;
    if (stage_phases == 1) {
      cost.exchange += t.phase_cycles;
    } else if (stage_phases > 1) {
      const int64_t per_phase =
          target().sync_cycles +
          model().TileExchangeCycles(
              CeilDiv(t.max_bytes_sent, stage_phases),
              CeilDiv(t.max_bytes_received, stage_phases), t.max_fragments);
      cost.exchange += stage_phases * per_phase;
    }
    if (t.local_copy_bytes > 0) {
      // Elements already on their tile are copied into the staging buffer,
      // one call per phase.
      cost.compute += t.local_copy_cycles +
                      (phases_wanted - 1) * int64_t{target().copy_call_cycles};
    }
    cost.phases += static_cast<int>(stage_phases);
    cost.exchange_bytes += t.bytes_received;
    cost.detail += " +staging " + std::to_string(stage_phases) + " phases " +
                   std::to_string(cost.exchange);
    receive_bytes = r.staging == fb::Staging::Complete
                        ? bm * bk * ab
                        : std::min(bm * bk, 2 * bm * per_call) * ab;
  }

  // K-split partials: tile (mi, ni, ki) holds partial ki of block (mi, ni);
  // the result blocked(m x (n*k)) gives each tile 1/k of the block's
  // columns. As a transfer of the partials tensor [k, M, N] (F32): from
  // blocked(k x m x n, order=1,2,0,3) to blocked(1 x m x (n*k)).
  int64_t reduce_buffers = 0;
  if (r.k > 1) {
    const std::vector<int64_t> pshape = {r.k, M, N};
    fb::OwnershipT from = WithOrder(
        BlockedOwnership({r.k, r.m, r.n}, 1, r.first_tile), {1, 2, 0, 3});
    fb::OwnershipT to = BlockedOwnership({1, r.m, r.n * r.k}, 1, r.first_tile);
    const TransferCost t = Transfer(pshape, 4, from, to);
    const int64_t box = bm * CeilDiv(N, int64_t{r.n} * r.k);
    StatusOr<int64_t> reduce = kernels::ReducePartialsCycles(model(), box, r.k);
    if (!reduce.ok()) return reduce.status();
    cost.exchange += t.phase_cycles;
    cost.phases += t.transfers > 0 ? 1 : 0;
    cost.exchange_bytes += t.bytes_received;
    cost.compute += t.local_copy_cycles + *reduce;
    cost.detail += " +reduce " + std::to_string(r.k) + " partials: phase " +
                   std::to_string(t.phase_cycles) + ", seed copy " +
                   std::to_string(t.local_copy_cycles) + ", kernel " +
                   std::to_string(*reduce);
    reduce_buffers = r.k * box * 4;  // k-1 remote partials + the seed copy
  }
  // The staging buffer is free once the last call ran; the partials live on
  // through the reduction.
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
    return kernels::BiasGeluCycles(model(), kernels::DType::kF16, rows, w);
  }
  if (step.kernel == "bias_gelu_fp8") {
    return kernels::BiasGeluCycles(model(), kernels::DType::kFp8E4M3, rows, w);
  }
  if (step.kernel == "ln_moments") {
    return kernels::LnMomentsCycles(model(), rows, w);
  }
  return Status::Internal("no cycle function for kernel " + step.kernel);
}

StatusOr<OpCost> Coster::PriceElementwise(const Graph& graph, int op,
                                          const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  const fb::OwnershipT& l = r.layout;
  // Cycles of one tile holding `boxes` (a blocked tile holds one box; a
  // flat tile a contiguous range: one call per step over the range, or one
  // call per row segment for steps that index a per-column operand).
  auto tile_cycles =
      [&](const std::vector<passes::Box>& boxes) -> StatusOr<int64_t> {
    int64_t total = 0;
    int64_t elements = 0;
    for (const passes::Box& box : boxes) elements += box.Elements();
    if (elements == 0) return int64_t{0};
    for (const ElementwiseStep& step : node.steps) {
      if (l.kind == fb::OwnershipKind::Flat && !step.uses_vector &&
          step.kernel != "ln_moments") {
        StatusOr<int64_t> c = StepCycles(step, 1, elements);
        if (!c.ok()) return c.status();
        total += *c;
        continue;
      }
      for (const passes::Box& box : boxes) {
        StatusOr<int64_t> c = StepCycles(step, box.end[0] - box.begin[0],
                                         box.end[1] - box.begin[1]);
        if (!c.ok()) return c.status();
        total += *c;
      }
    }
    return total;
  };
  OpCost cost;
  if (l.kind == fb::OwnershipKind::Blocked) {
    // The first tile has the largest block and every formula grows with it.
    StatusOr<int64_t> c =
        tile_cycles(passes::HeldBoxes(l, out.shape, l.first_tile));
    if (!c.ok()) return c.status();
    cost.compute = *c;
  } else {
    for (int t : passes::TilesUsed(l, out.shape)) {
      StatusOr<int64_t> c = tile_cycles(passes::HeldBoxes(l, out.shape, t));
      if (!c.ok()) return c.status();
      cost.compute = std::max(cost.compute, *c);
    }
  }
  std::string kernels;
  for (const ElementwiseStep& step : node.steps) {
    kernels += (kernels.empty() ? "" : "+") + step.kernel;
  }
  cost.detail = kernels + " " + std::to_string(cost.compute);
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

StatusOr<OpCost> Coster::PriceCopy(const Graph& graph, int op, const Recipe& r,
                                   const fb::OwnershipT& source) const {
  const OpNode& node = graph.op(op);
  const ValueNode& in = graph.value(node.operands[0]);
  OpCost cost;
  if (SamePlacement(in.shape, source, r.layout)) return cost;
  const TransferCost t =
      Transfer(in.shape, DTypeBytes(in.dtype), source, r.layout);
  cost.compute = t.local_copy_cycles;
  cost.exchange = t.phase_cycles;
  cost.phases = t.transfers > 0 ? 1 : 0;
  cost.exchange_bytes = t.bytes_received;
  cost.detail = "copy phase " + std::to_string(t.phase_cycles) +
                ", local copies " + std::to_string(t.local_copy_cycles);
  return cost;
}

}  // namespace tilec::plan
