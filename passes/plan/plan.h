// A plan (a recipe per op), its evaluation (value ownerships, per-op costs,
// the redistributions it needs, peak memory per tile) and how it is written
// into a module (docs/planning.md).

#ifndef TILEC_PASSES_PLAN_PLAN_H_
#define TILEC_PASSES_PLAN_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/ownership.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"

namespace tilec::plan {

// Where a weight kept in a home lives for the whole program; it is
// redistributed to each use (docs/planning.md, "Weight homes").
struct WeightHome {
  // Shaped for delivery (HomeOwnershipIn) to the layout its first
  // consumer's recipe needs, else, or where that layout admits no delivery
  // home, `fixed`. first_replica spreads delivery homes of small weights
  // over the replicas' tiles. `spread`: where that layout has one replica
  // of each block (so the delivery home is the layout itself), cut each
  // block into slabs on tiles beyond it (passes::SpreadHome) instead; memory
  // repair sets it (SpreadHomes).
  bool delivery = false;
  bool spread = false;
  int first_replica = 0;
  fb::OwnershipT fixed;
};
bool operator==(const WeightHome& a, const WeightHome& b);

struct Plan {
  std::vector<Recipe> recipes;  // by op index
  // By value index. Empty, or nullopt for a weight: resident in the
  // ownership its first consumer needs.
  std::vector<std::optional<WeightHome>> homes;

  const WeightHome* Home(int value) const {
    return value < static_cast<int>(homes.size()) && homes[value]
               ? &*homes[value]
               : nullptr;
  }

  // FNV-1a of the recipe texts: the identity of an incumbent.
  uint64_t Hash() const;
};

// A value moved to another ownership for some of its consumers; written out
// as a Redistribute op just before the first of them. Inside a repeat's
// body it serves only that body and runs every iteration.
//
// The loop edge of a repeat (`loop_edge`): iteration i+1 reads carried_out
// where iteration 0 read carried_in, so when their ownerships differ
// carried_out moves to carried_in's at the end of the body (before_op is the
// body's end, possibly num_ops), every iteration; `uses` are carried_out's
// uses after the body, which read the moved value.
struct Redistribution {
  int value = -1;
  fb::OwnershipT to;
  int before_op = -1;
  std::vector<std::pair<int, int>> uses;  // (op, slot) it feeds
  passes::TransferCost cost;
  int runs = 1;  // times it runs: its repeat's count inside a body
  bool loop_edge = false;
  int64_t Cycles() const { return cost.TotalCycles(); }  // one run
};

// One buffer on the peak tile, for infeasibility messages.
struct MemoryItem {
  std::string
      what;  // "%4 l0.mlp.up.w (resident)", "op 1 (l0.mlp.up) scratch: ..."
  int64_t bytes = 0;
  int weight = -1;  // the weight (a twin's body weight) it is, if one
};

// Memory repair's order of evaluations, smaller first
// (Evaluation::RepairRank).
using RepairRankValue = std::tuple<int64_t, int64_t, int64_t>;

// Ops' costs are per run: a body op of a repeat counts its repeat's count
// times in total_cycles. A repeat's twins take their body weight's
// ownership and are live for the whole program.
struct Evaluation {
  // By value index: empty if unused, and for a twin (its body weight's
  // stands for it, OwnershipOf).
  std::vector<fb::OwnershipT> owners;
  std::vector<bool> owned;             // by value index
  std::vector<OpCost> ops;             // by op index, one run each
  std::vector<Redistribution> redistributions;
  int64_t total_cycles = 0;
  // By repeat: one iteration's cycles (body ops, their redistributions, the
  // loop edge) and the index of its loop edge in redistributions (-1: none).
  std::vector<int64_t> repeat_cycles;
  std::vector<int> loop_edges;

  // Memory (EvalMode::kFull only).
  bool memory_checked = false;
  int64_t peak_bytes = 0;  // the largest live bytes on any tile
  int peak_tile = -1;
  std::string peak_where;              // "op 1 (l0.mlp.up)" or a redistribution
  std::vector<MemoryItem> peak_items;  // largest first
  std::vector<int64_t> op_peak;        // by op: largest live bytes on a tile
  std::vector<int64_t> redistribution_peak;
  int64_t capacity = 0;
  // The estimate of the largest tile's code (EstimateTileCodeBytes); each
  // tile's own code takes whole memory elements beside its tensors.
  int64_t code_bytes = 0;
  bool feasible() const { return !memory_checked || peak_bytes <= capacity; }
  // How far from fitting: the bytes over capacity summed over the steps
  // (ops and redistributions) that do not fit. Zero iff it fits.
  int64_t Excess() const;
  // Memory repair's order, smaller first: the least Excess, then (while it
  // does not fit) the lowest peak, then the fewest cycles.
  RepairRankValue RepairRank() const {
    return {Excess(), feasible() ? 0 : peak_bytes, total_cycles};
  }
  // "tile 0 needs 612345 B at op 1 (l0.mlp.up) but 481152 B hold tensors:
  // %4 l0.mlp.up.w (resident) 221184 B, ...; 12 twins (later iterations'
  // weights) 24576 B; total ...".
  std::string Diagnosis() const;
};

enum class EvalMode { kCyclesOnly, kFull };

// Value v's ownership under `e` (where e.owned[v]): a twin's is its body
// weight's, which is not copied for it (a 27-layer model has 312 twins,
// and the search evaluates thousands of plans).
const fb::OwnershipT& OwnershipOf(const Graph& graph, const Evaluation& e,
                                  int v);

// Where weight `value`, in home `home`, lives under `plan`: its delivery
// home (passes::DeliveryHome) for the layout its first consumer needs,
// with the slab count that puts the fewest bytes on a tile holding a slab
// (the home's bytes, every iteration's copy, plus the exchange tables to
// receive a piece per slab), unless the flat home home.fixed puts fewer
// by the same measure; home.fixed where the layout admits no delivery home.
// A spread home (home.spread, a layout of one replica per block) is a
// passes::SpreadHome, its slab count chosen by the same measure.
fb::OwnershipT HomeOwnershipIn(const Graph& graph, const Coster& coster,
                               const Plan& plan, int value,
                               const WeightHome& home);

// The layout weight `value`'s first consumer needs under `plan`, if that
// consumer reads it in a layout (not staged, a row source or a host image).
std::optional<fb::OwnershipT> FirstConsumerLayout(const Graph& graph,
                                                  const Coster& coster,
                                                  const Plan& plan, int value);

// The code emit-device will size on each tile, estimated from above: the
// target's runtime; for each superstep of every op and redistribution (one
// per phase and one more) the superstep's entry and one call of seven
// operands and parameters (a GEMM call's); and the exchange tables of the
// phases the tile takes part in (a repeat body's phases once, as
// emit-device shares its code between iterations).
std::vector<int64_t> EstimateTileCodeBytes(const fb::TargetT& target,
                                           const Evaluation& e);

// Evaluates `plan`. With `upto` >= 0 only ops 0..upto count (the prefix the
// greedy initial plan has decided); memory is then not checked.
StatusOr<Evaluation> Evaluate(const Graph& graph, const Coster& coster,
                              const Plan& plan, EvalMode mode, int upto = -1);

class RepairFloors;

// A lower bound of Evaluate(graph, coster, plan, kFull).RepairRank() in
// RepairRank's order, for memory repair to rule trials out unevaluated
// (Search::ClosestRepairTrial): the ops priced by `coster`, the
// redistributions by `bounds` (coster's LowerBounds()), their exchange
// tables only where the plan `known` was made for has the same
// redistribution (RepairFloors::KnownTables). The ownerships, buffers, ops and
// redistributions are Evaluate's, so every tile at every step holds no
// more bytes than in either form Evaluate may keep (unicasts where
// shorter, or every redistribution a multicast), and the cycles are no
// more than the shorter form's.
StatusOr<RepairRankValue> RepairRankBound(const Graph& graph,
                                          const Coster& coster,
                                          const Coster& bounds,
                                          const Plan& plan,
                                          const RepairFloors* known = nullptr);

// Floors of RepairRank for the plans that differ from `plan` only in one
// op's recipe, each far cheaper than RepairRankBound, so that a round of
// memory repair prices few of its thousands of trials at all (most change
// nothing near the steps over capacity). Built once a round from the
// incumbent's full evaluation `e`.
//
// A trial of op i can change only what op i touches: its operands and
// result (their twins and loop partners too), the redistributions of those
// or for the ops that read them, those ops' scratch and code. Everything
// else keeps its bytes at every step that is not such a redistribution, so
// the floor sums only the rest at those steps (a redistribution's exchange
// tables at the fewer of its two forms', as Evaluate may keep either),
// plus a GEMM trial's own weights, which every plan holds for the whole
// program. The cycles' floor is 0: a trial that fits is ruled out by
// RepairRankBound.
class RepairFloors {
 public:
  RepairFloors(const Graph& graph, const Coster& coster, const Evaluation& e);

  // A lower bound of Evaluate(graph, coster, trial, kFull).RepairRank(),
  // where `trial` is `plan` (the plan evaluated as `e`) with `recipe` for op
  // `op`. Thread-safe.
  RepairRankValue Floor(const Plan& plan, int op, const Recipe& recipe) const;

  // The exchange tables of `red`, a redistribution of an evaluation `e`,
  // where the evaluation these floors were made from has the same one (the
  // same value moved between the same placements): the fewer of its two
  // forms' on each tile. Else null.
  passes::TileCodeBytes KnownTables(const Graph& graph, const Evaluation& e,
                                    const Redistribution& red) const;

  // A tile's bytes at a step.
  struct TileAt {
    int tile = 0;
    int64_t bytes = 0;
  };

 private:
  struct OpFloor {
    int64_t excess = 0, peak = 0;  // without weights to add back
    // With weights: each kept step's fullest tiles without them (the
    // trial's weights on any tile bound its peak from below), and the
    // weights with their copies (the body weight and its twins).
    std::vector<std::vector<TileAt>> fullest;
    std::vector<std::pair<int, int64_t>> weights;
  };
  RepairRankValue Rank(int64_t excess, int64_t peak) const;
  // Op `op`'s weights to add back, with their copies, if it is a GEMM.
  std::vector<std::pair<int, int64_t>> GemmWeights(int op,
                                                   const Evaluation& e) const;

  struct Known {
    bool loop_edge = false;
    fb::OwnershipT from, to;
    passes::TileCodeBytes tables;
  };

  const Graph& graph_;
  const Coster& coster_;
  int64_t capacity_ = 0;
  std::vector<OpFloor> ops_;
  std::vector<std::vector<Known>> known_tables_;  // by value index
};

// Evaluate(kCyclesOnly, op)'s cycles for plans that differ from one plan
// only in op `op`'s recipe: the ops before it priced once (Make), then for
// each recipe only what it changes (CyclesWith): the ownerships op settles,
// its price, the redistributions it adds and the loop edges after it. The
// greedy initial plan prices every option of each op so; evaluating the
// ops before it again for each option was most of the time of
// quantize-fp8's trial plans that priced nothing new.
class CyclesUpTo {
 public:
  static StatusOr<CyclesUpTo> Make(const Graph& graph, const Coster& coster,
                                   const Plan& plan, int op);
  CyclesUpTo(CyclesUpTo&& other) noexcept;
  CyclesUpTo& operator=(const CyclesUpTo&) = delete;
  CyclesUpTo& operator=(CyclesUpTo&& other) noexcept;
  ~CyclesUpTo();

  // The cycles of the plan with `recipe` for the op, priced by `coster`
  // (the ops before it as Make's coster priced them): with Make's coster
  // Evaluate's exactly, with its lower bounds a lower bound. It changes
  // this object while it prices (and restores it): each thread prices on
  // one of its own.
  StatusOr<int64_t> CyclesWith(const Coster& coster, const Recipe& recipe);

 private:
  struct State;
  explicit CyclesUpTo(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Writes the plan into `module` (which must be the module `graph` was built
// from): ownerships on every value (a twin's is its body weight's), a recipe
// and an estimate (one run) on every op, and a Redistribute op (ids above
// every existing id, in insertion order) with a new value for every
// redistribution, consumers rewired to it. A loop edge becomes the body's
// last op: the body's last op then writes a new value, which the edge moves
// into carried_out (same id, carried_in's ownership), so the repeat and
// every reader after the body stay as they were.
// `note` goes into every GEMM recipe's note (e.g. the pricing dtype).
// Returns the inserted op ids in order.
StatusOr<std::vector<uint32_t>> WritePlan(const Graph& graph,
                                          const Coster& coster,
                                          const Plan& plan,
                                          const Evaluation& evaluation,
                                          const std::string& gemm_note,
                                          fb::ModuleT* module);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_PLAN_H_
