// Prices recipes on a target (docs/planner.md, "Cost model"): kernel cycles
// from the target's formulas (kernels::CostModel through the kernels'
// *Cycles functions), exchange phases and local copies from the ownership
// algebra, and each op's scratch memory per tile. Transfer costs, per-tile
// byte counts and op prices are cached, so that a search re-prices only
// what a proposal changes.
//
// Threads: costers made from one another (ForAnotherGraph, LowerBounds,
// copies) share their graph-independent caches, which are locked, so that
// each thread may plan its own graph with its own coster of one family
// (quantize-fp8 prices two trial graphs at once). One coster's prices by op
// index are not locked: a coster and the LowerBounds() costers made from it
// belong to one thread.

#ifndef TILEC_PASSES_PLAN_COST_H_
#define TILEC_PASSES_PLAN_COST_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "formats/status.h"
#include "formats/target.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/layout.h"
#include "passes/core/ownership.h"
#include "passes/core/tile_plan.h"
#include "passes/plan/graph.h"
#include "passes/plan/price_table.h"

namespace tilec::plan {

struct PriceOptions {
  // Price every GEMM's inputs in this dtype (e.g. FP8E4M3) instead of the
  // operands' own: the left operand is cast at its owners and delivered in
  // it, the weight is resident in it. Emulates a later quantize-fp8 pass.
  std::optional<fb::DType> gemm_dtype;
};

using TileBytes = std::shared_ptr<const std::vector<int64_t>>;

// The price of one op under one recipe.
struct OpCost {
  int64_t compute = 0;   // slowest tile's kernel (and local copy) cycles
  int64_t exchange = 0;  // its exchange phases
  int phases = 0;
  int64_t exchange_bytes = 0;  // bytes received, summed over tiles
  // The exchange tables its phases add to each tile's code (null: none).
  passes::TileCodeBytes code;
  // Scratch bytes per tile while the op runs (null: none), and the parts of
  // the largest, for messages ("A staging 31104 B, partials 51840 B").
  TileBytes scratch;
  int64_t max_scratch = 0;
  std::string scratch_text;
  // How the cycles come about, for --explain ("gemm 3 calls 26232, ...").
  std::string detail;

  int64_t Cycles() const { return compute + exchange; }
};

class Coster {
 public:
  static StatusOr<Coster> Create(const fb::TargetT& target,
                                 const PriceOptions& options);

  // This coster for another graph (ops renumbered, e.g. a fused candidate):
  // prices by op index cached afresh; transfers, placements, bytes per tile
  // and GEMM prices (keyed by shapes) shared with this one.
  Coster ForAnotherGraph() const;
  // This coster pricing every exchange phase at its endpoint bound (a
  // redistribution's with each transfer one fragment, made without its
  // pieces, and no exchange tables: for cycles only), except where this one
  // has already priced the same thing by its schedule (which it then
  // takes): each price no higher than this coster's, and exact for
  // everything already priced. The greedy plan skips, without
  // scheduling them, candidates whose lower bound cannot beat the best.
  // It sees what this coster prices later; its own prices by op index are
  // its own, its shape-keyed ones shared with every LowerBounds() coster of
  // this coster's family.
  Coster LowerBounds() const;
  // A LowerBounds() coster whose GEMM prices are coarser bounds still,
  // made without planning the copies of tiles that hold part of their
  // left operand (most of a GEMM price's work): the greedy plan rules out
  // most GEMM candidates on these before it bounds the rest closely
  // (Search::CheapestOption). A GEMM price this coster or its LowerBounds()
  // parent has already made, a closer bound, is taken instead. Its other
  // prices are its parent's, and its caches its parent's.
  Coster Floors() const;
  // This coster with its redistributions (Redistribution) priced by
  // `bounds`, a LowerBounds() coster of it, which must outlive the copy:
  // its ops priced as this coster prices them (a copy op's prices, which
  // are redistributions, kept apart), its redistributions no dearer.
  // Memory repair's bounds of a trial (RepairRankBound).
  Coster WithRedistributionsOf(const Coster& bounds) const;
  passes::PhaseTiming timing() const { return timing_; }
  bool gemm_floors() const { return gemm_floors_; }

  const kernels::CostModel& model() const { return *model_; }
  const fb::TargetT& target() const { return model_->target(); }
  const PriceOptions& options() const { return options_; }
  int tiles() const { return target().tiles; }
  // Bytes per tile a plan may fill with its code region (Evaluation::
  // code_bytes in whole elements) and its tensors: the SRAM less a
  // sixteenth of the tensor memory, kept for placing buffers, which the
  // planner counts in bytes but emit-device must place in memory elements
  // (GEMM accumulators in interleaved elements apart from their left
  // operands): the whole so400m model planned to 472 KB of 481 KB could
  // not be placed.
  int64_t capacity() const {
    return int64_t{target().sram_bytes} - ir::MaxTileTensorBytes(target()) / 16;
  }

  // Ok if `recipe` can run `op` on this target, else BadInput saying why
  // not.
  Status CheckRecipe(const Graph& graph, int op, const Recipe& recipe) const;

  // The ownership the op's result gets under the recipe.
  fb::OwnershipT ResultOwnership(const Graph& graph, int op,
                                 const Recipe& recipe) const;
  // What operand `slot` needs; nullopt for a GEMM's staged left operand and
  // a copy's source (those take the value as it is).
  std::optional<fb::OwnershipT> Required(const Graph& graph, int op,
                                         const Recipe& recipe, int slot) const;
  // A GEMM's left operand on its grid: blocked(m x k, rep=n).
  fb::OwnershipT StagedOwnership(const Recipe& recipe) const;
  // The tile grid of GEMM `op` under `recipe` (passes/core/tile_plan.h).
  passes::GemmGrid Grid(const Graph& graph, int op, const Recipe& recipe) const;

  // Element bytes a value occupies in memory under the pricing options
  // (weights read only as GEMM right operands are resident in gemm_dtype;
  // a repeat's twins as their body weight).
  int StoredBytes(const Graph& graph, int value) const;
  // A GEMM recipe's grid, staging and chunks against its operands' shapes.
  Status CheckGemmRecipe(const Graph& graph, int op, const Recipe& r) const;
  // The K granule of the GEMM kernel for `dtype`: the divisor of K in its
  // formula (32 for FP8, 16 for F16 on ipu21).
  int KGranule(fb::DType dtype) const;
  // The dtype GEMM `op` is priced in.
  fb::DType GemmDType(const Graph& graph, int op) const;

  // The op's price under `recipe` when its staged or source operand is
  // owned `source` (ignored by ops without such an operand). A CopyRows
  // reads every operand as it is: `sources` then holds each operand's
  // ownership, in operand order (`source` is the first). Memoized.
  StatusOr<OpCost> PriceOp(
      const Graph& graph, int op, const Recipe& recipe,
      const fb::OwnershipT* source,
      std::span<const fb::OwnershipT* const> sources = {}) const;

  // A redistribution as the lowering emits it: the ownership algebra's
  // exchange phase, and per tile the local copies of PlanTransfers, one
  // copy call per run between the source's storage and the destination's,
  // except on tiles whose source storage already is the destination's (used
  // in place). Unicasts where they are shorter
  // (passes::RedistributeOpCost), unless `may_unicast` is false. Memoized.
  StatusOr<passes::TransferCost> Redistribution(std::span<const int64_t> shape,
                                                int element_bytes,
                                                const fb::OwnershipT& from,
                                                const fb::OwnershipT& to,
                                                bool may_unicast = true) const;

  // An exchange phase that `time` builds and times (at this coster's
  // timing), memoized by `key`, which must name everything the phase
  // depends on: valid for every graph on the target.
  passes::TransferCost Phase(
      const std::string& key,
      const std::function<passes::TransferCost()>& time) const;

  // Memoized ownership algebra: an operand's delivery
  // (passes::RedistributionCost), or with `may_unicast` a Redistribute op's,
  // which may go as unicasts (passes::RedistributeOpCost).
  passes::TransferCost Transfer(std::span<const int64_t> shape,
                                int element_bytes, const fb::OwnershipT& from,
                                const fb::OwnershipT& to,
                                bool may_unicast = false) const;
  bool SamePlacement(std::span<const int64_t> shape, const fb::OwnershipT& a,
                     const fb::OwnershipT& b) const;
  TileBytes BytesPerTile(std::span<const int64_t> shape, int element_bytes,
                         const fb::OwnershipT& ownership) const;

  // An op's candidate recipes (plan::Candidates), kept under a key naming
  // everything they depend on: quantize-fp8 plans a graph per trial, and
  // most ops are the same in each.
  const std::vector<Recipe>* CachedCandidates(const std::string& key) const;
  void StoreCandidates(std::string key, std::vector<Recipe> list) const;

  // Cache sizes, for progress and tests.
  size_t cached_transfers() const;
  size_t cached_prices() const;

  // Prices keyed by shapes, element bytes and ownerships alone: valid for
  // any graph on the target (a coster's own are private; the type is what
  // passes/plan/price_cache.cc saves and reads).
  struct Cache {
    PriceTable<passes::TransferCost> transfers;
    PriceTable<passes::TransferCost> redistributions;
    PriceTable<bool> placements;
    PriceTable<TileBytes> bytes;
    PriceTable<OpCost> shape_prices;          // by ShapeKeyOf
    PriceTable<passes::TransferCost> phases;  // Phase
    PriceTable<std::vector<Recipe>> candidates;
  };

 private:
  // They read and fill the caches (--price_cache).
  friend std::string SavePrices(const Coster& coster);
  friend std::optional<std::string> TakePrices(std::string_view bytes,
                                               const Coster& coster);

  Coster() = default;
  // PriceOp's price, made here (not looked up).
  StatusOr<OpCost> PriceAnew(
      const Graph& graph, int op, const Recipe& recipe,
      const fb::OwnershipT* source,
      std::span<const fb::OwnershipT* const> sources) const;
  // Redistribution's price, made here (not looked up).
  StatusOr<passes::TransferCost> RedistributionAnew(
      std::span<const int64_t> shape, int element_bytes,
      const fb::OwnershipT& from, const fb::OwnershipT& to,
      bool may_unicast) const;
  // passes/plan/gemm_cost.cc.
  StatusOr<OpCost> PriceGemm(const Graph& graph, int op, const Recipe& recipe,
                             const fb::OwnershipT& source) const;
  StatusOr<OpCost> PriceElementwise(const Graph& graph, int op,
                                    const Recipe& recipe) const;
  StatusOr<OpCost> PriceAttention(const Graph& graph, int op,
                                  const Recipe& recipe,
                                  const fb::OwnershipT& qkv_owner) const;
  StatusOr<OpCost> PriceRowWise(const Graph& graph, int op,
                                const Recipe& recipe) const;
  StatusOr<OpCost> PriceSplitLayerNorm(const Graph& graph, int op,
                                       const Recipe& recipe) const;
  // A CopyRows as the lowering emits it (passes/core/row_plan.h).
  StatusOr<OpCost> PriceRows(
      const Graph& graph, int op, const Recipe& recipe,
      std::span<const fb::OwnershipT* const> sources) const;
  StatusOr<OpCost> PriceCopy(const Graph& graph, int op, const Recipe& recipe,
                             const fb::OwnershipT& source) const;
  // The price cache key, but for recipe and source, of an op whose price
  // depends on its operands' shapes and dtypes alone (a GEMM, attention, a
  // row-wise op), valid for every graph on the target; nullopt for other
  // ops.
  std::optional<std::string> ShapeKeyOf(const Graph& graph, int op,
                                        const Recipe& recipe) const;
  // Cycles of one elementwise step on a [rows, w] piece.
  StatusOr<int64_t> StepCycles(const ElementwiseStep& step, int64_t rows,
                               int64_t w) const;

  std::optional<kernels::CostModel> model_;
  PriceOptions options_;
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
  // The LowerBounds() costers' own cache, shared by every coster made from
  // this one (a bound, keyed like the rest, is valid for any graph): the
  // searches of quantize-fp8's trial plans and of fuse-elementwise's
  // candidates bound each transfer once, not once a search.
  std::shared_ptr<Cache> bound_cache_ = std::make_shared<Cache>();
  // What `key` maps to in one of the caches: the scheduled coster's first
  // (a LowerBounds coster: exact prices beat bounds), then this one's;
  // null if in neither.
  template <typename Value>
  const Value* Cached(PriceTable<Value> Cache::*table,
                      const std::string& key) const;
  // What `key` maps to in one of the caches, or else `price()` (a
  // StatusOr<Value>), made once in this coster's (PriceTable::FindOrPrice).
  template <typename Value, typename Price>
  StatusOr<Value> CachedOrPriced(PriceTable<Value> Cache::*table,
                                 const std::string& key,
                                 const Price& price) const;
  // Other ops' prices, keyed by op index: valid for one graph.
  using Prices = std::unordered_map<std::string, OpCost>;
  std::shared_ptr<Prices> prices_ = std::make_shared<Prices>();
  // A LowerBounds() coster's: the scheduled coster's caches, looked in
  // first.
  passes::PhaseTiming timing_ = passes::PhaseTiming::kScheduled;
  bool gemm_floors_ = false;  // a Floors() coster
  const Coster* redistributions_of_ = nullptr;  // WithRedistributionsOf
  std::shared_ptr<const Cache> scheduled_cache_;
  std::shared_ptr<const Prices> scheduled_prices_;
  // The prices by op index of this coster's WithRedistributionsOf(bounds)
  // copies, kept from copy to copy: memory repair bounds thousands of
  // trials a round through such copies, and with a fresh map each priced
  // every row copy again (so400m batch 8's plan-ownership: 326 -> 308 s,
  // the same plan). For one graph (ForAnotherGraph drops them) and one
  // `bounds`. Unlocked, as prices_ is: one thread uses a coster at a time.
  mutable std::shared_ptr<Prices> bounded_copies_prices_;
  mutable const Coster* bounded_copies_of_ = nullptr;
};

std::string ShapeKey(std::span<const int64_t> shape);
// Every field of an attention grid, for cache keys: ",part,cross,B,...".
std::string AttentionGridKey(const passes::AttentionGrid& g);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_COST_H_
