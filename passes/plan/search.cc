#include "passes/plan/search.h"

#include <glog/logging.h>

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/kernels.h"
#include "passes/plan/gemm_bound.h"
#include "passes/plan/weight_homes.h"

namespace tilec::plan {
namespace {

// Part counts 1..min(extent, max_parts) that give distinct block sizes: for
// each block size the smallest count (fewest tiles for the same work).
Recipe LayoutRecipe(fb::RecipeKind kind, fb::OwnershipT layout) {
  Recipe r;
  r.kind = kind;
  r.layout = std::move(layout);
  return r;
}

fb::RecipeKind KindOf(OpClass c) {
  switch (c) {
    case OpClass::kAttention:
      return fb::RecipeKind::Attention;
    case OpClass::kGemm:
      return fb::RecipeKind::Gemm;
    case OpClass::kRowWise:
      return fb::RecipeKind::RowWise;
    case OpClass::kCopy:
      return fb::RecipeKind::Copy;
    case OpClass::kHost:
      return fb::RecipeKind::Host;
    default:
      return fb::RecipeKind::Elementwise;
  }
}

struct Scored {
  int64_t score;
  int64_t tiebreak;
  Recipe recipe;
};

void SortScored(std::vector<Scored>& v) {
  std::stable_sort(v.begin(), v.end(), [](const Scored& a, const Scored& b) {
    if (a.score != b.score) return a.score < b.score;
    if (a.tiebreak != b.tiebreak) return a.tiebreak < b.tiebreak;
    return a.recipe.Text() < b.recipe.Text();
  });
}

void AddUnique(std::vector<Recipe>& list, std::set<std::string>& seen,
               const Recipe& r) {
  if (seen.insert(r.Text()).second) list.push_back(r);
}

// The grids with the best bounds (passes/plan/gemm_bound.h: kernel,
// delivery and reduction from the formulas alone), and the ones that need
// the least memory.
std::vector<Recipe> GemmCandidates(const Graph& graph, const Coster& coster,
                                   int op) {
  const OpNode& node = graph.op(op);
  const auto& a = graph.value(node.operands[0]).shape;
  const auto& b = graph.value(node.operands[1]).shape;
  GemmShapeDTypes gemm;
  gemm.M = a[0];
  gemm.K = a[1];
  gemm.N = b[1];
  gemm.inputs = coster.GemmDType(graph, op);
  gemm.result = graph.value(node.result).dtype;
  const int64_t K = gemm.K;
  const int granule = coster.KGranule(gemm.inputs);
  std::vector<GemmBound> by_time = GridBounds(
      coster.model(), gemm, coster.tiles(), std::numeric_limits<int64_t>::max());
  std::vector<GemmBound> by_memory = by_time;
  std::stable_sort(by_memory.begin(), by_memory.end(),
                   [](const GemmBound& x, const GemmBound& y) {
                     return x.bytes < y.bytes;
                   });
  auto grid_recipe = [](const GemmBound& bound) {
    Recipe r;
    r.kind = fb::RecipeKind::Gemm;
    r.m = bound.m;
    r.k = bound.k;
    r.n = bound.n;
    return r;
  };
  std::vector<Recipe> grids;
  std::set<std::string> seen;
  for (size_t i = 0; i < by_time.size() && i < 32; ++i) {
    AddUnique(grids, seen, grid_recipe(by_time[i]));
  }
  for (size_t i = 0; i < by_memory.size() && i < 6; ++i) {
    AddUnique(grids, seen, grid_recipe(by_memory[i]));
  }
  // Every grid with every staging: Complete; Streamed with 1, 2 and 4
  // granules per chunk; Batched(2) and Batched(4) of one-granule chunks.
  std::vector<Recipe> out;
  for (const Recipe& grid : grids) {
    const int64_t bk = ir::CeilDiv(K, grid.k);
    out.push_back(grid);
    for (int g : {1, 2, 4}) {
      if (g > 1 && g * granule >= bk) break;
      Recipe s = grid;
      s.staging = fb::Staging::Streamed;
      s.chunk_k = g * granule;
      out.push_back(s);
    }
    for (int batch : {2, 4}) {
      if (batch > 2 && batch * granule >= bk) break;
      Recipe s = grid;
      s.staging = fb::Staging::Batched;
      s.chunk_k = granule;
      s.batch_chunks = batch;
      out.push_back(s);
    }
  }
  return out;
}

// The dtypes an attention op's bound is priced in.
AttentionDTypes AttentionDTypesOf(const Graph& graph, int op) {
  const OpNode& node = graph.op(op);
  AttentionDTypes d;
  d.qkv = graph.value(node.operands[node.staged]).dtype;
  d.probs = node.kind == fb::OpKind::AttentionContext
                ? graph.value(node.operands[0]).dtype
                : d.qkv;
  d.result = graph.value(node.result).dtype;
  return d;
}

// Per-head grids ranked by their bound (passes/plan/gemm_bound.h: one
// kernel call on the largest block plus its operand blocks received at the
// exchange rate, ignoring where qkv and the probabilities lie); the
// fastest and the ones needing the least memory.
std::vector<Recipe> AttentionCandidates(const Graph& graph,
                                        const Coster& coster, int op) {
  Recipe unit;
  unit.kind = fb::RecipeKind::Attention;
  StatusOr<passes::AttentionGrid> base = AttentionGridOf(graph, op, unit);
  if (!base.ok()) return {};
  std::vector<GemmBound> by_time =
      AttentionGridBounds(coster.model(), *base,
                          AttentionDTypesOf(graph, op), coster.tiles(),
                          coster.capacity());
  std::vector<GemmBound> by_memory = by_time;
  std::stable_sort(by_memory.begin(), by_memory.end(),
                   [](const GemmBound& x, const GemmBound& y) {
                     return x.bytes < y.bytes;
                   });
  std::vector<Recipe> out;
  std::set<std::string> seen;
  auto add = [&](const GemmBound& bound) {
    Recipe r = unit;
    r.m = bound.m;
    r.n = bound.n;
    if (coster.CheckRecipe(graph, op, r).ok()) AddUnique(out, seen, r);
  };
  for (size_t i = 0; i < by_time.size() && i < 16; ++i) add(by_time[i]);
  for (size_t i = 0; i < by_memory.size() && i < 4; ++i) add(by_memory[i]);
  return out;
}

std::vector<Recipe> LayoutCandidates(const Graph& graph, const Coster& coster,
                                     int op) {
  const OpNode& node = graph.op(op);
  const ValueNode& out = graph.value(node.result);
  const int64_t T = coster.tiles();
  const fb::RecipeKind kind = KindOf(node.op_class);
  std::vector<Scored> scored;
  auto score = [&](const Recipe& r) -> int64_t {
    if (!coster.CheckRecipe(graph, op, r).ok()) return -1;
    if (node.op_class == OpClass::kCopy) return 0;
    StatusOr<OpCost> c = coster.PriceOp(graph, op, r, nullptr);
    return c.ok() ? c->Cycles() : -1;
  };
  auto add = [&](fb::OwnershipT layout, int64_t tiles_used) {
    const Recipe r = LayoutRecipe(kind, std::move(layout));
    const int64_t s = score(r);
    if (s >= 0) scored.push_back({s, tiles_used, r});
  };
  const auto& shape = out.shape;
  if (node.op_class == OpClass::kRowWise) {
    if (shape.size() == 2) {
      for (int p : DistinctSplits(shape[0], T)) {
        add(passes::BlockedOwnership({p, 1}), p);
      }
    } else if (shape.size() == 4) {
      for (int b : DistinctSplits(shape[0], T)) {
        for (int h : DistinctSplits(shape[1], T / b)) {
          for (int p : DistinctSplits(shape[2], T / (int64_t{b} * h))) {
            add(passes::BlockedOwnership({b, h, p, 1}), int64_t{b} * h * p);
          }
        }
      }
    }
    SortScored(scored);
    std::vector<Recipe> list;
    for (size_t i = 0; i < scored.size() && i < 24; ++i) {
      list.push_back(scored[i].recipe);
    }
    return list;
  }
  // Elementwise and copies: row groups x channel groups, rows only, and
  // flat grains of whole vectors over all tiles.
  for (int r : DistinctSplits(shape[0], T)) {
    for (int c : DistinctSplits(shape[1], T / r)) {
      add(passes::BlockedOwnership({r, c}), int64_t{r} * c);
    }
  }
  SortScored(scored);
  std::vector<Recipe> list;
  std::set<std::string> seen;
  if (node.op_class == OpClass::kCopy && out.given) {
    AddUnique(list, seen, LayoutRecipe(kind, *out.given));
  }
  for (size_t i = 0; i < scored.size() && i < 16; ++i) {
    AddUnique(list, seen, scored[i].recipe);
  }
  const int rows = static_cast<int>(std::min<int64_t>(shape[0], T));
  const Recipe rows_only =
      LayoutRecipe(kind, passes::BlockedOwnership({rows, 1}));
  if (coster.CheckRecipe(graph, op, rows_only).ok()) {
    AddUnique(list, seen, rows_only);
  }
  const int vector = std::max(1, coster.target().vector_elements);
  for (int grain : {vector, 2 * vector, 4 * vector, 16 * vector}) {
    const Recipe flat =
        LayoutRecipe(kind, passes::FlatOwnership(grain, static_cast<int>(T)));
    if (coster.CheckRecipe(graph, op, flat).ok()) AddUnique(list, seen, flat);
  }
  return list;
}

std::string StateText(const std::mt19937_64& rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}

}  // namespace

std::vector<Recipe> Candidates(const Graph& graph, const Coster& coster,
                               int op) {
  switch (graph.op(op).op_class) {
    case OpClass::kGemm:
      return GemmCandidates(graph, coster, op);
    case OpClass::kAttention:
      return AttentionCandidates(graph, coster, op);
    case OpClass::kHost: {
      Recipe host;
      host.kind = fb::RecipeKind::Host;
      return {host};
    }
    default:
      return LayoutCandidates(graph, coster, op);
  }
}

std::vector<Recipe> NeighbourRecipes(const Graph& graph, const Coster& coster,
                                     const Plan& plan, const Evaluation& eval,
                                     int op) {
  const OpNode& node = graph.op(op);
  std::vector<Recipe> out;
  if (node.op_class == OpClass::kGemm || node.op_class == OpClass::kAttention ||
      node.op_class == OpClass::kHost) {
    return out;
  }
  const fb::RecipeKind kind = KindOf(node.op_class);
  std::set<std::string> seen;
  auto consider = [&](const fb::OwnershipT& layout) {
    const Recipe r = LayoutRecipe(kind, layout);
    if (coster.CheckRecipe(graph, op, r).ok()) AddUnique(out, seen, r);
  };
  for (size_t slot = 0; slot < node.operands.size(); ++slot) {
    const SlotRole role = node.slots[slot];
    if (role != SlotRole::kLayout && role != SlotRole::kSource) continue;
    const int v = node.operands[slot];
    if (eval.owned[v]) consider(eval.owners[v]);
  }
  const int last = static_cast<int>(eval.ops.size()) - 1;
  for (const auto& [c, slot] : graph.value(node.result).uses) {
    if (c > last) continue;
    std::optional<fb::OwnershipT> need =
        coster.Required(graph, c, plan.recipes[c], slot);
    if (need) consider(*need);
  }
  return out;
}

std::string Proposal::Key() const {
  std::string s;
  for (const auto& [op, recipe] : changes) {
    s += std::to_string(op) + "=" + recipe.Text() + ";";
  }
  return s;
}

Search::Search(const Graph& graph, const Coster& coster, SearchOptions options)
    : graph_(graph),
      coster_(coster),
      bounds_(coster.LowerBounds()),
      options_(std::move(options)),
      log_(options_.log ? options_.log : &own_log_) {
  rng_.seed(options_.seed);
  candidates_.resize(graph_.num_ops());
  for (int op = 0; op < graph_.num_ops(); ++op) {
    auto pin = options_.pinned.find(op);
    if (pin != options_.pinned.end()) {
      candidates_[op] = {pin->second};
    } else {
      candidates_[op] = Candidates(graph_, coster_, op);
    }
  }
}

void Search::Record(const fb::DecisionT& decision) {
  VLOG(1) << ir::DecisionText(decision);
  log_->Record(decision);
}

std::vector<Recipe> Search::AllRecipes(int op, const Plan& plan,
                                       const Evaluation& eval) const {
  std::vector<Recipe> list;
  std::set<std::string> seen;
  if (options_.pinned.count(op)) return list;
  for (const Recipe& r : candidates_[op]) AddUnique(list, seen, r);
  for (const Recipe& r : NeighbourRecipes(graph_, coster_, plan, eval, op)) {
    AddUnique(list, seen, r);
  }
  return list;
}

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
    if (!*repaired) {
      const Evaluation& closest =
          homes_closest && homes_closest->Excess() < eval_.Excess()
              ? *homes_closest
              : eval_;
      closest_peak_bytes_ = closest.peak_bytes;
      return Status::Infeasible("no plan fits tile memory" + bound +
                                "; the closest found: " + closest.Diagnosis());
    }
  }
  if (CountHomes(graph_, incumbent_) > 0) {
    TILEC_RETURN_IF_ERROR(PromoteWeights(
        graph_, coster_, &incumbent_, &eval_,
        [this](fb::DecisionT d) { Record(std::move(d)); }));
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

// Greedy: each op in program order takes its cheapest recipe given the ops
// before it (their ownerships and the redistributions it would need).
Plan Search::WithRecipe(int op, const Recipe& recipe) const {
  Plan trial = incumbent_;
  trial.recipes[op] = recipe;
  return trial;
}

// The first of the options giving the fewest cycles up to `op`, and those
// cycles. Each is first priced at its lower bound (bounds_), then by its
// schedule in order of those bounds; one whose bound cannot beat the best
// found so far (or, equal to it, comes later in `options`) is never
// scheduled. The same choice as pricing every
// option by its schedule, without scheduling most of them.
StatusOr<std::pair<int64_t, size_t>> Search::CheapestOption(
    int op, const std::vector<Recipe>& options) {
  std::vector<std::pair<int64_t, size_t>> bounded;  // (lower bound, index)
  for (size_t i = 0; i < options.size(); ++i) {
    StatusOr<Evaluation> e = Evaluate(graph_, bounds_, WithRecipe(op, options[i]),
                                      EvalMode::kCyclesOnly, op);
    if (!e.ok()) return e.status();
    bounded.emplace_back(e->total_cycles, i);
  }
  std::sort(bounded.begin(), bounded.end());
  std::optional<std::pair<int64_t, size_t>> best;  // (cycles, index)
  for (const auto& [bound, i] : bounded) {
    if (best && std::pair(bound, i) > *best) {
      if (bound > best->first) break;  // and so is every later bound
      continue;
    }
    StatusOr<Evaluation> e = Evaluate(graph_, coster_, WithRecipe(op, options[i]),
                                      EvalMode::kCyclesOnly, op);
    if (!e.ok()) return e.status();
    if (!best || std::pair(e->total_cycles, i) < *best) {
      best = std::pair(e->total_cycles, i);
    }
  }
  return *best;
}

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
    bool found = false;
    std::tuple<int64_t, int64_t, int64_t> best = eval_.RepairRank();
    int best_op = -1;
    Recipe best_recipe;
    Evaluation best_eval;
    for (int op = 0; op < graph_.num_ops(); ++op) {
      for (const Recipe& r : AllRecipes(op, incumbent_, eval_)) {
        if (r == incumbent_.recipes[op]) continue;
        Plan trial = incumbent_;
        trial.recipes[op] = r;
        StatusOr<Evaluation> e =
            Evaluate(graph_, coster_, trial, EvalMode::kFull);
        if (!e.ok()) return e.status();
        const std::tuple<int64_t, int64_t, int64_t> key = e->RepairRank();
        if (key < best) {
          found = true;
          best = key;
          best_op = op;
          best_recipe = r;
          best_eval = std::move(*e);
        }
      }
    }
    if (!found) break;
    fb::DecisionT d;
    d.ops = {graph_.op(best_op).id};
    d.action = graph_.OpLabel(best_op) + ": " +
               incumbent_.recipes[best_op].Text() + " -> " + best_recipe.Text();
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

// Ranks the pool by the plan's cycles with each change (cheap: prices are
// cached); ties by key. `apply` is Search::Apply.
template <typename ApplyFn>
// The best `top` proposals of `pool` (all, if fewer) by their plans'
// cycles, ties by key, best first; more may follow, not in rank. Each
// proposal is priced first at its lower bound (`bounds`) and then, in
// order of those bounds, by its schedule until no remaining bound can
// enter the best `top`: the same ranks as pricing every proposal by its
// schedule.
StatusOr<std::vector<std::pair<int64_t, size_t>>> RankByCycles(
    const Graph& graph, const Coster& coster, const Coster& bounds,
    const std::vector<Proposal>& pool, size_t top, const ApplyFn& apply) {
  std::vector<std::string> keys(pool.size());
  std::vector<Plan> plans(pool.size());
  std::vector<std::pair<int64_t, size_t>> bounded;
  for (size_t i = 0; i < pool.size(); ++i) {
    keys[i] = pool[i].Key();
    StatusOr<Plan> plan = apply(pool[i]);
    if (!plan.ok()) return plan.status();
    plans[i] = std::move(*plan);
    StatusOr<Evaluation> e =
        Evaluate(graph, bounds, plans[i], EvalMode::kCyclesOnly);
    if (!e.ok()) return e.status();
    bounded.push_back({e->total_cycles, i});
  }
  auto before = [&](const std::pair<int64_t, size_t>& a,
                    const std::pair<int64_t, size_t>& b) {
    if (a.first != b.first) return a.first < b.first;
    return keys[a.second] < keys[b.second];
  };
  std::stable_sort(bounded.begin(), bounded.end(), before);
  std::vector<std::pair<int64_t, size_t>> ranked;
  for (const auto& next : bounded) {
    // Every proposal from here on costs at least `next`.
    if (ranked.size() >= top && before(ranked[top - 1], next)) break;
    StatusOr<Evaluation> e =
        Evaluate(graph, coster, plans[next.second], EvalMode::kCyclesOnly);
    if (!e.ok()) return e.status();
    const std::pair<int64_t, size_t> priced = {e->total_cycles, next.second};
    ranked.insert(std::upper_bound(ranked.begin(), ranked.end(), priced, before),
                  priced);
  }
  return ranked;
}

}  // namespace

StatusOr<std::vector<Proposal>> Search::MakeOffers(uint64_t offer_seed,
                                                   int depth) {
  std::mt19937_64 rng(offer_seed);
  std::vector<int> order(graph_.num_ops());
  for (int i = 0; i < graph_.num_ops(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const int k = std::max(1, options_.proposals_per_op);
  std::vector<std::pair<int64_t, Proposal>> ranked_offers;
  for (int op : order) {
    if (options_.pinned.count(op)) continue;
    OfferPool pool{incumbent_};
    const std::vector<int> followers =
        FollowersOf(graph_, options_.pinned, incumbent_, eval_, op);
    AddSingleAndCarry(graph_, coster_, op, AllRecipes(op, incumbent_, eval_),
                      followers, &pool);
    AddJoint(graph_, coster_, options_.pinned, candidates_, incumbent_, op,
             &pool);
    // The band at this depth reaches the first `top` ranks.
    const size_t top = static_cast<size_t>(k) * (depth + 2);
    StatusOr<std::vector<std::pair<int64_t, size_t>>> ranked =
        RankByCycles(graph_, coster_, bounds_, pool.proposals, top,
                     [this](const Proposal& p) { return Apply(p); });
    if (!ranked.ok()) return ranked.status();
    for (const auto& [cycles, i] :
         ChooseBand(std::move(*ranked), k, depth, rng)) {
      ranked_offers.push_back({cycles, pool.proposals[i]});
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
    } else if (e->total_cycles >= eval_.total_cycles) {
      d.outcome = fb::Outcome::Rejected;
      d.reason = "rejected by cost: " + numbers;
    } else if (options_.max_decisions >= 0 &&
               accepted_ >= options_.max_decisions) {
      d.outcome = fb::Outcome::Rejected;
      d.reason = "not applied: --max-decisions=" +
                 std::to_string(options_.max_decisions) +
                 " reached (would improve: " + numbers + ")";
    } else {
      d.outcome = fb::Outcome::Accepted;
      d.limit_index = accepted_ + 1;
      d.reason = "improves by " +
                 std::to_string(eval_.total_cycles - e->total_cycles) +
                 " cycles: " + numbers;
      accept = true;
    }
    Record(std::move(d));
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

// A weight whose saved ownership is not what its first consumer's recipe
// needs was in a home (the checkpoint records ownerships, not choices).
Status Search::RestoreHomes(const fb::SearchCheckpointT& c, Plan* plan) const {
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
    p->ownership = std::make_unique<fb::OwnershipT>(eval_.owners[v]);
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
        !passes::SameOwnership(*vp->ownership, e->owners[v])) {
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
