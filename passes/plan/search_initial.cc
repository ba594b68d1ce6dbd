// The initial plan of plan-ownership's search (passes/plan/search.h): the
// greedy plan, weights moved to their homes when the resident plan does not
// fit, and the memory repair by single-op changes.

#include <glog/logging.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "formats/basics.h"
#include "passes/plan/search.h"
#include "passes/plan/search_candidates.h"
#include "passes/plan/tiered_min.h"
#include "passes/plan/weight_homes.h"

namespace tilec::plan {

Status Search::Initialize() {
  for (int op = 0; op < graph_.num_ops(); ++op) {
    if (candidates_[op].empty()) {
      return Status::Infeasible(graph_.OpLabel(op) +
                                ": no recipe fits the target");
    }
  }
  incumbent_.recipes.clear();
  for (int op = 0; op < graph_.num_ops(); ++op) {
    incumbent_.recipes.push_back(candidates_[op][0]);
  }
  {
    std::vector<fb::DecisionT> greedy;
    TILEC_RETURN_IF_ERROR(Greedy(&greedy));
    for (fb::DecisionT& d : greedy) Record(std::move(d));
  }
  StatusOr<Evaluation> e =
      Evaluate(graph_, coster_, incumbent_, EvalMode::kFull);
  if (!e.ok()) return e.status();
  eval_ = std::move(*e);
  std::optional<Evaluation> homes_closest;
  if (!eval_.feasible()) TILEC_RETURN_IF_ERROR(MoveWeightsHome(&homes_closest));
  if (!eval_.feasible()) {
    // A lower bound that no recipe can beat: the weights alone.
    int64_t weights = 0;
    for (int v = 0; v < graph_.num_values(); ++v) {
      const ValueNode& value = graph_.value(v);
      if (value.role != fb::ValueRole::Weight) continue;
      int64_t n = 1;
      for (int64_t e : value.shape) n *= e;
      weights += n * coster_.StoredBytes(graph_, v);
    }
    const int64_t floor = ir::CeilDiv(weights, coster_.tiles());
    std::string bound;
    if (floor > coster_.capacity()) {
      bound = " (the weights alone need at least " + std::to_string(floor) +
              " B per tile)";
    }
    // Past that bound no repair can succeed: refuse at once.
    StatusOr<bool> repaired = false;
    if (bound.empty() && options_.repair) repaired = Repair();
    if (!repaired.ok()) return repaired.status();
    repaired_ = *repaired;
    if (*repaired && options_.relax_steps) TILEC_RETURN_IF_ERROR(RelaxSteps());
    if (!*repaired) {
      const Evaluation& closest =
          homes_closest && homes_closest->Excess() < eval_.Excess()
              ? *homes_closest
              : eval_;
      closest_peak_bytes_ = closest.peak_bytes;
      closest_ = closest;
      return Status::Infeasible("no plan fits tile memory" + bound +
                                "; the closest found: " + closest.Diagnosis());
    }
  }
  if (CountHomes(graph_, incumbent_) > 0) {
    TILEC_RETURN_IF_ERROR(PromoteWeights(
        graph_, coster_, &incumbent_, &eval_,
        [this](fb::DecisionT d) { Record(std::move(d)); },
        [this](fb::DecisionT d) { return TryApply(std::move(d)); }));
  }
  fb::DecisionT d;
  d.action = "initial plan";
  d.outcome = fb::Outcome::Info;
  d.reason = "total " + std::to_string(eval_.total_cycles) + " cycles, peak " +
             std::to_string(eval_.peak_bytes) + " B per tile of " +
             std::to_string(eval_.capacity);
  const int homes = CountHomes(graph_, incumbent_);
  if (homes > 0) {
    d.reason += "; " + std::to_string(homes) + " weights in homes";
  }
  d.cycles_before = d.cycles_after = eval_.total_cycles;
  d.bytes_before = d.bytes_after = eval_.peak_bytes;
  Record(std::move(d));
  return Status::Ok();
}

// The resident plan does not fit: every weight to its home and the greedy
// plan again, the redistributions from the homes priced in, homes spread
// where that brings it closer to fitting (SpreadHomes). Taken if it fits or
// is closer to fitting than the resident plan (memory repair then starts
// from it); else the resident plan stays and `closest` keeps the homes plan
// for the diagnosis.
Status Search::MoveWeightsHome(std::optional<Evaluation>* closest) {
  const Plan resident_plan = incumbent_;
  const Evaluation resident = eval_;
  incumbent_ = WithAllHomes(graph_, coster_, incumbent_);
  std::vector<fb::DecisionT> decisions;
  TILEC_RETURN_IF_ERROR(Greedy(&decisions));
  StatusOr<Evaluation> e =
      Evaluate(graph_, coster_, incumbent_, EvalMode::kFull);
  if (!e.ok()) return e.status();
  const int64_t greedy_cycles = e->total_cycles;
  const int64_t greedy_peak = e->peak_bytes;
  TILEC_RETURN_IF_ERROR(SpreadHomes(
      graph_, coster_, &incumbent_, &*e,
      [&decisions](fb::DecisionT d) { decisions.push_back(std::move(d)); }));
  fb::DecisionT d;
  d.action = "every weight to a home (" +
             std::to_string(CountHomes(graph_, incumbent_)) +
             " weights, each element once, shaped for delivery where its "
             "consumer's layout allows), redistributed to "
             "its compute layout before each use";
  d.cycles_before = resident.total_cycles;
  d.cycles_after = greedy_cycles;
  d.bytes_before = resident.peak_bytes;
  d.bytes_after = greedy_peak;
  if (!e->feasible() && e->Excess() >= resident.Excess()) {
    d.outcome = fb::Outcome::Rejected;
    d.reason = "rejected by memory: the greedy plan with homes does not fit "
               "either (" + e->Diagnosis() + "), and is no closer to "
               "fitting; memory repair starts from the resident plan";
    Record(std::move(d));
    *closest = std::move(*e);
    incumbent_ = resident_plan;
    return Status::Ok();
  }
  // A required repair (the resident plan does not fit): accepted outside
  // --max-decisions (limit_index 0), as the spreads recorded with it.
  d.outcome = fb::Outcome::Accepted;
  d.reason = "the plan with every weight resident in compute layout does not "
             "fit (" + resident.Diagnosis() + ")";
  if (!e->feasible()) {
    d.reason += "; with homes it does not fit either but is closer (" +
                std::to_string(e->Excess()) + " B over capacity against " +
                std::to_string(resident.Excess()) +
                "): memory repair starts from it";
  }
  Record(std::move(d));
  for (fb::DecisionT& g : decisions) Record(std::move(g));
  eval_ = std::move(*e);
  return Status::Ok();
}

// The cycles up to `op` with each option `which` names in its place,
// priced on GreedyThreads() as `pricing` says, each thread with costers of
// its own and the ops before `op` as priced once (`contexts`, one a
// thread).
StatusOr<std::vector<int64_t>> Search::OptionCycles(
    const std::vector<Recipe>& options, std::span<const size_t> which,
    Pricing pricing, std::vector<CyclesUpTo>* contexts) {
  std::vector<int64_t> cycles(which.size(), 0);
  std::vector<Status> failed(which.size(), Status::Ok());
  OnThreads(
      which.size(),
      [&](size_t thread, size_t k, const Coster& scheduled,
          const Coster& bound) {
        const Coster& coster = pricing == Pricing::kSchedule ? scheduled
                               : pricing == Pricing::kBounds ? bound
                                                             : FloorsOf(thread);
        StatusOr<int64_t> c =
            (*contexts)[thread].CyclesWith(coster, options[which[k]]);
        if (!c.ok()) {
          failed[k] = c.status();
          return;
        }
        cycles[k] = *c;
      },
      GreedyThreads());
  // The first failure in `which`'s order, whichever thread met it.
  for (const Status& s : failed) TILEC_RETURN_IF_ERROR(s);
  return cycles;
}

// The first of the options giving the fewest cycles up to `op`, and those
// cycles: by their floors, then their lower bounds, then their schedules
// (CheapestByTiers), so that an option whose floor or bound cannot beat
// the best found is never scheduled, and one whose floor cannot is not
// bounded (on so400m most GEMM options). That is the choice pricing every
// option by its schedule would make, whatever each bound is as long as it
// is one: so the threads (GreedyThreads) price with costers of their own
// (tighter or looser where their caches differ), a thread an option, and
// the lower bounds of an option are its own terms' bounds on the ops
// before it priced exactly (CyclesUpTo).
StatusOr<std::pair<int64_t, size_t>> Search::CheapestOption(
    int op, const std::vector<Recipe>& options) {
  constexpr Pricing kTiers[] = {Pricing::kFloors, Pricing::kBounds,
                                Pricing::kSchedule};
  // Each thread's prefix priced by its own coster, whose prices by op index
  // the local search on that thread then finds made (copies of one
  // thread's left them to be made again there: batch 1's search took 2-3 s
  // more).
  const size_t threads = static_cast<size_t>(std::max(1, GreedyThreads()));
  std::vector<StatusOr<CyclesUpTo>> made;
  made.reserve(threads);
  while (made.size() < threads) made.emplace_back(Status::Internal("unmade"));
  OnThreads(
      threads,
      [&](size_t thread, size_t, const Coster& coster, const Coster&) {
        made[thread] = CyclesUpTo::Make(graph_, coster, incumbent_, op);
      },
      GreedyThreads());
  std::vector<CyclesUpTo> contexts;
  for (StatusOr<CyclesUpTo>& context : made) {
    if (!context.ok()) return context.status();
    contexts.push_back(std::move(*context));
  }
  return CheapestByTiers(
      options.size(), 2, threads, [&](std::span<const size_t> which, int tier) {
        return OptionCycles(options, which, kTiers[tier], &contexts);
      });
}

// Greedy: each op in program order takes its cheapest recipe given the ops
// before it (their ownerships and the redistributions it would need).
Status Search::Greedy(std::vector<fb::DecisionT>* decisions) {
  int64_t before = 0;
  for (int op = 0; op < graph_.num_ops(); ++op) {
    StatusOr<Evaluation> prefix =
        Evaluate(graph_, coster_, incumbent_, EvalMode::kCyclesOnly, op);
    if (!prefix.ok()) return prefix.status();
    std::vector<Recipe> options = candidates_[op];
    if (!options_.pinned.count(op)) {
      for (const Recipe& r :
           NeighbourRecipes(graph_, coster_, incumbent_, *prefix, op)) {
        options.push_back(r);
      }
    }
    StatusOr<std::pair<int64_t, size_t>> chosen = CheapestOption(op, options);
    if (!chosen.ok()) return chosen.status();
    const auto [best, index] = *chosen;
    const Recipe best_recipe = options[index];
    incumbent_.recipes[op] = best_recipe;
    fb::DecisionT d;
    d.ops = {graph_.op(op).id};
    d.action = "initial recipe: " + best_recipe.Text();
    d.outcome = fb::Outcome::Info;
    d.reason = options_.pinned.count(op)
                   ? "pinned by --recipe"
                   : "greedy: cheapest of " + std::to_string(options.size()) +
                         " recipes given the ops before it";
    d.cycles_before = before;
    d.cycles_after = best;
    decisions->push_back(std::move(d));
    before = best;
  }
  return Status::Ok();
}


StatusOr<bool> Search::Repair() {
  // Interleaved steps stage more fragments than contiguous ones: offered
  // only where repair without them leaves the plan short.
  StatusOr<bool> fits = RepairRounds(/*interleaved_steps=*/false);
  if (!fits.ok() || *fits) return fits;
  return RepairRounds(/*interleaved_steps=*/true);
}

std::vector<Recipe> Search::RepairOptions(int op,
                                          bool interleaved_steps) const {
  std::vector<Recipe> options = AllRecipes(op, incumbent_, eval_, coster_);
  if (options_.pinned.count(op)) return options;
  std::set<std::string> seen;
  for (const Recipe& r : options) seen.insert(r.Text());
  auto add_steps_of = [&](const Recipe& recipe) {
    for (Recipe& r :
         SerialStepVariants(graph_, op, recipe, interleaved_steps)) {
      AddUnique(options, seen, r);
    }
  };
  add_steps_of(incumbent_.recipes[op]);
  // A GEMM that does not fit at its own step may need another grid and
  // steps at once: a K-split grid with a smaller weight block fits in
  // steps, but unstepped it needs more memory than the incumbent, so no
  // single move through it reaches the pair. Offered in the last tier, and
  // only to such GEMMs, as it multiplies the trials.
  const bool over_at_op = op < static_cast<int>(eval_.op_peak.size()) &&
                          eval_.op_peak[op] > eval_.capacity;
  if (interleaved_steps && over_at_op) {
    for (const Recipe& grid : SteppedGridCandidates(graph_, coster_, op)) {
      add_steps_of(grid);
    }
  }
  return options;
}

StatusOr<std::vector<RepairRankValue>> Search::RankRepairTrials(
    const std::vector<std::pair<int, Recipe>>& trials,
    std::span<const size_t> which, int tier, const RepairFloors* floors,
    std::vector<std::optional<RepairTrial>>* closest) {
  std::vector<RepairRankValue> ranks(which.size());
  std::vector<Status> failed(which.size(), Status::Ok());
  OnThreads(which.size(), [&](size_t thread, size_t k, const Coster& coster,
                              const Coster& bounds) {
    const size_t i = which[k];
    if (tier == kRepairFloor) {
      ranks[k] =
          floors ? floors->Floor(incumbent_, trials[i].first, trials[i].second)
                 : RepairRankValue{};
      return;
    }
    Plan trial = incumbent_;
    trial.recipes[trials[i].first] = trials[i].second;
    if (tier == kRepairBound) {
      StatusOr<RepairRankValue> bound =
          RepairRankBound(graph_, coster, bounds, trial, floors);
      if (!bound.ok()) failed[k] = bound.status();
      if (bound.ok()) ranks[k] = *bound;
      return;
    }
    StatusOr<Evaluation> e =
        tier == kRepairCycles
            ? Evaluate(graph_, bounds, trial, EvalMode::kCyclesOnly)
            : Evaluate(graph_, coster, trial, EvalMode::kFull);
    if (!e.ok()) {
      failed[k] = e.status();
      return;
    }
    if (tier == kRepairCycles) {
      ranks[k] = {0, 0, e->total_cycles};
      return;
    }
    ranks[k] = e->RepairRank();
    RepairTrial t{i, std::move(*e)};
    std::optional<RepairTrial>& kept = (*closest)[thread];
    if (!kept || t.CloserThan(*kept)) kept = std::move(t);
  });
  // The first failure in `which`'s order, whichever thread met it.
  for (const Status& s : failed) TILEC_RETURN_IF_ERROR(s);
  return ranks;
}

StatusOr<std::optional<Search::RepairTrial>> Search::ClosestRepairTrial(
    const std::vector<std::pair<int, Recipe>>& trials,
    bool bound_cycles_first) {
  const size_t threads = static_cast<size_t>(std::max(1, options_.threads));
  std::vector<std::optional<RepairTrial>> closest(threads);
  const int first = bound_cycles_first ? kRepairCycles : kRepairFloor;
  // Where the incumbent fits (RelaxSteps), so would anything it does not
  // touch: every floor would be 0.
  std::optional<RepairFloors> floors;
  if (options_.bound_repair_trials && !eval_.feasible()) {
    floors.emplace(graph_, coster_, eval_);
  }
  std::vector<size_t> priced(kRepairExact + 1, 0);
  const TierPriceOf<RepairRankValue> price = [&](std::span<const size_t> which,
                                                 int tier) {
    priced[first + tier] += which.size();
    return RankRepairTrials(trials, which, first + tier,
                            floors ? &*floors : nullptr, &closest);
  };
  if (options_.bound_repair_trials) {
    // Trials go up a tier, in the order of their bounds, until no bound
    // can beat the closest evaluated: a trial that fits is closer than any
    // that does not, and of those the fastest is closest, so most are ruled
    // out by their cycles alone. quantize-fp8 at so400m batch 2: of about
    // 2,800 trials a round, 2-30 evaluated in full where one fits, about
    // 100 where none does. Four trials a thread at a time: with one, a long
    // evaluation beside a short one leaves a core idle (46.3 / 46.9 s with
    // two a batch, 43.3 / 43.6 s with eight, 44.7 / 46.0 with 16 and 32,
    // the same bytes).
    TILEC_RETURN_IF_ERROR(
        RankByTiers<RepairRankValue>(
            trials.size(), 1, kRepairExact - first, 4 * threads,
            std::less<std::pair<RepairRankValue, size_t>>(), price)
            .status());
  } else {
    std::vector<size_t> all(trials.size());
    std::iota(all.begin(), all.end(), size_t{0});
    priced[kRepairExact] = all.size();
    TILEC_RETURN_IF_ERROR(
        RankRepairTrials(trials, all, kRepairExact, nullptr, &closest)
            .status());
  }
  VLOG(1) << "repair trials: " << trials.size() << "; priced by cycles "
          << priced[kRepairCycles] << ", floors " << priced[kRepairFloor]
          << ", bounds " << priced[kRepairBound] << ", in full "
          << priced[kRepairExact];
  // The closest of every thread's closest: the sequential choice on any
  // thread count.
  std::optional<RepairTrial> best;
  for (std::optional<RepairTrial>& c : closest) {
    if (c && (!best || c->CloserThan(*best))) best = std::move(c);
  }
  if (best && !(best->eval.RepairRank() < eval_.RepairRank())) best.reset();
  return best;
}

// Repair stops at the first plan that fits, and takes contiguous steps
// before it offers interleaved ones, so a GEMM may keep more steps than
// the plan needs, or contiguous ones where interleaved ones are faster:
// batch 4's down projection in 8 contiguous steps where 2 interleaved
// ones fit too. Each
// round: of every stepped GEMM's variants on its grid (every count repair
// offers, contiguous and interleaved, and none), the fastest that keeps the
// plan fitting, if faster; a Decision under --max-decisions.
Status Search::RelaxSteps() {
  for (int round = 0; round < graph_.num_ops(); ++round) {
    const std::vector<std::pair<int, Recipe>> trials = StepVariantTrials();
    if (trials.empty()) return Status::Ok();
    // Among plans that fit, the closest to fitting is the fastest.
    StatusOr<std::optional<RepairTrial>> fastest = ClosestRepairTrial(trials);
    if (!fastest.ok()) return fastest.status();
    if (!*fastest || !(*fastest)->eval.feasible()) return Status::Ok();
    const auto& [op, recipe] = trials[(*fastest)->index];
    Evaluation& e = (*fastest)->eval;
    fb::DecisionT d;
    d.ops = {graph_.op(op).id};
    d.action = graph_.OpLabel(op) + ": " + incumbent_.recipes[op].Text() +
               " -> " + recipe.Text();
    d.outcome = fb::Outcome::Accepted;
    d.reason = "fewer or other serial steps: the fastest of the op's step "
               "variants that keeps the plan fitting (peak " +
               std::to_string(e.peak_bytes) + " of " +
               std::to_string(e.capacity) + " B)";
    d.cycles_before = eval_.total_cycles;
    d.cycles_after = e.total_cycles;
    d.bytes_before = eval_.peak_bytes;
    d.bytes_after = e.peak_bytes;
    if (!TryApply(std::move(d))) return Status::Ok();
    incumbent_.recipes[op] = recipe;
    eval_ = std::move(e);
  }
  return Status::Ok();
}

// Every stepped GEMM's other step variants on its grid, and none.
std::vector<std::pair<int, Recipe>> Search::StepVariantTrials() const {
  std::vector<std::pair<int, Recipe>> trials;
  for (int op = 0; op < graph_.num_ops(); ++op) {
    const Recipe& now = incumbent_.recipes[op];
    if (options_.pinned.count(op) || now.kind != fb::RecipeKind::Gemm ||
        now.steps <= 1) {
      continue;
    }
    Recipe unstepped = now;
    unstepped.steps = 1;
    unstepped.interleaved_steps = false;
    trials.push_back({op, unstepped});
    for (Recipe& r :
         SerialStepVariants(graph_, op, unstepped, /*interleaved=*/true)) {
      if (r != now) trials.push_back({op, std::move(r)});
    }
  }
  return trials;
}

StatusOr<bool> Search::RepairRounds(bool interleaved_steps) {
  // Until the plan fits: the single-op change that brings it closest to
  // fitting (least total excess over capacity, then the lowest peak, then
  // the fewest cycles); once a change fits, the fastest that fits.
  for (int round = 0; round < 4 * graph_.num_ops() && !eval_.feasible();
       ++round) {
    // Spreading homes changes no recipe: tried before every recipe.
    TILEC_RETURN_IF_ERROR(
        SpreadHomes(graph_, coster_, &incumbent_, &eval_,
                    [this](fb::DecisionT d) { Record(std::move(d)); }));
    if (eval_.feasible()) break;
    std::vector<std::pair<int, Recipe>> trials;
    for (int op = 0; op < graph_.num_ops(); ++op) {
      for (Recipe& r : RepairOptions(op, interleaved_steps)) {
        if (r != incumbent_.recipes[op]) trials.push_back({op, std::move(r)});
      }
    }
    // After a round whose closest trial did not fit, the next round's
    // trials rarely fit either, and their cycles' bounds were a pricing of
    // every trial that ruled none out: so400m batch 8's plan-ownership
    // 308 -> 237 s, its quantize-fp8 238 -> 191 s, the same bytes.
    StatusOr<std::optional<RepairTrial>> closest =
        ClosestRepairTrial(trials, /*bound_cycles_first=*/round == 0);
    if (!closest.ok()) return closest.status();
    if (!*closest) break;
    const int best_op = trials[(*closest)->index].first;
    const Recipe& best_recipe = trials[(*closest)->index].second;
    Evaluation& best_eval = (*closest)->eval;
    fb::DecisionT d;
    d.ops = {graph_.op(best_op).id};
    d.action = graph_.OpLabel(best_op) + ": " +
               incumbent_.recipes[best_op].Text() + " -> " + best_recipe.Text();
    // A required repair (no plan without it fits): accepted outside
    // --max-decisions (limit_index 0).
    d.outcome = fb::Outcome::Accepted;
    d.reason = std::string("memory repair: the initial plan does not fit (") +
               eval_.Diagnosis() + ")";
    d.cycles_before = eval_.total_cycles;
    d.cycles_after = best_eval.total_cycles;
    d.bytes_before = eval_.peak_bytes;
    d.bytes_after = best_eval.peak_bytes;
    Record(std::move(d));
    incumbent_.recipes[best_op] = best_recipe;
    eval_ = std::move(best_eval);
  }
  return eval_.feasible();
}

}  // namespace tilec::plan
