// plan-ownership's search (passes/plan/search.h): the search loop over
// proposals, its checkpoint, and the alternatives of one op. The candidate
// recipes are in search_candidates.cc, the initial plan in
// search_initial.cc, the proposals in search_offers.cc.

#include "passes/plan/search.h"

#include <glog/logging.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "formats/basics.h"
#include "formats/print.h"
#include "passes/plan/search_candidates.h"
#include "passes/plan/weight_homes.h"

namespace tilec::plan {
namespace {

std::string StateText(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}

}  // namespace

Search::Search(const Graph& graph, const Coster& coster, SearchOptions options)
    : graph_(graph),
      coster_(coster),
      bounds_(coster.LowerBounds()),
      floors_(bounds_.Floors()),
      options_(std::move(options)),
      log_(options_.log ? options_.log : &own_log_) {
  rng_.seed(options_.seed);
  candidates_.resize(graph_.num_ops());
  // Each op's on its own, on the greedy plan's threads (exact prices: the
  // same list on any thread).
  OnThreads(
      candidates_.size(),
      [this](size_t, size_t i, const Coster& coster, const Coster&) {
        const int op = static_cast<int>(i);
        auto pin = options_.pinned.find(op);
        candidates_[i] = pin != options_.pinned.end()
                             ? std::vector<Recipe>{pin->second}
                             : Candidates(graph_, coster, op);
      },
      GreedyThreads());
}

void Search::Record(const fb::DecisionT& decision) {
  VLOG(1) << ir::DecisionText(decision);
  log_->Record(decision);
}

bool Search::TryApply(fb::DecisionT decision) {
  const bool applied = log_->TryApply(std::move(decision));
  VLOG(1) << ir::DecisionText(*log_->decisions().back());
  return applied;
}

std::vector<Recipe> Search::AllRecipes(int op, const Plan& plan,
                                       const Evaluation& eval,
                                       const Coster& coster) const {
  std::vector<Recipe> list;
  std::set<std::string> seen;
  if (options_.pinned.count(op)) return list;
  for (const Recipe& r : candidates_[op]) AddUnique(list, seen, r);
  for (const Recipe& r : NeighbourRecipes(graph_, coster, plan, eval, op)) {
    AddUnique(list, seen, r);
  }
  return list;
}

Status Search::Run() {
  const int64_t budget = options_.attempts;
  int64_t done = 0;
  bool offers_live = false;
  std::vector<Proposal> offers;
  size_t position = 0;
  std::string rng_before_offers = StateText(rng_);
  auto save = [&]() -> Status {
    if (!options_.save_checkpoint) return Status::Ok();
    fb::SearchCheckpointT c = Checkpoint();
    c.rng_state = offers_live ? rng_before_offers : StateText(rng_);
    return options_.save_checkpoint(c, log_->decisions());
  };
  const int64_t progress_every = std::max<int64_t>(1, budget / 10);
  while (done < budget) {
    if (!offers_live) {
      rng_before_offers = StateText(rng_);
      const uint64_t offer_seed = rng_();
      StatusOr<std::vector<Proposal>> made = MakeOffers(offer_seed, depth_);
      if (!made.ok()) return made.status();
      offers = std::move(*made);
      offers_live = true;
      position = 0;
      VLOG(1) << "offer round at depth " << depth_ << ": " << offers.size()
              << " proposals around " << eval_.total_cycles << " cycles";
      if (offers.empty()) {
        // Every band of every op's ranking has been offered and rejected.
        converged_ = true;
        break;
      }
    }
    const uint64_t incumbent_hash = incumbent_.Hash();
    uint64_t hash = 0;
    while (position < offers.size()) {
      hash = Fnv1a64(std::to_string(incumbent_hash) + " " +
                     offers[position].Key());
      if (!visited_.count(hash)) break;
      ++position;
    }
    if (position >= offers.size()) {
      // This band is spent without an improvement: offer the next one.
      ++depth_;
      offers_live = false;
      continue;
    }
    const Proposal& proposal = offers[position++];
    visited_.insert(hash);
    visited_list_.push_back(hash);
    ++attempts_;
    ++done;
    StatusOr<Plan> plan = Apply(proposal);
    if (!plan.ok()) return plan.status();
    StatusOr<Evaluation> e = Evaluate(graph_, coster_, *plan, EvalMode::kFull);
    if (!e.ok()) return e.status();
    fb::DecisionT d;
    for (const auto& [op, recipe] : proposal.changes) {
      d.ops.push_back(graph_.op(op).id);
    }
    d.action = Describe(proposal);
    d.cycles_before = eval_.total_cycles;
    d.cycles_after = e->total_cycles;
    d.bytes_before = eval_.peak_bytes;
    d.bytes_after = e->peak_bytes;
    const std::string numbers = "before " + std::to_string(eval_.total_cycles) +
                                ", after " + std::to_string(e->total_cycles);
    bool accept = false;
    if (!e->feasible()) {
      d.outcome = fb::Outcome::Rejected;
      d.reason = "rejected by memory: " + e->Diagnosis();
      Record(d);
    } else if (e->total_cycles >= eval_.total_cycles) {
      d.outcome = fb::Outcome::Rejected;
      d.reason = "rejected by cost: " + numbers;
      Record(d);
    } else {
      d.reason = "improves by " +
                 std::to_string(eval_.total_cycles - e->total_cycles) +
                 " cycles: " + numbers;
      accept = TryApply(std::move(d));
    }
    if (accept) {
      incumbent_ = std::move(*plan);
      eval_ = std::move(*e);
      ++accepted_;
      offers_live = false;
      depth_ = 0;
    }
    if (options_.on_progress && budget >= 100 && done % progress_every == 0) {
      options_.on_progress(std::to_string(done) + "/" + std::to_string(budget) +
                           " attempts, " + std::to_string(accepted_) +
                           " accepted, best " +
                           std::to_string(eval_.total_cycles) + " cycles");
    }
    if (options_.checkpoint_every > 0 &&
        attempts_ % options_.checkpoint_every == 0) {
      TILEC_RETURN_IF_ERROR(save());
    }
  }
  return save();
}

// The homes as the checkpoint records them (in_home); from a checkpoint of
// an older build, which records ownerships only, by inference: a weight
// whose saved ownership is not what its first consumer's recipe needs was
// in a home, taken as fixed there.
Status Search::RestoreHomes(const fb::SearchCheckpointT& c, Plan* plan) const {
  bool recorded = false;
  for (const auto& vp : c.values) {
    if (!vp->in_home) continue;
    recorded = true;
    const int v = graph_.ValueIndex(vp->value);
    if (v < 0 || graph_.value(v).role != fb::ValueRole::Weight ||
        !vp->home_fixed) {
      return Status::BadInput("the checkpoint's home of value %" +
                              std::to_string(vp->value) +
                              " is not a weight's home");
    }
    const std::string invalid = passes::ValidateOwnership(
        *vp->home_fixed, graph_.value(v).shape, coster_.tiles());
    if (!invalid.empty()) {
      return Status::BadInput("the checkpoint's home of value %" +
                              std::to_string(vp->value) + ": " + invalid);
    }
    plan->homes.resize(graph_.num_values());
    plan->homes[v] = WeightHome{.delivery = vp->home_delivery,
                                .spread = vp->home_spread,
                                .first_replica = vp->home_first_replica,
                                .fixed = *vp->home_fixed};
  }
  return recorded ? Status::Ok() : InferHomes(c, plan);
}

Status Search::InferHomes(const fb::SearchCheckpointT& c, Plan* plan) const {
  StatusOr<Evaluation> resident =
      Evaluate(graph_, coster_, *plan, EvalMode::kCyclesOnly);
  if (!resident.ok()) return resident.status();
  for (const auto& vp : c.values) {
    const int v = graph_.ValueIndex(vp->value);
    // (A twin follows its body weight.)
    if (v < 0 || !vp->ownership || !resident->owned[v] ||
        graph_.value(v).role != fb::ValueRole::Weight ||
        graph_.TwinOf(v) >= 0 ||
        passes::SameOwnership(*vp->ownership, resident->owners[v])) {
      continue;
    }
    const std::string invalid = passes::ValidateOwnership(
        *vp->ownership, graph_.value(v).shape, coster_.tiles());
    if (!invalid.empty()) {
      return Status::BadInput("the checkpoint's home of value %" +
                              std::to_string(vp->value) + ": " + invalid);
    }
    plan->homes.resize(graph_.num_values());
    plan->homes[v] = WeightHome{.fixed = *vp->ownership};
  }
  return Status::Ok();
}

fb::SearchCheckpointT Search::Checkpoint() const {
  fb::SearchCheckpointT c;
  c.schema_version = kCheckpointVersion;
  c.seed = options_.seed;
  c.attempts = attempts_;
  c.accepted = accepted_;
  c.proposals_per_op = options_.proposals_per_op;
  c.rng_state = StateText(rng_);
  c.offer_depth = depth_;
  c.best_cycles = eval_.total_cycles;
  c.visited = visited_list_;
  for (int op = 0; op < graph_.num_ops(); ++op) {
    auto p = std::make_unique<fb::OpPlanT>();
    p->op = graph_.op(op).id;
    p->recipe = std::make_unique<fb::RecipeT>(
        RecipeToFb(incumbent_.recipes[op], graph_, op));
    c.ops.push_back(std::move(p));
  }
  for (int v = 0; v < graph_.num_values(); ++v) {
    if (!eval_.owned[v]) continue;
    auto p = std::make_unique<fb::ValuePlanT>();
    p->value = graph_.value(v).id;
    p->ownership =
        std::make_unique<fb::OwnershipT>(OwnershipOf(graph_, eval_, v));
    if (const WeightHome* home = incumbent_.Home(v)) {
      p->in_home = true;
      p->home_delivery = home->delivery;
      p->home_spread = home->spread;
      p->home_first_replica = home->first_replica;
      p->home_fixed = std::make_unique<fb::OwnershipT>(home->fixed);
    }
    c.values.push_back(std::move(p));
  }
  return c;
}

Status Search::Restore(const fb::SearchCheckpointT& c,
                       const Decisions& decisions) {
  if (c.schema_version != kCheckpointVersion) {
    return Status::BadInput(
        c.schema_version > kCheckpointVersion
            ? "the checkpoint was written by a newer plan-ownership (search "
              "state version " +
                  std::to_string(c.schema_version) +
                  "; this build reads version " +
                  std::to_string(kCheckpointVersion) + ")"
            : "the checkpoint has search state version " +
                  std::to_string(c.schema_version) +
                  ", which this build (version " +
                  std::to_string(kCheckpointVersion) +
                  ") cannot migrate: its visited-proposal hashes and RNG use "
                  "have no equivalent; rerun the search");
  }
  if (static_cast<int>(c.ops.size()) != graph_.num_ops()) {
    return Status::BadInput(
        "the checkpoint plans " + std::to_string(c.ops.size()) +
        " ops but the graph has " + std::to_string(graph_.num_ops()));
  }
  Plan plan;
  plan.recipes.resize(graph_.num_ops());
  std::vector<bool> seen(graph_.num_ops(), false);
  for (const auto& p : c.ops) {
    const int op = graph_.OpIndex(p->op);
    if (op < 0 || seen[op] || !p->recipe) {
      return Status::BadInput("the checkpoint's plan names op " +
                              std::to_string(p->op) +
                              ", which the graph does not have once");
    }
    seen[op] = true;
    StatusOr<Recipe> r = RecipeFromFb(*p->recipe);
    if (!r.ok())
      return r.status().WithContext("checkpoint op " + std::to_string(p->op));
    const Status invalid = coster_.CheckRecipe(graph_, op, *r);
    if (!invalid.ok()) {
      return invalid.WithContext("checkpoint op " + std::to_string(p->op));
    }
    auto pin = options_.pinned.find(op);
    if (pin != options_.pinned.end() && !(pin->second == *r)) {
      return Status::BadInput("--recipe pins " + graph_.OpLabel(op) + " to " +
                              pin->second.Text() + " but the checkpoint has " +
                              r->Text());
    }
    plan.recipes[op] = *r;
  }
  TILEC_RETURN_IF_ERROR(RestoreHomes(c, &plan));
  StatusOr<Evaluation> e = Evaluate(graph_, coster_, plan, EvalMode::kFull);
  if (!e.ok()) return e.status();
  if (e->total_cycles != c.best_cycles) {
    return Status::BadInput(
        "the checkpoint's plan was saved at " + std::to_string(c.best_cycles) +
        " cycles but costs " + std::to_string(e->total_cycles) +
        " here (a different target or --gemm_dtype?)");
  }
  for (const auto& vp : c.values) {
    const int v = graph_.ValueIndex(vp->value);
    if (v < 0 || !vp->ownership || !e->owned[v] ||
        !passes::SameOwnership(*vp->ownership, OwnershipOf(graph_, *e, v))) {
      return Status::BadInput("the checkpoint's ownership of value %" +
                              std::to_string(vp->value) +
                              " does not follow from its recipes");
    }
  }
  std::istringstream is(c.rng_state);
  is >> rng_;
  if (is.fail())
    return Status::BadInput("the checkpoint's RNG state is corrupt");
  incumbent_ = std::move(plan);
  eval_ = std::move(*e);
  attempts_ = c.attempts;
  accepted_ = c.accepted;
  depth_ = c.offer_depth;
  visited_list_ = c.visited;
  visited_ = std::unordered_set<uint64_t>(c.visited.begin(), c.visited.end());
  for (const auto& d : decisions) Record(*d);
  return Status::Ok();
}

StatusOr<std::vector<Search::Alternative>> Search::Alternatives(int op) const {
  std::vector<Recipe> recipes = {incumbent_.recipes[op]};
  std::set<std::string> seen = {incumbent_.recipes[op].Text()};
  for (const Recipe& r : candidates_[op]) AddUnique(recipes, seen, r);
  for (const Recipe& r :
       NeighbourRecipes(graph_, coster_, incumbent_, eval_, op)) {
    AddUnique(recipes, seen, r);
  }
  std::vector<Alternative> out;
  for (const Recipe& r : recipes) {
    Plan trial = incumbent_;
    trial.recipes[op] = r;
    StatusOr<Evaluation> e = Evaluate(graph_, coster_, trial, EvalMode::kFull);
    if (!e.ok()) return e.status();
    Alternative a;
    a.recipe = r;
    a.total_cycles = e->total_cycles;
    a.op_cycles = e->ops[op].Cycles();
    a.peak_bytes = e->peak_bytes;
    a.feasible = e->feasible();
    a.chosen = r == incumbent_.recipes[op];
    out.push_back(std::move(a));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Alternative& a, const Alternative& b) {
                     if (a.feasible != b.feasible) return a.feasible;
                     return a.total_cycles < b.total_cycles;
                   });
  return out;
}

}  // namespace tilec::plan