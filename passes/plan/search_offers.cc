// The proposals plan-ownership's local search (passes/plan/search.h) offers
// for the incumbent: single-op, carry and joint changes, ranked by the
// plan's cycles with each and drawn in bands.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "passes/plan/search.h"
#include "passes/plan/search_candidates.h"
#include "passes/plan/tiered_min.h"

namespace tilec::plan {

std::string Proposal::Key() const {
  std::string s;
  for (const auto& [op, recipe] : changes) {
    s += std::to_string(op) + "=" + recipe.Text() + ";";
  }
  return s;
}

std::string Search::Describe(const Proposal& p) const {
  std::string s;
  for (const auto& [op, recipe] : p.changes) {
    if (!s.empty()) s += "; ";
    s += graph_.OpLabel(op) + ": " + incumbent_.recipes[op].Text() + " -> " +
         recipe.Text();
  }
  return p.kind + ": " + s;
}

StatusOr<Plan> Search::Apply(const Proposal& proposal) const {
  Plan plan = incumbent_;
  for (const auto& [op, recipe] : proposal.changes) plan.recipes[op] = recipe;
  return plan;
}

namespace {

// An op's proposals, each once. Every op a proposal names changes (a joint
// proposal that would leave one op as it is, is that other op's single
// proposal).
struct OfferPool {
  const Plan& incumbent;
  std::vector<Proposal> proposals;
  std::set<std::string> keys;

  void Add(Proposal p) {
    for (const auto& [o, r] : p.changes) {
      if (r == incumbent.recipes[o]) return;
    }
    if (keys.insert(p.Key()).second) proposals.push_back(std::move(p));
  }
};

// Followers: elementwise consumers (transitively) that share this op's
// result ownership; "carry" proposals move them along with it. Sorted.
std::vector<int> FollowersOf(const Graph& graph,
                             const std::map<int, Recipe>& pinned,
                             const Plan& incumbent, const Evaluation& eval,
                             int op) {
  std::vector<int> followers;
  std::vector<int> frontier = {op};
  while (!frontier.empty()) {
    const int from = frontier.back();
    frontier.pop_back();
    const fb::OwnershipT& owner = eval.owners[graph.op(from).result];
    for (const auto& [c, slot] : graph.value(graph.op(from).result).uses) {
      const OpClass follower = graph.op(c).op_class;
      if ((follower != OpClass::kElementwise &&
           follower != OpClass::kRowWise) ||
          graph.op(c).slots[slot] != SlotRole::kLayout || pinned.count(c) ||
          std::find(followers.begin(), followers.end(), c) != followers.end() ||
          !passes::SameOwnership(incumbent.recipes[c].layout, owner)) {
        continue;
      }
      followers.push_back(c);
      frontier.push_back(c);
    }
  }
  std::sort(followers.begin(), followers.end());
  return followers;
}

// For each recipe of the op: the op alone ("single"), and the op with its
// followers in the layout of its new result ("carry"), if they all accept it.
void AddSingleAndCarry(const Graph& graph, const Coster& coster, int op,
                       const std::vector<Recipe>& recipes,
                       const std::vector<int>& followers, OfferPool* pool) {
  for (const Recipe& r : recipes) {
    Proposal single;
    single.kind = "single";
    single.changes = {{op, r}};
    pool->Add(single);
    if (followers.empty()) continue;
    const fb::OwnershipT moved = coster.ResultOwnership(graph, op, r);
    Proposal carry;
    carry.kind = "carry";
    carry.changes = {{op, r}};
    for (int f : followers) {
      Recipe fr = LayoutRecipe(KindOf(graph.op(f).op_class), moved);
      if (!coster.CheckRecipe(graph, f, fr).ok()) {
        carry.changes.clear();
        break;
      }
      carry.changes.push_back({f, fr});
    }
    if (!carry.changes.empty()) pool->Add(carry);
  }
}

// Joint: this op and one layout consumer take one layout, so that the
// redistribution between them disappears.
void AddJoint(const Graph& graph, const Coster& coster,
              const std::map<int, Recipe>& pinned,
              const std::vector<std::vector<Recipe>>& candidates,
              const Plan& incumbent, int op, OfferPool* pool) {
  if (graph.op(op).op_class == OpClass::kGemm ||
      graph.op(op).op_class == OpClass::kAttention) {
    return;
  }
  for (const auto& [c, slot] : graph.value(graph.op(op).result).uses) {
    const OpNode& consumer = graph.op(c);
    if (consumer.slots[slot] != SlotRole::kLayout || pinned.count(c) ||
        consumer.op_class == OpClass::kGemm) {
      continue;
    }
    std::vector<Recipe> layouts;
    for (size_t i = 0; i < candidates[op].size() && i < 8; ++i) {
      layouts.push_back(candidates[op][i]);
    }
    for (size_t i = 0; i < candidates[c].size() && i < 8; ++i) {
      layouts.push_back(candidates[c][i]);
    }
    layouts.push_back(incumbent.recipes[op]);
    layouts.push_back(incumbent.recipes[c]);
    for (const Recipe& l : layouts) {
      const Recipe mine = LayoutRecipe(KindOf(graph.op(op).op_class), l.layout);
      const Recipe theirs = LayoutRecipe(KindOf(consumer.op_class), l.layout);
      if (!coster.CheckRecipe(graph, op, mine).ok() ||
          !coster.CheckRecipe(graph, c, theirs).ok()) {
        continue;
      }
      Proposal joint;
      joint.kind = "joint";
      joint.changes = {{std::min(op, c), op < c ? mine : theirs},
                       {std::max(op, c), op < c ? theirs : mine}};
      pool->Add(joint);
    }
  }
}

// The ranked (cycles, pool index) an op offers: at depth 0, K of its best
// 2K, its best always among them and the rest drawn with `rng`; deeper,
// the next band of K in rank order.
std::vector<std::pair<int64_t, size_t>> ChooseBand(
    std::vector<std::pair<int64_t, size_t>> ranked, int k, int depth,
    std::mt19937_64& rng) {
  if (depth > 0) {
    // Deeper bands, in rank order: the budget goes to the next-best
    // proposals once the best ones were all rejected.
    const size_t begin = static_cast<size_t>(k) * (depth + 1);
    const size_t end = begin + static_cast<size_t>(k);
    std::vector<std::pair<int64_t, size_t>> band;
    for (size_t i = begin; i < end && i < ranked.size(); ++i) {
      band.push_back(ranked[i]);
    }
    return band;
  }
  if (ranked.size() > static_cast<size_t>(2 * k)) ranked.resize(2 * k);
  if (ranked.size() > static_cast<size_t>(k)) {
    // The op's best proposal always, the other K - 1 drawn from the rest
    // of its best 2K: a draw that left the best out would leave it to a
    // later round, which a small budget may never reach.
    std::vector<size_t> pick(ranked.size() - 1);
    for (size_t i = 0; i < pick.size(); ++i) pick[i] = i + 1;
    std::shuffle(pick.begin(), pick.end(), rng);
    pick.resize(k - 1);
    pick.push_back(0);
    std::sort(pick.begin(), pick.end());
    std::vector<std::pair<int64_t, size_t>> chosen;
    for (size_t i : pick) chosen.push_back(ranked[i]);
    ranked = std::move(chosen);
  }
  return ranked;
}

// The best `top` proposals of `pool` (all, if fewer) by their plans'
// cycles, ties by key, best first; more may follow, not in rank. Each
// proposal is priced at its floor (`floors`: no GEMM copies planned), then
// at its bound (`bounds`), then by its schedule, least known first
// (RankByTiers), until no remaining bound can enter the best `top`: the
// same ranks as pricing every proposal by its schedule. `apply` is
// Search::Apply.
template <typename ApplyFn>
StatusOr<std::vector<std::pair<int64_t, size_t>>> RankByCycles(
    const Graph& graph, const Coster& coster, const Coster& bounds,
    const Coster& floors, const std::vector<Proposal>& pool, size_t top,
    const ApplyFn& apply) {
  std::vector<std::string> keys(pool.size());
  std::vector<Plan> plans(pool.size());
  for (size_t i = 0; i < pool.size(); ++i) {
    keys[i] = pool[i].Key();
    StatusOr<Plan> plan = apply(pool[i]);
    if (!plan.ok()) return plan.status();
    plans[i] = std::move(*plan);
  }
  const Coster* tiers[] = {&floors, &bounds, &coster};
  return RankByTiers<int64_t>(
      pool.size(), top, 2, 1,
      [&keys](const std::pair<int64_t, size_t>& a,
              const std::pair<int64_t, size_t>& b) {
        if (a.first != b.first) return a.first < b.first;
        return keys[a.second] < keys[b.second];
      },
      [&](std::span<const size_t> which,
          int tier) -> StatusOr<std::vector<int64_t>> {
        std::vector<int64_t> cycles;
        for (size_t i : which) {
          StatusOr<Evaluation> e =
              Evaluate(graph, *tiers[tier], plans[i], EvalMode::kCyclesOnly);
          if (!e.ok()) return e.status();
          cycles.push_back(e->total_cycles);
        }
        return cycles;
      });
}

}  // namespace

StatusOr<Search::OpOffers> Search::RankOpOffers(int op, int depth,
                                                const Coster& coster,
                                                const Coster& bounds,
                                                const Coster& floors) const {
  OfferPool pool{incumbent_};
  const std::vector<int> followers =
      FollowersOf(graph_, options_.pinned, incumbent_, eval_, op);
  AddSingleAndCarry(graph_, coster, op,
                    AllRecipes(op, incumbent_, eval_, coster), followers,
                    &pool);
  AddJoint(graph_, coster, options_.pinned, candidates_, incumbent_, op,
           &pool);
  const size_t top = TopOf(depth);
  StatusOr<std::vector<std::pair<int64_t, size_t>>> ranked =
      RankByCycles(graph_, coster, bounds, floors, pool.proposals, top,
                   [this](const Proposal& p) { return Apply(p); });
  if (!ranked.ok()) return ranked.status();
  return OpOffers{std::move(pool.proposals), std::move(*ranked)};
}

void Search::OnThreads(size_t count, const ThreadWork& run,
                       int threads_wanted) {
  const size_t threads = static_cast<size_t>(
      std::max(1, threads_wanted > 0 ? threads_wanted : options_.threads));
  // Each extra thread prices with costers of its own (their caches by op
  // index are not locked), kept warm from call to call.
  while (helper_costers_.size() + 1 < threads) {
    auto helper = std::make_unique<Coster>(coster_.ForAnotherGraph());
    auto helper_bounds = std::make_unique<Coster>(helper->LowerBounds());
    helper_floors_.push_back(std::make_unique<Coster>(helper_bounds->Floors()));
    helper_costers_.push_back({std::move(helper), std::move(helper_bounds)});
  }
  // Thread t takes item t first (so that every thread takes part, as the
  // tests require), then whichever item is next when it is free.
  const size_t used = std::min(threads, count);
  std::atomic<size_t> next{used};
  auto work = [&](size_t thread, const Coster& coster, const Coster& bounds) {
    for (size_t i = thread; i < count; i = next++) {
      run(thread, i, coster, bounds);
    }
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < used; ++t) {
    helpers.emplace_back(work, t, std::cref(*helper_costers_[t - 1].first),
                         std::cref(*helper_costers_[t - 1].second));
  }
  if (used > 0) work(0, coster_, bounds_);
  for (std::thread& h : helpers) h.join();
}

namespace {

// Marks the values the ops marked in `ops` read or write, and with each
// value its repeat partner (a carried_in and its carried_out: the loop
// edge between them) and its twin (held as its body weight is), where the
// partner's ownership sets the same terms.
std::vector<bool> ValuesOf(const Graph& graph, const std::vector<bool>& ops) {
  std::vector<bool> values(graph.num_values(), false);
  for (int op = 0; op < graph.num_ops(); ++op) {
    if (!ops[op]) continue;
    for (int v : graph.op(op).operands) values[v] = true;
    if (graph.op(op).result >= 0) values[graph.op(op).result] = true;
  }
  for (bool grew = true; grew;) {
    grew = false;
    auto both = [&](int a, int b) {
      if (a < 0 || b < 0 || values[a] == values[b]) return;
      values[a] = values[b] = true;
      grew = true;
    };
    for (const RepeatNode& r : graph.repeats())
      both(r.carried_in, r.carried_out);
    for (int v = 0; v < graph.num_values(); ++v) both(v, graph.TwinOf(v));
  }
  return values;
}

// The ops that read or write a value marked in `values`.
std::vector<bool> OpsTouching(const Graph& graph,
                              const std::vector<bool>& values) {
  std::vector<bool> ops(graph.num_ops(), false);
  for (int v = 0; v < graph.num_values(); ++v) {
    if (!values[v]) continue;
    const ValueNode& value = graph.value(v);
    if (value.producer >= 0) ops[value.producer] = true;
    for (const auto& [op, slot] : value.uses) ops[op] = true;
  }
  return ops;
}

}  // namespace

std::vector<bool> Search::ReachOf(const OpOffers& offers) const {
  std::vector<bool> changed(graph_.num_ops(), false);
  for (const Proposal& p : offers.proposals) {
    for (const auto& [op, recipe] : p.changes) changed[op] = true;
  }
  // Values a proposal moves the ownership of, the ops priced on them
  // (their prices and redistributions), and the ops that set the
  // ownership of those ops' other operands.
  const std::vector<bool> near = OpsTouching(graph_, ValuesOf(graph_, changed));
  return OpsTouching(graph_, ValuesOf(graph_, near));
}

void Search::ForgetMovedOffers() {
  if (kept_offers_.empty()) return;
  if (kept_for_.recipes.size() != incumbent_.recipes.size() ||
      kept_for_.homes != incumbent_.homes) {
    kept_offers_.clear();
    return;
  }
  std::vector<int> changed;
  for (size_t op = 0; op < incumbent_.recipes.size(); ++op) {
    if (!(kept_for_.recipes[op] == incumbent_.recipes[op])) {
      changed.push_back(static_cast<int>(op));
    }
  }
  for (std::optional<KeptOffers>& kept : kept_offers_) {
    if (!kept) continue;
    for (int op : changed) {
      if (kept->reach[op]) {
        kept.reset();
        break;
      }
    }
  }
}

std::optional<Search::OpOffers> Search::KeptRanking(
    int op, size_t top, int64_t incumbent_cycles) const {
  const std::optional<KeptOffers>& kept = kept_offers_[op];
  if (!kept || kept->top < top) return std::nullopt;
  OpOffers offers = kept->offers;
  offers.ranked.resize(std::min(offers.ranked.size(), top));
  for (auto& [cycles, index] : offers.ranked) {
    cycles += incumbent_cycles - kept->incumbent_cycles;
  }
  return offers;
}

void Search::KeepRanking(int op, const OpOffers& offers, size_t top,
                         int64_t incumbent_cycles) {
  KeptOffers kept;
  kept.offers = offers;
  // Past `top` the ranks are not exact.
  kept.offers.ranked.resize(std::min(kept.offers.ranked.size(), top));
  kept.top = top;
  kept.incumbent_cycles = incumbent_cycles;
  kept.reach = ReachOf(kept.offers);
  kept_offers_[op] = std::move(kept);
}

std::vector<StatusOr<Search::OpOffers>> Search::RankAllOffers(
    const std::vector<int>& ops, int depth) {
  std::vector<StatusOr<OpOffers>> results(ops.size(),
                                          Status::Internal("not ranked"));
  // The rankings' own measure (eval_ may hold the multicast form of an
  // incumbent that does not fit).
  StatusOr<Evaluation> now =
      Evaluate(graph_, coster_, incumbent_, EvalMode::kCyclesOnly);
  if (!now.ok()) {
    for (StatusOr<OpOffers>& r : results) r = now.status();
    return results;
  }
  if (!options_.keep_rankings) kept_offers_.clear();
  ForgetMovedOffers();
  kept_offers_.resize(graph_.num_ops());
  kept_for_ = incumbent_;
  const size_t top = TopOf(depth);
  std::vector<size_t> fresh;  // indices into ops
  for (size_t i = 0; i < ops.size(); ++i) {
    if (std::optional<OpOffers> kept =
            KeptRanking(ops[i], top, now->total_cycles)) {
      results[i] = std::move(*kept);
      ++kept_rankings_;
    } else {
      fresh.push_back(i);
    }
  }
  // The longest rankings first: a long one taken last would leave the
  // other threads idle. An op's last ranking took about as long as its next
  // one will; one never ranked is taken by its candidate recipes (GEMMs,
  // attention have the most). The times order the work and nothing else:
  // a ranking's result does not depend on which coster's caches made it
  // (RankByCycles is exact), nor on the order.
  ranking_seconds_.resize(graph_.num_ops(), 0.0);
  std::stable_sort(fresh.begin(), fresh.end(), [&](size_t a, size_t b) {
    const double ta = ranking_seconds_[ops[a]], tb = ranking_seconds_[ops[b]];
    if (ta != tb) return ta > tb;
    return candidates_[ops[a]].size() > candidates_[ops[b]].size();
  });
  OnThreads(fresh.size(), [&](size_t thread, size_t k, const Coster& coster,
                              const Coster& bounds) {
    const size_t i = fresh[k];
    const auto start = std::chrono::steady_clock::now();
    results[i] = RankOpOffers(ops[i], depth, coster, bounds, FloorsOf(thread));
    ranking_seconds_[ops[i]] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  });
  for (size_t i : fresh) {
    if (results[i].ok())
      KeepRanking(ops[i], *results[i], top, now->total_cycles);
  }
  return results;
}

StatusOr<std::vector<Proposal>> Search::MakeOffers(uint64_t offer_seed,
                                                   int depth) {
  std::mt19937_64 rng(offer_seed);
  std::vector<int> order(graph_.num_ops());
  for (int i = 0; i < graph_.num_ops(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<int> ops;
  for (int op : order) {
    if (!options_.pinned.count(op)) ops.push_back(op);
  }
  std::vector<StatusOr<OpOffers>> per_op = RankAllOffers(ops, depth);
  // The bands are drawn in the seeded op order, one thread's RNG use.
  const int k = std::max(1, options_.proposals_per_op);
  std::vector<std::pair<int64_t, Proposal>> ranked_offers;
  for (StatusOr<OpOffers>& offers : per_op) {
    if (!offers.ok()) return offers.status();
    for (const auto& [cycles, i] :
         ChooseBand(std::move(offers->ranked), k, depth, rng)) {
      ranked_offers.push_back({cycles, offers->proposals[i]});
    }
  }
  // The budget goes to the most promising proposals of every op first
  // (their plans' cycles); ties keep the seeded op order.
  std::stable_sort(ranked_offers.begin(), ranked_offers.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Proposal> offers;
  for (auto& [cycles, p] : ranked_offers) offers.push_back(std::move(p));
  return offers;
}

}  // namespace tilec::plan
