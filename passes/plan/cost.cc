#include "passes/plan/cost.h"

#include <glog/logging.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "passes/core/row_plan.h"
#include "passes/core/split_row_plan.h"
#include "passes/core/tile_plan.h"

namespace tilec::plan {
namespace {

using passes::BlockedOwnership;
using passes::Box;
using passes::FormatOwnership;
using passes::Segments;
using passes::TransferCost;

// Appends `x`'s bytes to a cache key.
void PutKey(int64_t x, std::string* key) {
  key->append(reinterpret_cast<const char*>(&x), sizeof x);
}

void PutKey(const std::vector<int>& list, std::string* key) {
  PutKey(static_cast<int64_t>(list.size()), key);
  for (int x : list) PutKey(x, key);
}

// An ownership as a cache key: in raw bytes, the fields its text
// (FormatOwnership) shows, so that the same ownerships share an entry as
// they did by their text (a natural axis order counts as none; a blocked
// ownership's grain and tiles, a flat one's partitions, are not read).
// Formatting the text was a tenth of quantize-fp8's time at batch 4, most
// of it in the memory checks of memory repair (BytesPerTile).
void PutKey(const fb::OwnershipT& o, std::string* key) {
  PutKey(static_cast<int64_t>(o.kind), key);
  if (o.kind == fb::OwnershipKind::Blocked) {
    PutKey(o.partitions, key);
    PutKey(o.sub_partitions, key);
    PutKey(o.replicas, key);
    bool natural = true;
    for (size_t i = 0; i < o.axis_order.size(); ++i) {
      natural = natural && o.axis_order[i] == static_cast<int>(i);
    }
    PutKey(natural ? std::vector<int>{} : o.axis_order, key);
  } else if (o.kind == fb::OwnershipKind::Flat) {
    PutKey(o.grain, key);
    PutKey(o.tiles, key);
  } else {
    return;  // its text names the kind alone
  }
  PutKey(o.first_tile, key);
  PutKey(o.tile_stride, key);
}

std::string OwnKey(const fb::OwnershipT& o) {
  std::string key;
  PutKey(o, &key);
  return key;
}

// An op of `compute` cycles and `phases` (0 or 1) exchange phases priced
// `exchange`.
OpCost WithExchange(int64_t compute, const TransferCost& exchange,
                    int phases) {
  OpCost cost;
  cost.compute = compute;
  cost.exchange = exchange.phase_cycles;
  cost.phases = phases;
  cost.exchange_bytes = exchange.bytes_received;
  cost.code = exchange.tile_code;
  return cost;
}

// A lower bound of RedistributionCost's phase, made without its pieces: each
// transfer counted as one fragment at its sender and at each receiver (the
// lowering sends one piece per run, at least one), which no schedule beats;
// without exchange tables, which a lower bound's cycles do not need. Building
// the pieces took most of the time a schedule did.
TransferCost TransferBound(const fb::OwnershipT& from, const fb::OwnershipT& to,
                           std::span<const int64_t> shape, int element_bytes,
                           const fb::TargetT& target) {
  TransferCost cost =
      passes::EstimateTransferCost(from, to, shape, element_bytes, target);
  if (cost.transfers > 0) {
    cost.scheduled_cycles = cost.bound_cycles;
    cost.phase_cycles = cost.bound_cycles + target.sync_cycles;
  }
  return cost;
}

}  // namespace

std::string AttentionGridKey(const passes::AttentionGrid& g) {
  std::string key;
  for (int64_t field :
       {int64_t{static_cast<int>(g.part)}, int64_t{g.cross}, g.B, g.H, g.Tq,
        g.Tk, g.D, g.first_image, int64_t{g.m}, int64_t{g.n}, int64_t{g.first},
        g.rows.extent, g.rows.parts, g.cols.extent, g.cols.parts}) {
    key += "," + std::to_string(field);
  }
  return key;
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

Coster Coster::ForAnotherGraph() const {
  Coster c = *this;
  c.prices_ = std::make_shared<Prices>();
  c.bounded_copies_prices_ = nullptr;
  c.bounded_copies_of_ = nullptr;
  return c;
}

Coster Coster::LowerBounds() const {
  CHECK(timing_ == passes::PhaseTiming::kScheduled)
      << "LowerBounds() of a LowerBounds() coster";
  Coster c = *this;
  c.timing_ = passes::PhaseTiming::kLowerBound;
  c.scheduled_cache_ = cache_;
  c.scheduled_prices_ = prices_;
  c.cache_ = bound_cache_;
  c.prices_ = std::make_shared<Prices>();
  c.bounded_copies_prices_ = nullptr;
  c.bounded_copies_of_ = nullptr;
  return c;
}

Coster Coster::Floors() const {
  CHECK(timing_ == passes::PhaseTiming::kLowerBound && !gemm_floors_)
      << "Floors() of a coster that is not a LowerBounds() coster";
  Coster c = *this;
  c.gemm_floors_ = true;
  return c;
}

Coster Coster::WithRedistributionsOf(const Coster& bounds) const {
  CHECK(timing_ == passes::PhaseTiming::kScheduled &&
        bounds.timing_ == passes::PhaseTiming::kLowerBound)
      << "WithRedistributionsOf() needs a scheduled coster and its bounds";
  Coster c = *this;
  c.redistributions_of_ = &bounds;
  // Ops priced by op index are this coster's where it has them; a copy op
  // priced here moves its operand at a bound, so it is kept apart.
  c.scheduled_prices_ = prices_;
  if (bounded_copies_prices_ == nullptr || bounded_copies_of_ != &bounds) {
    bounded_copies_prices_ = std::make_shared<Prices>();
    bounded_copies_of_ = &bounds;
  }
  c.prices_ = bounded_copies_prices_;
  return c;
}

int Coster::KGranule(fb::DType dtype) const {
  StatusOr<kernels::DType> d = kernels::DTypeFromFb(dtype);
  StatusOr<std::string_view> kernel =
      d.ok() ? kernels::GemmKernelName(*d) : d.status();
  StatusOr<const fb::KernelFormulaT*> f =
      kernel.ok() ? model().Formula(*kernel) : kernel.status();
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
  // A twin is stored as the body weight it stands for (it has no uses).
  const ValueNode& v = graph.value(graph.HeldAs(value));
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

namespace {

const char* OpClassName(OpClass c) {
  switch (c) {
    case OpClass::kGemm:
      return "gemm";
    case OpClass::kElementwise:
      return "elementwise";
    case OpClass::kRowWise:
      return "rowwise";
    case OpClass::kCopy:
      return "copy";
    case OpClass::kAttention:
      return "attention";
    case OpClass::kHost:
      return "host";
  }
  return "?";
}

// The recipe kind an op of this class takes.
Status CheckRecipeKind(const Graph& graph, int op, const Recipe& r) {
  const OpNode& node = graph.op(op);
  const fb::RecipeKind expected =
      node.op_class == OpClass::kGemm          ? fb::RecipeKind::Gemm
      : node.op_class == OpClass::kElementwise ? fb::RecipeKind::Elementwise
      : node.op_class == OpClass::kRowWise     ? fb::RecipeKind::RowWise
      : node.op_class == OpClass::kAttention   ? fb::RecipeKind::Attention
      : node.op_class == OpClass::kHost        ? fb::RecipeKind::Host
                                               : fb::RecipeKind::Copy;
  if (r.kind == expected) return Status::Ok();
  const std::string kind = OpClassName(node.op_class);
  return Status::BadInput(graph.OpLabel(op) + " is a " +
                          ir::OpKindText(node.kind) + " and needs " +
                          (kind[0] == 'e' || kind[0] == 'a' ? "an " : "a ") +
                          kind + " recipe");
}

Status CheckAttentionRecipe(const Graph& graph, int op, const Recipe& r,
                            int tiles) {
  StatusOr<passes::AttentionGrid> grid = AttentionGridOf(graph, op, r);
  if (!grid.ok()) return Status::BadInput(grid.status().message());
  if (r.first_tile + grid->Tiles() > tiles) {
    return Status::BadInput(
        "attention grid of " + std::to_string(grid->Tiles()) +
        " tiles (batch x heads x m x n) from tile " +
        std::to_string(r.first_tile) + " exceeds the target's " +
        std::to_string(tiles) + " tiles");
  }
  return Status::Ok();
}

// An elementwise layout whose per-column and per-row operands can follow it.
Status CheckElementwiseLayout(const OpNode& node, const fb::OwnershipT& layout) {
  if (layout.kind == fb::OwnershipKind::Blocked && layout.replicas != 1) {
    return Status::BadInput(
        "an elementwise layout is blocked(rows x channels) without "
        "replicas or flat, not " +
        FormatOwnership(layout));
  }
  for (SlotRole role : node.slots) {
    if (role == SlotRole::kVector && !passes::ColumnVectorOwnership(layout)) {
      return Status::BadInput(
          "a per-column operand cannot follow " + FormatOwnership(layout) +
          ": the tiles of one column block are not one run of its grid");
    }
    if (role == SlotRole::kColumn && !passes::RowColumnOwnership(layout)) {
      return Status::BadInput(
          "a per-row column operand cannot follow " + FormatOwnership(layout) +
          ": the tiles of one row block are not one run of its grid");
    }
  }
  return Status::Ok();
}

// Complete rows, except that a LayerNorm of [rows, w] also runs over column
// slices of its rows (passes/core/split_row_plan.h); a softmax has no such
// lowering.
Status CheckRowWiseLayout(const OpNode& node, const ValueNode& result,
                          const fb::OwnershipT& layout) {
  const bool split =
      node.kind == fb::OpKind::LayerNorm && result.shape.size() == 2;
  if (layout.kind != fb::OwnershipKind::Blocked || layout.replicas != 1 ||
      (!split && layout.partitions.back() != 1) ||
      !layout.sub_partitions.empty()) {
    return Status::BadInput(
        std::string(split ? "a LayerNorm needs blocked(p x c)"
                          : "a row-wise op needs complete rows: "
                            "blocked(p x 1)") +
        " without replicas, not " + FormatOwnership(layout));
  }
  return Status::Ok();
}

}  // namespace

Status Coster::CheckGemmRecipe(const Graph& graph, int op,
                               const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const int tiles = target().tiles;
  const auto& a = graph.value(node.operands[0]).shape;
  const auto& b = graph.value(node.operands[1]).shape;
  const int64_t M = a[0], K = a[1], N = b[1];
  if (r.m > M || r.k > K || r.n > N || int64_t{r.m} * r.k > M) {
    return Status::BadInput(
        "gemm m=" + std::to_string(r.m) + " k=" + std::to_string(r.k) +
        " n=" + std::to_string(r.n) + " does not fit [" + std::to_string(M) +
        "," + std::to_string(K) + "] x [" + std::to_string(K) + "," +
        std::to_string(N) +
        "] (needs n <= N, k <= K and m*k <= M: the k tiles of a block "
        "reduce a share of its rows each)");
  }
  const int64_t used = int64_t{r.m} * r.n * r.k;
  if (r.first_tile < 0 || r.first_tile + used > tiles) {
    return Status::BadInput(
        "gemm grid of " + std::to_string(used) + " tiles from tile " +
        std::to_string(r.first_tile) + " exceeds the target's " +
        std::to_string(tiles) + " tiles");
  }
  if (r.staging != fb::Staging::Complete) {
    const int granule = KGranule(GemmDType(graph, op));
    if (r.chunk_k < 1 || r.chunk_k % granule != 0) {
      return Status::BadInput(
          "chunk_k=" + std::to_string(r.chunk_k) +
          " must be a positive multiple of the kernel's K granule " +
          std::to_string(granule));
    }
  }
  if (r.staging == fb::Staging::Batched && r.batch_chunks < 1) {
    return Status::BadInput("batched(N) needs N >= 1");
  }
  return Status::Ok();
}

Status Coster::CheckRecipe(const Graph& graph, int op, const Recipe& r) const {
  TILEC_RETURN_IF_ERROR(CheckRecipeKind(graph, op, r));
  const OpNode& node = graph.op(op);
  const int tiles = target().tiles;
  switch (r.kind) {
    case fb::RecipeKind::Gemm:
      return CheckGemmRecipe(graph, op, r);
    case fb::RecipeKind::Host:
      // The result's ownership comes from its consumers (plan.cc).
      return passes::SameOwnership(r.layout, fb::OwnershipT{})
                 ? Status::Ok()
                 : Status::BadInput("a host recipe has no layout");
    case fb::RecipeKind::Attention:
      return CheckAttentionRecipe(graph, op, r, tiles);
    default:
      break;
  }
  const ValueNode& result = graph.value(node.result);
  const std::string invalid =
      passes::ValidateOwnership(r.layout, result.shape, tiles);
  if (!invalid.empty()) return Status::BadInput(invalid);
  if (r.kind == fb::RecipeKind::Elementwise) {
    return CheckElementwiseLayout(node, r.layout);
  }
  if (r.kind == fb::RecipeKind::RowWise) {
    return CheckRowWiseLayout(node, result, r.layout);
  }
  return Status::Ok();
}

passes::GemmGrid Coster::Grid(const Graph& graph, int op,
                              const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const auto& a = graph.value(node.operands[0]).shape;
  const auto& b = graph.value(node.operands[1]).shape;
  return passes::MakeGemmGrid(a[0], a[1], b[1], r.m, r.k, r.n, r.first_tile, 1,
                              r.staging, r.chunk_k, r.batch_chunks, r.steps,
                              r.interleaved_steps);
}

fb::OwnershipT Coster::StagedOwnership(const Recipe& r) const {
  return BlockedOwnership({r.m, r.k}, r.n, r.first_tile);
}

fb::OwnershipT Coster::ResultOwnership(const Graph& graph, int op,
                                       const Recipe& r) const {
  if (r.kind == fb::RecipeKind::Gemm) {
    return Grid(graph, op, r).ResultOwnership();
  }
  if (r.kind == fb::RecipeKind::Attention) {
    return AttentionGridOf(graph, op, r).value().ResultOwnership();
  }
  return r.layout;
}

std::optional<fb::OwnershipT> Coster::Required(const Graph& graph, int op,
                                               const Recipe& r,
                                               int slot) const {
  switch (graph.op(op).slots[slot]) {
    case SlotRole::kStaged:
    case SlotRole::kSource:
    case SlotRole::kHostImage:
      return std::nullopt;
    case SlotRole::kResident:
      return Grid(graph, op, r).BNeeded();
    case SlotRole::kProbs:
      return AttentionGridOf(graph, op, r).value().ProbsNeeded();
    case SlotRole::kQuery:
      return AttentionGridOf(graph, op, r).value().QueryNeeded();
    case SlotRole::kLayout:
      return r.layout;
    case SlotRole::kVector:
      // CheckRecipe refuses layouts without one.
      return passes::ColumnVectorOwnership(r.layout).value();
    case SlotRole::kColumn:
      // CheckRecipe refuses layouts without one.
      return passes::RowColumnOwnership(r.layout).value();
    case SlotRole::kRowParam:
      return BlockedOwnership({1}, static_cast<int>(passes::GridCells(r.layout)),
                              r.layout.first_tile, r.layout.tile_stride);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- caches

namespace {

// What `key` maps to in `map`; null if nothing.
template <typename Map>
const typename Map::mapped_type* Find(const Map& map, const std::string& key) {
  auto it = map.find(key);
  return it != map.end() ? &it->second : nullptr;
}

// What `key` maps to in `first` (a lower-bound coster's scheduled caches:
// exact prices beat bounds), else in `own`; null if in neither.
template <typename Map>
const typename Map::mapped_type* Lookup(const Map* first, const Map& own,
                                        const std::string& key) {
  if (first != nullptr) {
    if (const auto* found = Find(*first, key)) return found;
  }
  return Find(own, key);
}

}  // namespace

template <typename Value>
const Value* Coster::Cached(PriceTable<Value> Cache::*table,
                            const std::string& key) const {
  if (scheduled_cache_) {
    if (const Value* found = (scheduled_cache_.get()->*table).Find(key)) {
      return found;
    }
  }
  return (cache_.get()->*table).Find(key);
}

template <typename Value, typename Price>
StatusOr<Value> Coster::CachedOrPriced(PriceTable<Value> Cache::*table,
                                       const std::string& key,
                                       const Price& price) const {
  if (scheduled_cache_) {
    if (const Value* found = (scheduled_cache_.get()->*table).Find(key)) {
      return *found;
    }
  }
  return (cache_.get()->*table).FindOrPrice(key, price);
}

const std::vector<Recipe>* Coster::CachedCandidates(
    const std::string& key) const {
  return Cached(&Cache::candidates, key);
}

void Coster::StoreCandidates(std::string key, std::vector<Recipe> list) const {
  cache_->candidates.Add(std::move(key), std::move(list));
}

size_t Coster::cached_transfers() const { return cache_->transfers.size(); }

size_t Coster::cached_prices() const {
  return prices_->size() + cache_->shape_prices.size();
}

TransferCost Coster::Transfer(std::span<const int64_t> shape, int element_bytes,
                              const fb::OwnershipT& from,
                              const fb::OwnershipT& to,
                              bool may_unicast) const {
  std::string key = ShapeKey(shape) + "*" + std::to_string(element_bytes) +
                    " " + OwnKey(from) + " -> " + OwnKey(to) +
                    (may_unicast ? " op" : "");
  return *CachedOrPriced(
      &Cache::transfers, key, [&]() -> StatusOr<TransferCost> {
        // The multicast bound is a lower bound of either form a Redistribute
        // op may take: unicasts only add sends.
        if (timing_ == passes::PhaseTiming::kLowerBound) {
          return TransferBound(from, to, shape, element_bytes, target());
        }
        return may_unicast ? passes::RedistributeOpCost(from, to, shape,
                                                        element_bytes, target())
                           : passes::RedistributionCost(
                                 from, to, shape, element_bytes, target());
      });
}

TransferCost Coster::Phase(const std::string& key,
                          const std::function<TransferCost()>& time) const {
  return *CachedOrPriced(&Cache::phases, key,
                         [&]() -> StatusOr<TransferCost> { return time(); });
}

bool Coster::SamePlacement(std::span<const int64_t> shape,
                           const fb::OwnershipT& a,
                           const fb::OwnershipT& b) const {
  if (passes::SameOwnership(a, b)) return true;
  std::string key = ShapeKey(shape) + " " + OwnKey(a) + " = " + OwnKey(b);
  return *CachedOrPriced(&Cache::placements, key, [&]() -> StatusOr<bool> {
    return passes::SamePlacement(a, b, shape);
  });
}

TileBytes Coster::BytesPerTile(std::span<const int64_t> shape,
                               int element_bytes,
                               const fb::OwnershipT& ownership) const {
  std::string key;
  PutKey(static_cast<int64_t>(shape.size()), &key);
  for (int64_t extent : shape) PutKey(extent, &key);
  PutKey(element_bytes, &key);
  PutKey(ownership, &key);
  return *CachedOrPriced(&Cache::bytes, key, [&]() -> StatusOr<TileBytes> {
    return std::make_shared<const std::vector<int64_t>>(
        passes::BytesPerTile(ownership, shape, element_bytes, tiles()));
  });
}

// ---------------------------------------------------------------- prices

// A GEMM's key: everything PriceGemm and CheckRecipe read of it (operand
// and result shapes and dtypes, the dtype it is priced in). An attention
// op's: its grid, operands and staged slot.
std::optional<std::string> Coster::ShapeKeyOf(const Graph& graph, int op,
                                              const Recipe& recipe) const {
  const OpNode& node = graph.op(op);
  auto value_key = [&graph](int v) {
    const ValueNode& value = graph.value(v);
    return ShapeKey(value.shape) + "/" +
           std::to_string(static_cast<int>(value.dtype));
  };
  std::string key = std::to_string(static_cast<int>(node.kind));
  if (node.op_class == OpClass::kGemm) {
    return "gemm " + key + " " + value_key(node.operands[0]) + " x " +
           value_key(node.operands[1]) + " -> " + value_key(node.result) +
           " in " + std::to_string(static_cast<int>(GemmDType(graph, op)));
  }
  if (node.op_class == OpClass::kRowWise) {
    // PriceRowWise reads the kind and the result's shape and dtype.
    return "rowwise " + key + " -> " + value_key(node.result);
  }
  if (node.op_class != OpClass::kAttention) return std::nullopt;
  // PriceAttention reads the grid, the staged operand and the
  // probabilities' dtype: every field of each is in the key.
  StatusOr<passes::AttentionGrid> grid = AttentionGridOf(graph, op, recipe);
  if (!grid.ok()) return std::nullopt;
  key += AttentionGridKey(*grid);
  for (int v : node.operands) key += " " + value_key(v);
  return "attention " + key + " staged " + std::to_string(node.staged);
}

StatusOr<OpCost> Coster::PriceOp(
    const Graph& graph, int op, const Recipe& recipe,
    const fb::OwnershipT* source,
    std::span<const fb::OwnershipT* const> sources) const {
  const OpNode& node = graph.op(op);
  const bool needs_source = node.op_class == OpClass::kGemm ||
                            node.op_class == OpClass::kCopy ||
                            node.op_class == OpClass::kAttention;
  // A GEMM's, attention op's or row-wise op's price depends on its shapes and
  // dtypes alone, not on where the op is: cached for every graph on the
  // target (quantize-fp8 plans a trial graph per decision,
  // fuse-elementwise one per candidate).
  const std::optional<std::string> shape_key = ShapeKeyOf(graph, op, recipe);
  const bool by_shapes = shape_key.has_value();
  std::string key =
      (by_shapes ? *shape_key : std::to_string(op)) + " " + recipe.Text();
  if (needs_source) {
    if (source == nullptr) {
      return Status::Internal(graph.OpLabel(op) + ": priced without a source");
    }
    key += " <- " + OwnKey(*source);
  }
  const bool rows = node.kind == fb::OpKind::CopyRows;
  if (rows) {
    if (sources.size() != node.operands.size()) {
      return Status::Internal(graph.OpLabel(op) +
                              ": a row copy priced without every source");
    }
    for (size_t i = 1; i < sources.size(); ++i) {
      if (sources[i] == nullptr) {
        return Status::Internal(graph.OpLabel(op) + ": source " +
                                std::to_string(i) + " missing");
      }
      key += " , " + OwnKey(*sources[i]);
    }
  }
  auto price = [&] { return PriceAnew(graph, op, recipe, source, sources); };
  if (!by_shapes) {
    if (const OpCost* cached = Lookup(scheduled_prices_.get(), *prices_, key)) {
      return *cached;
    }
    StatusOr<OpCost> cost = price();
    if (cost.ok()) prices_->emplace(std::move(key), *cost);
    return cost;
  }
  // A floor is kept apart from the closer bound of the same key, which is
  // taken where there is one.
  if (gemm_floors_ && node.op_class == OpClass::kGemm) {
    if (const OpCost* closer = Cached(&Cache::shape_prices, key)) {
      return *closer;
    }
    key = "floor " + key;
  }
  return CachedOrPriced(&Cache::shape_prices, key, price);
}

StatusOr<OpCost> Coster::PriceAnew(
    const Graph& graph, int op, const Recipe& recipe,
    const fb::OwnershipT* source,
    std::span<const fb::OwnershipT* const> sources) const {
  if (Status invalid = CheckRecipe(graph, op, recipe); !invalid.ok()) {
    return Status::Internal(graph.OpLabel(op) + ": " + invalid.message());
  }
  StatusOr<OpCost> cost = Status::Internal("unpriced");
  switch (graph.op(op).op_class) {
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
      cost = graph.op(op).kind == fb::OpKind::CopyRows
                 ? PriceRows(graph, op, recipe, sources)
                 : PriceCopy(graph, op, recipe, *source);
      break;
    case OpClass::kAttention:
      cost = PriceAttention(graph, op, recipe, *source);
      break;
    case OpClass::kHost: {
      // The host's layout transform costs the device nothing: the patches
      // arrive with the input write, which no plan pays for either.
      OpCost host;
      host.detail = "host: written with the graph input, no device work";
      cost = host;
      break;
    }
  }
  if (!cost.ok()) {
    return cost.status().WithContext(graph.OpLabel(op) + " " + recipe.Text());
  }
  VLOG(2) << graph.OpLabel(op) << " " << recipe.Text() << ": compute "
          << cost->compute << " + exchange " << cost->exchange << " ("
          << cost->phases << " phases), scratch " << cost->max_scratch << " B; "
          << cost->detail;
  return cost;
}

StatusOr<int64_t> Coster::StepCycles(const ElementwiseStep& step, int64_t rows,
                                     int64_t w) const {
  return kernels::BodyKernelCycles(model(), step.call, step.out_dtype, rows,
                                   w);
}

StatusOr<OpCost> Coster::PriceElementwise(const Graph& graph, int op,
                                          const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  const fb::OwnershipT& l = r.layout;
  // Steps that need row structure (a per-column operand, row moments).
  bool row_free = true;
  for (const ElementwiseStep& step : node.steps) {
    row_free = row_free && kernels::RowFree(step.call);
  }
  // One tile holding `held`: one call per step and box, or, where the steps
  // need no rows, one call per step over the tile's whole range (its
  // operands hold the same boxes back to back, as the result does).
  auto tile_cycles = [&](std::span<const Box> held) -> StatusOr<int64_t> {
    int64_t elements = 0;
    for (const Box& box : held) elements += box.Elements();
    if (elements == 0) return int64_t{0};
    int64_t total = 0;
    if (row_free && held.size() > 1) {
      for (const ElementwiseStep& step : node.steps) {
        StatusOr<int64_t> c = StepCycles(step, 1, elements);
        if (!c.ok()) return c.status();
        total += *c;
      }
      return total;
    }
    for (const Box& box : held) {
      for (const ElementwiseStep& step : node.steps) {
        StatusOr<int64_t> c =
            StepCycles(step, passes::BoxRows(box), passes::BoxWidth(box));
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
    kernels += (kernels.empty() ? "" : "+") + step.call.kernel;
  }
  cost.detail = kernels + " " + std::to_string(cost.compute);
  return cost;
}

StatusOr<OpCost> Coster::PriceRowWise(const Graph& graph, int op,
                                      const Recipe& r) const {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  if (node.kind == fb::OpKind::LayerNorm &&
      passes::HasSplitRows(r.layout, out.shape)) {
    return PriceSplitLayerNorm(graph, op, r);
  }
  int64_t rows = 1;
  const size_t rank = out.shape.size();
  for (size_t a = 0; a + 1 < rank; ++a) {
    rows *= ir::CeilDiv(out.shape[a], r.layout.partitions[a]);
  }
  const int64_t w = out.shape[rank - 1];
  StatusOr<kernels::DType> kout = kernels::DTypeFromFb(out.dtype);
  if (!kout.ok()) return kout.status();
  StatusOr<int64_t> c = node.kind == fb::OpKind::Softmax
                            ? kernels::SoftmaxCycles(model(), *kout, rows, w)
                            : kernels::LayerNormCycles(model(), *kout, rows, w);
  if (!c.ok()) return c.status();
  OpCost cost;
  cost.compute = *c;
  cost.detail = std::string(node.kind == fb::OpKind::Softmax
                                ? kernels::names::kSoftmax
                                : kernels::names::kLayerNorm) +
                " " + std::to_string(rows) + "x" + std::to_string(w) + " " +
                std::to_string(*c);
  return cost;
}

// A LayerNorm over split rows as the lowering emits it
// (passes/core/split_row_plan.h): partial moments per slice, their gather
// within each row group, then combine and normalize per slice.
StatusOr<OpCost> Coster::PriceSplitLayerNorm(const Graph& graph, int op,
                                             const Recipe& r) const {
  const ValueNode& out = graph.value(graph.op(op).result);
  StatusOr<passes::SplitRowPlan> plan =
      passes::PlanSplitRows(r.layout, out.shape, graph.OpLabel(op));
  if (!plan.ok()) return plan.status();
  StatusOr<passes::SplitRowCost> c =
      passes::PriceSplitRows(*plan, out.dtype, model(), target(), timing_);
  if (!c.ok()) return c.status();
  OpCost cost = WithExchange(c->compute, c->exchange, c->phases);
  cost.max_scratch =
      *std::max_element(c->scratch.begin(), c->scratch.end());
  cost.scratch = std::make_shared<std::vector<int64_t>>(std::move(c->scratch));
  cost.scratch_text =
      "moments " + std::to_string(cost.max_scratch) + " B";
  cost.detail = std::string(kernels::names::kLnMoments) + " " +
                std::to_string(c->moments) + ", gather " +
                std::to_string(c->exchange.phase_cycles) + ", " +
                std::string(kernels::names::kMomentsCombine) + "+" +
                std::string(kernels::names::kNormalize) + " " +
                std::to_string(c->normalize);
  return cost;
}

// The attention op as the lowering emits it (passes/core/attention_plan.h):
// each tile gathers its q/k or v block of qkv, then one kernel call.
StatusOr<OpCost> Coster::PriceAttention(const Graph& graph, int op,
                                        const Recipe& r,
                                        const fb::OwnershipT& qkv_owner) const {
  const OpNode& node = graph.op(op);
  StatusOr<passes::AttentionGrid> grid = AttentionGridOf(graph, op, r);
  if (!grid.ok()) return grid.status();
  const ValueNode& qkv = graph.value(node.operands[node.staged]);
  const fb::DType probs_dtype = node.kind == fb::OpKind::AttentionContext
                                    ? graph.value(node.operands[0]).dtype
                                    : qkv.dtype;
  StatusOr<passes::AttentionCost> a =
      passes::PriceAttention(*grid, qkv_owner, qkv.shape, qkv.dtype,
                             probs_dtype, model(), target(), timing_);
  if (!a.ok()) return a.status();
  OpCost cost = WithExchange(a->compute, a->exchange, a->phases);
  auto scratch = std::make_shared<std::vector<int64_t>>(tiles(), 0);
  const int eb = DTypeBytes(qkv.dtype);
  grid->ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
    for (const Box& box : grid->StagedBoxes(b, h, mi, ni)) {
      (*scratch)[t] += box.Elements() * eb;
    }
  });
  cost.scratch = scratch;
  cost.max_scratch = a->stage_bytes;
  cost.scratch_text = "qkv staging " + std::to_string(a->stage_bytes) + " B";
  cost.detail = std::string(node.kind == fb::OpKind::AttentionScores
                                ? kernels::names::kGemmNt
                                : kernels::names::kGemm) +
                " " + std::to_string(grid->Tiles()) + " tiles, slowest " +
                std::to_string(a->kernel_cycles) + ", copies " +
                std::to_string(a->copy_cycles) + ", delivery " +
                std::to_string(a->exchange.phase_cycles) + " (" +
                std::to_string(a->exchange.max_bytes_received) +
                " B to the busiest tile)";
  return cost;
}

StatusOr<TransferCost> Coster::Redistribution(std::span<const int64_t> shape,
                                              int element_bytes,
                                              const fb::OwnershipT& from,
                                              const fb::OwnershipT& to,
                                              bool may_unicast) const {
  if (redistributions_of_ != nullptr) {
    return redistributions_of_->Redistribution(shape, element_bytes, from, to,
                                               may_unicast);
  }
  std::string key = ShapeKey(shape) + "*" + std::to_string(element_bytes) +
                    " " + OwnKey(from) + " -> " + OwnKey(to) +
                    (may_unicast ? "" : " multicast");
  return CachedOrPriced(&Cache::redistributions, key, [&] {
    return RedistributionAnew(shape, element_bytes, from, to, may_unicast);
  });
}

StatusOr<TransferCost> Coster::RedistributionAnew(
    std::span<const int64_t> shape, int element_bytes,
    const fb::OwnershipT& from, const fb::OwnershipT& to,
    bool may_unicast) const {
  TransferCost cost = Transfer(shape, element_bytes, from, to, may_unicast);
  // Local copies per tile as the lowering emits them: only tiles that copy
  // something need their storage.
  const int T = tiles();
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
      src[t] = passes::Consecutive(b);
    });
    passes::CopyPricer copier(model());
    Status status;
    passes::ForEachHeldBoxes(to, shape, [&](int t, std::span<const Box> b) {
      if (t >= T || box_at[t] == box_at[t + 1] || !status.ok()) return;
      // A tile whose source storage is the destination's uses it in place.
      const Segments dst = passes::Consecutive(b);
      if (src[t] == dst) return;
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
  return cost;
}

StatusOr<OpCost> Coster::PriceRows(
    const Graph& graph, int op, const Recipe& r,
    std::span<const fb::OwnershipT* const> sources) const {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  std::vector<passes::RowOperand> operands;
  for (size_t i = 0; i < node.operands.size(); ++i) {
    operands.push_back({sources[i], graph.value(node.operands[i]).shape});
  }
  // The result's dtype: the verifier keeps every operand's equal to it.
  const int eb = DTypeBytes(out.dtype);
  const passes::RowCopyPlan plan =
      passes::PlanRowCopies(operands, r.layout, out.shape, node.rows, eb);
  const TransferCost t = passes::RowExchangeCost(
      plan, operands, r.layout, out.shape, eb, target(), timing_);
  StatusOr<int64_t> copies =
      passes::RowCopyCycles(plan, operands, r.layout, out.shape, eb, model());
  if (!copies.ok()) return copies.status();
  OpCost cost;
  cost.compute = *copies;
  cost.exchange = t.phase_cycles;
  cost.phases = t.transfers > 0 ? 1 : 0;
  cost.exchange_bytes = t.bytes_received;
  cost.code = t.tile_code;
  cost.detail = "copy rows: phase " + std::to_string(t.phase_cycles) + " (" +
                std::to_string(t.transfers) + " transfers), local copies " +
                std::to_string(*copies);
  return cost;
}

StatusOr<OpCost> Coster::PriceCopy(const Graph& graph, int op, const Recipe& r,
                                   const fb::OwnershipT& source) const {
  const OpNode& node = graph.op(op);
  const ValueNode& in = graph.value(node.operands[0]);
  OpCost cost;
  if (SamePlacement(in.shape, source, r.layout)) return cost;
  StatusOr<TransferCost> moved =
      Redistribution(in.shape, DTypeBytes(in.dtype), source, r.layout);
  if (!moved.ok()) return moved.status();
  const TransferCost& t = *moved;
  cost.compute = t.local_copy_cycles;
  cost.exchange = t.phase_cycles;
  cost.phases = t.transfers > 0 ? 1 : 0;
  cost.exchange_bytes = t.bytes_received;
  cost.code = t.tile_code;
  cost.detail = "copy phase " + std::to_string(t.phase_cycles) +
                ", local copies " + std::to_string(t.local_copy_cycles);
  return cost;
}

}  // namespace tilec::plan
