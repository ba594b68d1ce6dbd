// The search of plan-ownership (docs/planner.md): candidate recipes per op
// (search_candidates.h), a greedy initial plan, a memory repair when that
// plan does not fit (search_initial.cc), and a seeded local search over
// proposals (single-op changes and joint producer/consumer changes,
// search_offers.cc) that accepts only feasible improvements. Its state can
// be saved to and restored from a SearchCheckpoint.

#ifndef TILEC_PASSES_PLAN_SEARCH_H_
#define TILEC_PASSES_PLAN_SEARCH_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/core/decisions.h"
#include "passes/plan/cost.h"
#include "passes/plan/graph.h"
#include "passes/plan/plan.h"
#include "passes/plan/search_candidates.h"

namespace tilec::plan {

// The version of the search state this build writes in SearchCheckpoint
// (independent of the module schema version).
inline constexpr uint32_t kCheckpointVersion = 1;

// A change to the incumbent: new recipes for one or more ops.
struct Proposal {
  std::vector<std::pair<int, Recipe>> changes;  // by op index, ascending
  std::string kind;                             // "single", "joint", "carry"
  std::string Key() const;
};

using Decisions = std::vector<std::unique_ptr<fb::DecisionT>>;

struct SearchOptions {
  uint64_t seed = 1;
  int64_t attempts = 0;  // proposals to evaluate in this run
  int proposals_per_op = 4;
  std::map<int, Recipe> pinned;  // by op index
  int64_t checkpoint_every = 16;
  // Called with the checkpoint table and the decisions so far every
  // checkpoint_every attempts and at the end (if set).
  std::function<Status(const fb::SearchCheckpointT&, const Decisions&)>
      save_checkpoint;
  // Where decisions are recorded as they are made (the pass's log, which
  // also explains them and holds the --max-decisions limit); null: a log of
  // the search's own, without a limit.
  passes::DecisionLog* log = nullptr;
  // Called with progress lines (if set).
  std::function<void(const std::string&)> on_progress;
  // Initialize repairs a plan that does not fit by single-op changes, each
  // round pricing every alternative of every op: false stops at the
  // closest plan without it (a price, not a plan to keep).
  bool repair = true;
  // After a repair that put GEMMs in serial steps: each stepped GEMM's other
  // step counts and interleaving, and no steps, the fastest that keeps the
  // plan fitting (Search::RelaxSteps).
  bool relax_steps = true;
  // Memory repair evaluates in full only the trials whose lower bounds
  // (of their cycles, then plan::RepairRankBound) could still make them
  // the closest to fitting (Search::ClosestRepairTrial); false evaluates
  // every trial in full, for the tests that the choice is the same.
  bool bound_repair_trials = true;
  // Threads ranking each op's proposals for an offer round (the search's
  // time), pricing memory repair's trials and, if greedy_on_threads, the
  // greedy plan's options; the same offers, decisions and plan with any
  // count.
  int threads = 2;
  bool greedy_on_threads = true;
  // An offer round ranks again only the ops an accepted change can move
  // (Search::KeptOffers); false ranks every op afresh, for the tests that
  // check that it changes nothing.
  bool keep_rankings = true;
};

class Search {
 public:
  Search(const Graph& graph, const Coster& coster, SearchOptions options);
  // It may point into itself (its own log).
  Search(const Search&) = delete;
  Search& operator=(const Search&) = delete;

  // The greedy initial plan, repaired for memory if needed. Infeasible
  // (exit 3) when no plan found fits, with the diagnosis of the one that
  // comes closest.
  Status Initialize();
  // Restores the state saved in `checkpoint` together with its decisions
  // (recorded again, as they were).
  Status Restore(const fb::SearchCheckpointT& checkpoint,
                 const Decisions& decisions);
  // Evaluates up to options.attempts proposals.
  Status Run();

  const Plan& incumbent() const { return incumbent_; }
  const Evaluation& evaluation() const { return eval_; }
  // After Initialize found no plan that fits: the peak bytes per tile of
  // the closest plan it found (how far from fitting the graph is).
  int64_t closest_peak_bytes() const { return closest_peak_bytes_; }
  // That closest plan's evaluation (its per-op peaks, its capacity).
  const Evaluation& closest() const { return closest_; }
  // Initialize's plan fits only after memory repair.
  bool repaired() const { return repaired_; }
  const Decisions& decisions() const { return log_->decisions(); }
  int64_t attempts() const { return attempts_; }
  int64_t accepted() const { return accepted_; }
  // Op rankings offer rounds took from an earlier round (KeptOffers).
  int64_t kept_rankings() const { return kept_rankings_; }
  bool converged() const { return converged_; }
  fb::SearchCheckpointT Checkpoint() const;

  // Every recipe the search would consider for `op` in the incumbent's
  // context, priced with the full evaluation (--explain=OP): the plan's
  // total cycles and peak bytes with that recipe for `op`.
  struct Alternative {
    Recipe recipe;
    int64_t total_cycles = 0;
    int64_t op_cycles = 0;
    int64_t peak_bytes = 0;
    bool feasible = true;
    bool chosen = false;
  };
  StatusOr<std::vector<Alternative>> Alternatives(int op) const;

  // The proposals offered for the incumbent when the offer RNG is seeded
  // with `offer_seed`: for each op (in a seeded order) K of its best 2K
  // single, carry and joint proposals at depth 0, its best one always
  // among them; at depth d > 0, the next band of K proposals in rank order
  // (ranks K*(d+1) .. K*(d+2)-1), offered once every offer of the
  // shallower bands was rejected. The offers of all ops come cheapest plan
  // first (ties in the seeded op order). Exposed for tests.
  StatusOr<std::vector<Proposal>> Offers(uint64_t offer_seed, int depth = 0) {
    return MakeOffers(offer_seed, depth);
  }

 private:
  StatusOr<std::vector<Proposal>> MakeOffers(uint64_t offer_seed, int depth);
  // The ranks the offers at `depth` reach: its band's last.
  size_t TopOf(int depth) const {
    return static_cast<size_t>(std::max(1, options_.proposals_per_op)) *
           (depth + 2);
  }
  // One op's proposals for the incumbent and their ranks (RankByCycles).
  struct OpOffers {
    std::vector<Proposal> proposals;
    std::vector<std::pair<int64_t, size_t>> ranked;  // (cycles, index)
  };
  // Prices with `coster`, its `bounds` and their `floors` only: may run on
  // any thread.
  StatusOr<OpOffers> RankOpOffers(int op, int depth, const Coster& coster,
                                  const Coster& bounds,
                                  const Coster& floors) const;
  // RankOpOffers of each of `ops`, in that order, on options_.threads,
  // each kept from an earlier round where no change since can move it
  // (KeptOffers).
  std::vector<StatusOr<OpOffers>> RankAllOffers(const std::vector<int>& ops,
                                                int depth);
  // An op's ranking from an earlier offer round. A plan's cycles are a sum
  // of terms (ops, redistributions, loop edges), each set by the recipes of
  // the ops that read or write a value it reads (its ownership) or moves,
  // so a proposal changes the plan's cycles by the same amount on any
  // incumbent that differs only in ops that touch none of the values two
  // steps from it: the same best proposals in the same order, their
  // cycles moved by the incumbents' difference. The op's pool (its
  // recipes in context, its followers and joint partners) depends on
  // nothing farther.
  struct KeptOffers {
    OpOffers offers;  // ranked cut to its exact ranks, the first `top`
    size_t top = 0;
    int64_t incumbent_cycles = 0;  // kCyclesOnly, by the schedule
    std::vector<bool> reach;       // by op: a change here ranks it again
  };
  // The ops whose recipe change can move `offers`' cycles differently from
  // the incumbent's (KeptOffers).
  std::vector<bool> ReachOf(const OpOffers& offers) const;
  // Drops the kept rankings that the incumbent's changes since they were
  // made can move; all of them if anything but recipes changed.
  void ForgetMovedOffers();
  // `op`'s kept ranking for the incumbent (of `incumbent_cycles`) to
  // `top`, if one is kept that far.
  std::optional<OpOffers> KeptRanking(int op, size_t top,
                                      int64_t incumbent_cycles) const;
  void KeepRanking(int op, const OpOffers& offers, size_t top,
                   int64_t incumbent_cycles);
  StatusOr<Plan> Apply(const Proposal& proposal) const;
  // Logs a decision as it is (a rejection, a figure or a required repair).
  void Record(const fb::DecisionT& decision);
  // Logs a transforming decision under the log's --max-decisions limit
  // (DecisionLog::TryApply); true if it may be applied.
  bool TryApply(fb::DecisionT decision);
  std::string Describe(const Proposal& proposal) const;
  StatusOr<bool> Repair();
  // Once repair fits the plan, the steps it took that memory no longer
  // needs in that form (SearchOptions::relax_steps).
  Status RelaxSteps();
  std::vector<std::pair<int, Recipe>> StepVariantTrials() const;
  // Repair's rounds, offering interleaved serial steps or not.
  StatusOr<bool> RepairRounds(bool interleaved_steps);
  // The recipes a repair round tries for `op` (docs/planner.md, step 4).
  std::vector<Recipe> RepairOptions(int op, bool interleaved_steps) const;
  // A repair round's trial (an index into its list of (op, recipe)) and
  // the incumbent's evaluation with it.
  struct RepairTrial {
    size_t index = 0;
    Evaluation eval;
    // Closer to fitting (RepairRank), ties to the earlier trial.
    bool CloserThan(const RepairTrial& other) const {
      return std::make_pair(eval.RepairRank(), index) <
             std::make_pair(other.eval.RepairRank(), other.index);
    }
  };
  // Of `trials`, each applied alone to the incumbent, the one closest to
  // fitting (Evaluation::RepairRank; ties: the earliest), if it is closer
  // than the incumbent. Evaluated on options_.threads, those that cannot
  // be the closest ruled out first by lower bounds
  // (SearchOptions::bound_repair_trials). The first, a trial's cycles
  // alone, rules a trial out only beside one that fits: without
  // `bound_cycles_first` trials start at their floors.
  StatusOr<std::optional<RepairTrial>> ClosestRepairTrial(
      const std::vector<std::pair<int, Recipe>>& trials,
      bool bound_cycles_first = true);
  // The tiers ClosestRepairTrial knows a trial by, each a lower bound of
  // its RepairRank (the last) in RepairRank's order: its cycles alone
  // (bounds coster), its RepairFloors floor (`floors`; 0 without),
  // RepairRankBound.
  enum RepairTier { kRepairCycles, kRepairFloor, kRepairBound, kRepairExact };
  // The trials `which` names at `tier`, on options_.threads; at
  // kRepairExact each thread keeps in (*closest)[thread] the closest of
  // those it evaluated (ties: the earliest).
  StatusOr<std::vector<RepairRankValue>> RankRepairTrials(
      const std::vector<std::pair<int, Recipe>>& trials,
      std::span<const size_t> which, int tier, const RepairFloors* floors,
      std::vector<std::optional<RepairTrial>>* closest);
  // Calls run(thread, i, coster, bounds) for every i < count on
  // `threads_wanted` threads (options_.threads if 0), each beyond the first
  // with a coster and lower bounds of its own (helper_costers_).
  using ThreadWork = std::function<void(size_t thread, size_t i,
                                        const Coster& coster,
                                        const Coster& bounds)>;
  void OnThreads(size_t count, const ThreadWork& run,
                 int threads_wanted = 0);
  // The threads the greedy plan prices its options on.
  int GreedyThreads() const {
    return options_.greedy_on_threads ? options_.threads : 1;
  }
  Status Greedy(std::vector<fb::DecisionT>* decisions);
  // How OptionCycles prices: the schedule, lower bounds (bounds_) or the
  // coarser ones that need no GEMM copies planned (floors_).
  enum class Pricing { kSchedule, kBounds, kFloors };
  StatusOr<std::vector<int64_t>> OptionCycles(
      const std::vector<Recipe>& options, std::span<const size_t> which,
      Pricing pricing, std::vector<CyclesUpTo>* contexts);
  StatusOr<std::pair<int64_t, size_t>> CheapestOption(
      int op, const std::vector<Recipe>& options);
  Status MoveWeightsHome(std::optional<Evaluation>* closest);
  Status InferHomes(const fb::SearchCheckpointT& c, Plan* plan) const;
  Status RestoreHomes(const fb::SearchCheckpointT& checkpoint,
                      Plan* plan) const;
  std::vector<Recipe> AllRecipes(int op, const Plan& plan,
                                 const Evaluation& eval,
                                 const Coster& coster) const;

  const Graph& graph_;
  const Coster& coster_;
  // coster_'s lower bounds (Coster::LowerBounds), for the greedy plan, and
  // their floors (Coster::Floors).
  const Coster bounds_;
  const Coster floors_;
  // For the threads beyond the first: a coster of coster_'s family and its
  // lower bounds each (RankAllOffers), and their floors (by thread - 1).
  std::vector<std::pair<std::unique_ptr<Coster>, std::unique_ptr<Coster>>>
      helper_costers_;
  std::vector<std::unique_ptr<Coster>> helper_floors_;
  const Coster& FloorsOf(size_t thread) const {
    return thread == 0 ? floors_ : *helper_floors_[thread - 1];
  }
  SearchOptions options_;
  std::vector<std::vector<Recipe>> candidates_;  // by op
  Plan incumbent_;
  Evaluation eval_;
  int64_t closest_peak_bytes_ = 0;
  Evaluation closest_;
  bool repaired_ = false;
  passes::DecisionLog own_log_;
  passes::DecisionLog* log_;
  int64_t attempts_ = 0;
  int64_t accepted_ = 0;
  int64_t kept_rankings_ = 0;
  bool converged_ = false;
  // Offer band for the incumbent; back to 0 when a proposal is accepted.
  int depth_ = 0;
  std::vector<std::optional<KeptOffers>> kept_offers_;  // by op
  // How long each op's last ranking took (0: never ranked), to take the
  // longest first (RankAllOffers).
  std::vector<double> ranking_seconds_;
  Plan kept_for_;  // the incumbent kept_offers_ were ranked on
  std::mt19937_64 rng_;
  std::vector<uint64_t> visited_list_;
  std::unordered_set<uint64_t> visited_;
};

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_SEARCH_H_
