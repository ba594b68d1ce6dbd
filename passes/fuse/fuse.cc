#include "passes/fuse/fuse.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/fused_body.h"
#include "passes/core/ownership.h"
#include "passes/fuse/boundary.h"
#include "passes/plan/planner.h"
#include "passes/plan/price_cache.h"
#include "passes/plan/search.h"

namespace tilec::fuse {
namespace {

using passes::Numbers;
using passes::Thousands;

bool IsElementwise(const fb::OperationT& op) {
  switch (op.kind) {
    case fb::OpKind::BiasAdd:
    case fb::OpKind::Gelu:
    case fb::OpKind::Add:
    case fb::OpKind::Cast:
    case fb::OpKind::Fused:
      return op.results.size() == 1;
    default:
      return false;
  }
}

std::string OpText(const fb::OperationT& op) {
  return "op " + std::to_string(op.id) + " (" + op.name + ")";
}

const fb::ValueT* FindValue(const fb::ModuleT& m, uint32_t id) {
  for (const auto& v : m.values) {
    if (v->id == id) return v.get();
  }
  return nullptr;
}

// "l0.mlp.up_bias" + "l0.mlp.gelu" -> "l0.mlp.up_bias+gelu".
std::string FusedName(const std::string& a, const std::string& b) {
  size_t common = 0;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n && a[i] == b[i]; ++i) {
    if (a[i] == '.') common = i + 1;
  }
  return a + "+" + b.substr(common);
}

std::vector<uint32_t> Origin(const fb::OperationT& op) {
  return op.origin.empty() ? std::vector<uint32_t>{op.id} : op.origin;
}

}  // namespace

// ---------------------------------------------------------------- reading

StatusOr<plan::PriceOptions> PlannedPricing(const fb::ModuleT& module) {
  plan::PriceOptions options;
  for (auto it = module.log.rbegin(); it != module.log.rend(); ++it) {
    if ((*it)->pass != "plan-ownership") continue;
    for (const std::string& flag : (*it)->flags) {
      const std::string prefix = "--gemm_dtype=";
      if (flag.rfind(prefix, 0) != 0) continue;
      StatusOr<std::optional<fb::DType>> dtype =
          plan::ParseGemmDType(flag.substr(prefix.size()));
      if (!dtype.ok()) return dtype.status();
      options.gemm_dtype = *dtype;
    }
    break;
  }
  return options;
}

namespace {

bool IsRedistributed(const fb::ModuleT& planned, uint32_t value) {
  for (const auto& op : planned.ops) {
    if (op->kind == fb::OpKind::Redistribute && op->operands.size() == 1 &&
        op->operands[0] == value) {
      return true;
    }
  }
  return false;
}

// A weight whose first reader is a row copy is owned as that copy's result
// (a copy reads its operands where they are) unless the planner put it in
// a home: an ownership other than the copy's layout is its home.
bool RowCopiedFromHome(const fb::ModuleT& planned, const fb::ValueT& v) {
  for (const auto& op : planned.ops) {
    if (std::find(op->operands.begin(), op->operands.end(), v.id) ==
        op->operands.end()) {
      continue;
    }
    return op->kind == fb::OpKind::CopyRows && op->recipe &&
           op->recipe->layout &&
           !passes::SameOwnership(*v.ownership, *op->recipe->layout);
  }
  return false;
}

// The planner's Redistribute ops of a module, to be read back out of it.
struct Copies {
  // Each copy's result stands for its source (copies of copies included).
  std::map<uint32_t, uint32_t> source_of;
  std::set<uint32_t> results;
  // A loop edge's input -> carried_out: the body's last op writes
  // carried_out again (the plan adds the edge back if it still needs it).
  std::map<uint32_t, uint32_t> edge_input;
};

StatusOr<Copies> ReadCopies(const fb::ModuleT& m) {
  Copies c;
  for (const auto& op : m.ops) {
    if (op->kind != fb::OpKind::Redistribute) continue;
    if (op->operands.size() != 1 || op->results.size() != 1) {
      return Status::BadInput(OpText(*op) +
                              ": a redistribution has one operand and one "
                              "result");
    }
    if (IsLoopEdge(m, *op)) {
      c.edge_input[op->operands[0]] = op->results[0];
      continue;
    }
    uint32_t source = op->operands[0];
    if (auto it = c.source_of.find(source); it != c.source_of.end()) {
      source = it->second;
    }
    c.source_of[op->results[0]] = source;
    c.results.insert(op->results[0]);
  }
  return c;
}

}  // namespace

StatusOr<PlannedGraph> Unplan(const fb::ModuleT& planned) {
  PlannedGraph out;
  out.module = planned;
  fb::ModuleT& m = out.module;
  StatusOr<Copies> copies = ReadCopies(m);
  if (!copies.ok()) return copies.status();
  const auto& [source_of, copy_results, edge_input] = *copies;
  std::vector<std::unique_ptr<fb::OperationT>> ops;
  for (auto& op : m.ops) {
    if (op->kind == fb::OpKind::Redistribute) continue;
    for (uint32_t& id : op->operands) {
      if (auto it = source_of.find(id); it != source_of.end()) id = it->second;
    }
    for (uint32_t& id : op->results) {
      if (auto it = edge_input.find(id); it != edge_input.end()) id = it->second;
    }
    if (!op->recipe) {
      return Status::BadInput(OpText(*op) +
                              " has no recipe (run plan-ownership first)");
    }
    StatusOr<plan::Recipe> recipe = plan::RecipeFromFb(*op->recipe);
    if (!recipe.ok()) return recipe.status().WithContext(OpText(*op));
    out.plan.recipes.push_back(*recipe);
    out.gemm_notes.push_back(op->recipe->note);
    ops.push_back(std::move(op));
  }
  m.ops = std::move(ops);
  // A weight that only redistributions read is in a home (docs/planning.md,
  // "Weight homes"): the plan keeps it there. Row copies read a weight
  // where it is, home or not (RowCopiedFromHome tells).
  std::set<uint32_t> read_directly;
  for (const auto& op : planned.ops) {
    if (op->kind == fb::OpKind::Redistribute ||
        op->kind == fb::OpKind::CopyRows) {
      continue;
    }
    read_directly.insert(op->operands.begin(), op->operands.end());
  }
  std::vector<std::unique_ptr<fb::ValueT>> values;
  for (auto& v : m.values) {
    if (copy_results.count(v->id) || edge_input.count(v->id)) continue;
    if (v->role == fb::ValueRole::Weight && v->ownership &&
        !read_directly.count(v->id) &&
        (IsRedistributed(planned, v->id) || RowCopiedFromHome(planned, *v))) {
      out.plan.homes.resize(m.values.size());
      out.plan.homes[values.size()] = plan::WeightHome{.fixed = *v->ownership};
    }
    v->ownership.reset();
    values.push_back(std::move(v));
  }
  if (!out.plan.homes.empty()) out.plan.homes.resize(values.size());
  m.values = std::move(values);
  return out;
}

// ---------------------------------------------------------------- regions

std::vector<std::pair<Region, std::string>> RegionCandidates(
    const fb::ModuleT& module) {
  std::map<uint32_t, int> producer;
  std::map<uint32_t, int> uses;
  for (size_t i = 0; i < module.ops.size(); ++i) {
    for (uint32_t r : module.ops[i]->results) producer[r] = static_cast<int>(i);
    for (uint32_t v : module.ops[i]->operands) ++uses[v];
  }
  StatusOr<std::vector<int>> body = OpBodies(module);
  std::vector<std::pair<Region, std::string>> out;
  for (size_t c = 0; c < module.ops.size(); ++c) {
    const fb::OperationT& consumer = *module.ops[c];
    if (!IsElementwise(consumer)) continue;
    for (size_t slot = 0; slot < consumer.operands.size(); ++slot) {
      const uint32_t v = consumer.operands[slot];
      auto it = producer.find(v);
      if (it == producer.end()) continue;
      const fb::OperationT& p = *module.ops[it->second];
      if (!IsElementwise(p)) continue;
      Region region;
      region.producer = it->second;
      region.consumer = static_cast<int>(c);
      region.slot = static_cast<int>(slot);
      std::string why;
      const int reads = static_cast<int>(
          std::count(consumer.operands.begin(), consumer.operands.end(), v));
      const fb::ValueT* value = FindValue(module, v);
      if (!body.ok()) {
        why = body.status().message();
      } else if ((*body)[it->second] != (*body)[c]) {
        why = "one op is in a repeat's body and the other is not: nothing "
              "fuses across the loop's boundary";
      } else if (reads > 1) {
        why = "the consumer reads the producer's result twice";
      } else if (slot == 1 && consumer.kind != fb::OpKind::Add) {
        why = "the producer's result is the consumer's per-column or second "
              "operand, not its running value";
      } else if (slot > 1) {
        why = "the producer's result is not the consumer's running value";
      } else if (value && value->role == fb::ValueRole::Output) {
        why = "the producer's result is a graph output";
      }
      region.duplicate = uses[v] > 1;
      out.push_back({region, why});
    }
  }
  return out;
}

StatusOr<fb::ModuleT> FuseRegion(const fb::ModuleT& module,
                                 const Region& region, uint32_t fused_id) {
  const fb::OperationT& p = *module.ops[region.producer];
  const fb::OperationT& c = *module.ops[region.consumer];
  const fb::ValueT* p_result = FindValue(module, p.results[0]);
  const fb::ValueT* c_result = FindValue(module, c.results[0]);
  if (!p_result || !c_result) {
    return Status::BadInput(OpText(c) + ": a result is not a value");
  }
  StatusOr<std::vector<fb::FusedStepT>> p_steps =
      kernels::BodySteps(p, *p_result);
  if (!p_steps.ok()) return p_steps.status();
  StatusOr<std::vector<fb::FusedStepT>> c_steps =
      kernels::BodySteps(c, *c_result);
  if (!c_steps.ok()) return c_steps.status();

  auto fused = std::make_unique<fb::OperationT>();
  fused->id = fused_id;
  fused->kind = fb::OpKind::Fused;
  fused->name = FusedName(p.name, c.name);
  fused->operands = p.operands;
  fused->results = c.results;
  fused->gelu = c.gelu;
  // The consumer's operands other than the running value, after the
  // producer's: c's operand j -> the fused op's operand index.
  std::map<int, int> c_index;
  for (size_t j = 0; j < c.operands.size(); ++j) {
    if (static_cast<int>(j) == region.slot) continue;
    c_index[static_cast<int>(j)] = static_cast<int>(fused->operands.size());
    fused->operands.push_back(c.operands[j]);
  }
  for (const fb::FusedStepT& s : *p_steps) {
    fused->body.push_back(std::make_unique<fb::FusedStepT>(s));
  }
  // An FP8 intermediate is a rounding the graph asked for (a quantized
  // value): the body keeps it as a cast. F16 intermediates are not rounded
  // inside a fused body (the reference's Fused semantics), which only
  // removes rounding.
  if (ir::IsFp8(p_result->dtype)) {
    auto cast = std::make_unique<fb::FusedStepT>();
    cast->kind = fb::FusedStepKind::Cast;
    cast->dtype = p_result->dtype;
    cast->fp8_scale_exp = p_result->fp8_scale_exp;
    fused->body.push_back(std::move(cast));
  }
  for (fb::FusedStepT s : *c_steps) {
    // Add is commutative: with the producer in slot 1, the residual
    // operand is slot 0.
    if (c.kind == fb::OpKind::Add && region.slot == 1) s.operand = 0;
    if (s.operand >= 0) {
      auto it = c_index.find(s.operand);
      if (it == c_index.end()) {
        return Status::BadInput(OpText(c) +
                                ": a body step reads the producer's result "
                                "as an operand");
      }
      s.operand = it->second;
    }
    fused->body.push_back(std::make_unique<fb::FusedStepT>(s));
  }
  fused->origin = Origin(p);
  for (uint32_t id : Origin(c)) fused->origin.push_back(id);
  if (c.recipe) fused->recipe = std::make_unique<fb::RecipeT>(*c.recipe);

  fb::ModuleT out = module;
  std::vector<std::unique_ptr<fb::OperationT>> ops;
  for (size_t i = 0; i < out.ops.size(); ++i) {
    if (static_cast<int>(i) == region.producer && !region.duplicate) continue;
    if (static_cast<int>(i) == region.consumer) {
      ops.push_back(std::move(fused));
      continue;
    }
    ops.push_back(std::move(out.ops[i]));
  }
  out.ops = std::move(ops);
  if (!region.duplicate) {
    std::vector<std::unique_ptr<fb::ValueT>> values;
    for (auto& v : out.values) {
      if (v->id != p.results[0]) values.push_back(std::move(v));
    }
    out.values = std::move(values);
  }
  return out;
}

// ---------------------------------------------------------------- pricing

namespace {

// One placement of a fused region and the plan it gives.
struct Placement {
  std::string label;  // "producer owners", "consumer owners", "proposal"
  plan::Recipe recipe;
  plan::Evaluation eval;
};

// A candidate priced: the fused module and its cheapest placement.
struct Priced {
  Region region;
  fb::ModuleT module;
  plan::Plan plan;
  std::vector<std::string> gemm_notes;
  int fused = -1;  // op index of the fused op
  std::optional<Placement> best;          // cheapest that fits
  std::optional<Placement> best_unfit;    // cheaper, but does not fit
  std::string kernels;                    // its body's calls
  std::string refused;                    // why it cannot be fused at all
  // The cheapest plan that fits per kind of placement, in the order tried.
  std::vector<std::pair<std::string, int64_t>> by_label;
};

// "producer owners 176,500, consumer owners 177,020, ...": what each kind
// of placement gave the plan.
std::string PlacementText(const Priced& p) {
  std::string text;
  for (const auto& [label, cycles] : p.by_label) {
    text += (text.empty() ? "" : ", ") + label + " " + Thousands(cycles);
  }
  return text;
}

// Cycles of ops `ops` of an evaluated plan and of the redistributions that
// feed them or move their results: what a region costs in that plan.
int64_t RegionCycles(const plan::Graph& graph, const plan::Evaluation& e,
                     const std::set<int>& ops) {
  int64_t total = 0;
  std::set<int> values;
  for (int op : ops) {
    total += e.ops[op].Cycles();
    values.insert(graph.op(op).result);
  }
  for (const plan::Redistribution& red : e.redistributions) {
    bool touches = values.count(red.value) > 0;
    for (const auto& use : red.uses) touches = touches || ops.count(use.first);
    if (touches) total += red.Cycles();
  }
  return total;
}

class Fuser {
 public:
  // `base`: the pass's coster, whose transfer caches every graph shares.
  Fuser(const plan::Coster& base, const FuseOptions& options,
        passes::DecisionLog* log)
      : base_(base), options_(options), log_(log) {}

  // Fuses regions of `pg` while one pays, best first; returns how many.
  StatusOr<int> Run(PlannedGraph* pg, uint32_t first_id) {
    next_id_ = first_id;
    int formed = 0;
    while (true) {
      StatusOr<plan::Graph> graph = plan::Graph::Build(pg->module);
      if (!graph.ok()) return graph.status();
      // The planner's Coster caches op prices by op index, so each graph
      // gets its own (a fused graph renumbers the ops after the region).
      const plan::Coster coster = base_.ForAnotherGraph();
      StatusOr<plan::Evaluation> base = plan::Evaluate(
          *graph, coster, pg->plan, plan::EvalMode::kFull);
      if (!base.ok()) return base.status();
      VLOG(1) << "plan: " << base->total_cycles << " cycles, peak "
              << base->peak_bytes << " B";
      StatusOr<std::vector<Priced>> priced_or =
          PriceAll(*pg, *graph, *base, RegionCandidates(pg->module));
      if (!priced_or.ok()) return priced_or.status();
      std::vector<Priced>& priced = *priced_or;
      // The largest saving first (XLA's priority fusion), then program
      // order for ties.
      Priced* chosen = nullptr;
      for (Priced& p : priced) {
        if (!p.best || p.best->eval.total_cycles >= base->total_cycles) {
          continue;
        }
        if (!chosen ||
            p.best->eval.total_cycles < chosen->best->eval.total_cycles) {
          chosen = &p;
        }
      }
      if (!chosen) {
        for (const Priced& p : priced) Refuse(*pg, *graph, *base, p);
        return formed;
      }
      if (!Accept(*pg, *graph, *base, *chosen)) {
        // Beyond --max-decisions: the rest stays unfused.
        return formed;
      }
      pg->module = std::move(chosen->module);
      pg->plan = chosen->plan;
      pg->plan.recipes[chosen->fused] = chosen->best->recipe;
      pg->gemm_notes = chosen->gemm_notes;
      ++formed;
    }
  }

 private:
  // Each candidate priced (Price) on options_.threads threads, in the
  // candidates' order. A candidate's price depends on nothing another
  // computes (its own graph and coster; the family caches only hold what
  // any thread would compute), so the result is one thread's.
  StatusOr<std::vector<Priced>> PriceAll(
      const PlannedGraph& pg, const plan::Graph& graph,
      const plan::Evaluation& base,
      const std::vector<std::pair<Region, std::string>>& candidates) const {
    std::vector<StatusOr<Priced>> priced(candidates.size(),
                                         Status::Internal("not priced"));
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t i; (i = next++) < candidates.size();) {
        priced[i] = Price(pg, graph, base, candidates[i].first,
                          candidates[i].second);
      }
    };
    std::vector<std::thread> helpers;
    const size_t threads = std::min<size_t>(
        static_cast<size_t>(std::max(1, options_.threads)), candidates.size());
    for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
    work();
    for (std::thread& h : helpers) h.join();
    std::vector<Priced> out;
    for (StatusOr<Priced>& p : priced) {
      if (!p.ok()) return p.status();
      out.push_back(std::move(*p));
    }
    return out;
  }

  // Each placement's plan's cycles at the planner's lower bound.
  static StatusOr<std::vector<int64_t>> LowerBounds(
      const plan::Graph& g, const plan::Coster& coster,
      const std::vector<Placement>& placements, const Priced& out) {
    const plan::Coster bounds = coster.LowerBounds();
    std::vector<int64_t> cycles;
    for (const Placement& q : placements) {
      plan::Plan trial = out.plan;
      trial.recipes[out.fused] = q.recipe;
      StatusOr<plan::Evaluation> e =
          plan::Evaluate(g, bounds, trial, plan::EvalMode::kCyclesOnly);
      if (!e.ok()) return e.status();
      cycles.push_back(e->total_cycles);
    }
    return cycles;
  }

  // Each placement's plan where it can matter: out->best (the cheapest that
  // fits, the first in `placements` of equals), out->best_unfit (a cheaper
  // one that does not fit), out->by_label (the cheapest that fits of each
  // label, labels in the order of their placements). Every placement is
  // first priced at its lower bound (the planner's Coster::LowerBounds,
  // cycles only), then evaluated in full in order of those bounds where
  // the bound could still make it one of those: the same figures as
  // evaluating every placement, and on so400m most are not (each full
  // evaluation schedules the placement's new exchanges).
  // `what` and `now` (the region and the plan's cycles without it) are for
  // the log.
  Status PricePlacements(const plan::Graph& g, const plan::Coster& coster,
                         const std::string& what, int64_t now,
                         std::vector<Placement>& placements,
                         Priced* out) const {
    StatusOr<std::vector<int64_t>> bounds =
        LowerBounds(g, coster, placements, *out);
    if (!bounds.ok()) return bounds.status();
    const std::vector<int64_t>& bound = *bounds;
    std::vector<size_t> order(placements.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return bound[a] < bound[b]; });
    // The cheapest so far, (cycles, placement index), and per label.
    std::optional<std::pair<int64_t, size_t>> best, best_unfit;
    std::map<std::string, int64_t> label_best;
    for (size_t i : order) {
      Placement& q = placements[i];
      auto label = label_best.find(q.label);
      const bool may_be_best = !best || bound[i] <= best->first;
      const bool may_be_labels =
          label == label_best.end() || bound[i] < label->second;
      if (options_.bounds_first && !may_be_best && !may_be_labels) continue;
      plan::Plan trial = out->plan;
      trial.recipes[out->fused] = q.recipe;
      StatusOr<plan::Evaluation> e =
          plan::Evaluate(g, coster, trial, plan::EvalMode::kFull);
      if (!e.ok()) return e.status();
      q.eval = std::move(*e);
      VLOG(1) << what << " on " << q.label << " " << q.recipe.Text()
              << ": plan " << q.eval.total_cycles << " cycles (now " << now
              << "), peak " << q.eval.peak_bytes << " B"
              << (q.eval.feasible() ? "" : " (does not fit)");
      const std::pair<int64_t, size_t> rank = {q.eval.total_cycles, i};
      if (q.eval.feasible()) {
        if (label == label_best.end()) {
          label_best[q.label] = q.eval.total_cycles;
        } else {
          label->second = std::min(label->second, q.eval.total_cycles);
        }
      }
      std::optional<std::pair<int64_t, size_t>>& slot =
          q.eval.feasible() ? best : best_unfit;
      if (!slot || rank < *slot) slot = rank;
    }
    if (best) out->best = placements[best->second];
    if (best_unfit) out->best_unfit = placements[best_unfit->second];
    for (const Placement& q : placements) {
      auto label = label_best.find(q.label);
      if (label == label_best.end()) continue;
      out->by_label.push_back(*label);
      label_best.erase(label);
    }
    return Status::Ok();
  }

  StatusOr<Priced> Price(const PlannedGraph& pg, const plan::Graph& graph,
                         const plan::Evaluation& base, const Region& region,
                         const std::string& why) const {
    // `graph` is the plan before this region: the other ops' recipes are
    // carried over by id.
    Priced out;
    out.region = region;
    if (!why.empty()) {
      out.refused = why;
      return out;
    }
    const fb::OperationT& p = *pg.module.ops[region.producer];
    const fb::OperationT& c = *pg.module.ops[region.consumer];
    StatusOr<fb::ModuleT> fused = FuseRegion(pg.module, region, next_id_);
    if (!fused.ok()) {
      out.refused = fused.status().message();
      return out;
    }
    StatusOr<plan::Graph> g = plan::Graph::Build(*fused);
    if (!g.ok()) {
      out.refused = "no kernel runs the fused body: " + g.status().message();
      return out;
    }
    out.module = std::move(*fused);
    out.fused = g->OpIndex(next_id_);
    const plan::Coster coster = base_.ForAnotherGraph();
    for (const plan::ElementwiseStep& s : g->op(out.fused).steps) {
      out.kernels += (out.kernels.empty() ? "" : "+") + s.call.kernel;
    }
    // The other ops keep their recipes (by id).
    std::map<uint32_t, int> old_index;
    for (int i = 0; i < graph.num_ops(); ++i) old_index[graph.op(i).id] = i;
    out.plan.recipes.resize(g->num_ops());
    out.gemm_notes.resize(g->num_ops());
    for (int v = 0; v < g->num_values(); ++v) {
      const int was = graph.ValueIndex(g->value(v).id);
      const plan::WeightHome* home = was < 0 ? nullptr : pg.plan.Home(was);
      if (!home) continue;
      out.plan.homes.resize(g->num_values());
      out.plan.homes[v] = *home;
    }
    for (int i = 0; i < g->num_ops(); ++i) {
      if (i == out.fused) continue;
      const int j = old_index.at(g->op(i).id);
      out.plan.recipes[i] = pg.plan.recipes[j];
      out.gemm_notes[i] = pg.gemm_notes[j];
    }
    std::vector<Placement> placements;
    auto add = [&](const std::string& label, const plan::Recipe& r) {
      if (r.kind == fb::RecipeKind::Gemm) return;
      for (const Placement& q : placements) {
        if (q.recipe == r) return;
      }
      if (!coster.CheckRecipe(*g, out.fused, r).ok()) return;
      placements.push_back({label, r, {}});
    };
    if (options_.producer_owners) {
      add("producer owners", pg.plan.recipes[region.producer]);
    }
    if (options_.consumer_owners) {
      add("consumer owners", pg.plan.recipes[region.consumer]);
    }
    if (options_.proposals) {
      for (const plan::Recipe& r : plan::Candidates(*g, coster, out.fused)) {
        add("proposed layout", r);
      }
      // Its neighbours' ownerships, given the consumer's placement.
      plan::Plan around = out.plan;
      around.recipes[out.fused] = pg.plan.recipes[region.consumer];
      StatusOr<plan::Evaluation> e = plan::Evaluate(
          *g, coster, around, plan::EvalMode::kCyclesOnly);
      if (e.ok()) {
        for (const plan::Recipe& r :
             plan::NeighbourRecipes(*g, coster, around, *e, out.fused)) {
          add("a neighbour's owners", r);
        }
      }
    }
    TILEC_RETURN_IF_ERROR(PricePlacements(*g, coster,
                                          OpText(p) + " + " + OpText(c),
                                          base.total_cycles, placements, &out));
    if (out.best_unfit && out.best &&
        out.best_unfit->eval.total_cycles >= out.best->eval.total_cycles) {
      out.best_unfit.reset();
    }
    if (!out.best && placements.empty()) {
      out.refused = "no layout can run the fused body";
    }
    return out;
  }

  // "different owners (elementwise flat(4)/1472 -> elementwise blocked(729x2))"
  static std::string Owners(const PlannedGraph& pg, const Region& r) {
    const plan::Recipe& a = pg.plan.recipes[r.producer];
    const plan::Recipe& b = pg.plan.recipes[r.consumer];
    if (a == b) return "same owners";
    return "different owners (" + passes::FormatOwnership(a.layout) + " -> " +
           passes::FormatOwnership(b.layout) + ")";
  }

  std::vector<uint32_t> Ids(const PlannedGraph& pg, const Priced& p,
                            bool with_fused) const {
    std::vector<uint32_t> ids = {pg.module.ops[p.region.producer]->id,
                                 pg.module.ops[p.region.consumer]->id};
    if (with_fused) ids.push_back(next_id_);
    return ids;
  }

  std::string Names(const PlannedGraph& pg, const Priced& p) const {
    const fb::OperationT& a = *pg.module.ops[p.region.producer];
    const fb::OperationT& b = *pg.module.ops[p.region.consumer];
    return ir::OpKindText(a.kind) + " (" + std::to_string(a.id) + ") + " +
           ir::OpKindText(b.kind) + " (" + std::to_string(b.id) + ")";
  }

  bool Accept(const PlannedGraph& pg, const plan::Graph& graph,
              const plan::Evaluation& base, const Priced& p) {
    const Placement& best = *p.best;
    StatusOr<plan::Graph> g = plan::Graph::Build(p.module);
    const int64_t region_before = RegionCycles(
        graph, base, {p.region.producer, p.region.consumer});
    std::set<int> after_ops = {p.fused};
    if (p.region.duplicate && g.ok()) {
      after_ops.insert(g->OpIndex(pg.module.ops[p.region.producer]->id));
    }
    const int64_t region_after =
        g.ok() ? RegionCycles(*g, best.eval, after_ops) : 0;
    const std::string reason =
        Names(pg, p) + ", " + Owners(pg, p.region) + ", fused on " +
        best.label + " (" + best.recipe.Text() + ") as " + p.kernels +
        (p.region.duplicate ? ", the producer kept for its other consumers"
                            : "") +
        ": region " + Thousands(region_before) + " -> " +
        Thousands(region_after) + " cycles, plan " +
        Thousands(base.total_cycles) + " -> " +
        Thousands(best.eval.total_cycles) + " (plan by placement: " +
        PlacementText(p) + ")";
    VLOG(1) << "fuse " << reason;
    const bool applied =
        log_->Apply(Ids(pg, p, true), "fuse into op " + std::to_string(next_id_),
                    reason,
                    Numbers{base.total_cycles, best.eval.total_cycles,
                            base.peak_bytes, best.eval.peak_bytes});
    if (applied) ++next_id_;
    return applied;
  }

  void Refuse(const PlannedGraph& pg, const plan::Graph& graph,
              const plan::Evaluation& base, const Priced& p) {
    const int64_t region_before = RegionCycles(
        graph, base, {p.region.producer, p.region.consumer});
    Numbers numbers{base.total_cycles, base.total_cycles, base.peak_bytes,
                    base.peak_bytes};
    std::string reason = Names(pg, p) + ": ";
    if (!p.refused.empty()) {
      reason += p.refused;
    } else if (p.best_unfit) {
      numbers.cycles_after = p.best_unfit->eval.total_cycles;
      numbers.bytes_after = p.best_unfit->eval.peak_bytes;
      reason += "refused by memory: fused on " + p.best_unfit->label + " (" +
                p.best_unfit->recipe.Text() + ") the plan would take " +
                Thousands(p.best_unfit->eval.total_cycles) + " cycles but " +
                p.best_unfit->eval.Diagnosis();
      if (p.best) {
        reason += "; the best that fits takes " +
                  Thousands(p.best->eval.total_cycles);
      }
    } else {
      numbers.cycles_after = p.best->eval.total_cycles;
      numbers.bytes_after = p.best->eval.peak_bytes;
      reason += "refused by cost, " + Owners(pg, p.region) +
                ": the best placement (" + p.best->label + ", " +
                p.best->recipe.Text() + ", " + p.kernels + ") gives plan " +
                Thousands(p.best->eval.total_cycles) + " against " +
                Thousands(base.total_cycles) + " separate (region " +
                Thousands(region_before) + " cycles now; by placement: " +
                PlacementText(p) + ")" +
                (p.region.duplicate
                     ? "; the producer would stay for its other consumers "
                       "and be computed twice"
                     : "");
    }
    VLOG(1) << "keep " << reason;
    log_->Reject(Ids(pg, p, false), "keep separate", reason, numbers);
  }

  const plan::Coster& base_;
  const FuseOptions& options_;
  passes::DecisionLog* log_;
  uint32_t next_id_ = 0;
};

// WritePlan numbers the redistributions anew; a copy that the plan still
// needs (the same source value to the same ownership) gets back the id,
// name and result value it had, so ids survive the pass. New copies' values
// are numbered above every value id of the input.
void RestoreCopyIds(const fb::ModuleT& before, fb::ModuleT* after) {
  auto key = [](const fb::ModuleT& m, const fb::OperationT& op) {
    const fb::ValueT* v = FindValue(m, op.results[0]);
    return std::to_string(op.operands[0]) + " " +
           (v && v->ownership ? ir::OwnershipText(*v->ownership) : "");
  };
  std::map<std::string, const fb::OperationT*> old;
  std::map<uint32_t, const fb::OperationT*> old_edges;  // by carried_out
  uint32_t next_value = 0;
  for (const auto& v : before.values) next_value = std::max(next_value, v->id + 1);
  for (const auto& op : before.ops) {
    if (IsLoopEdge(before, *op)) {
      old_edges[op->results[0]] = op.get();
    } else if (op->kind == fb::OpKind::Redistribute) {
      old[key(before, *op)] = op.get();
    }
  }
  std::map<uint32_t, uint32_t> value_id;  // new copy result -> its id
  std::map<uint32_t, std::string> value_name;
  for (auto& op : after->ops) {
    if (IsLoopEdge(*after, *op)) {
      // carried_out keeps its id; the edge's input is the new value.
      auto it = old_edges.find(op->results[0]);
      if (it == old_edges.end()) {
        value_id[op->operands[0]] = next_value++;
        continue;
      }
      value_id[op->operands[0]] = it->second->operands[0];
      op->id = it->second->id;
      continue;
    }
    if (op->kind != fb::OpKind::Redistribute) continue;
    auto it = old.find(key(*after, *op));
    if (it == old.end()) {
      value_id[op->results[0]] = next_value++;
      continue;
    }
    const uint32_t old_value = it->second->results[0];
    value_id[op->results[0]] = old_value;
    if (const fb::ValueT* v = FindValue(before, old_value)) {
      value_name[op->results[0]] = v->name;
    }
    op->id = it->second->id;
    op->name = it->second->name;
  }
  for (auto& v : after->values) {
    auto it = value_id.find(v->id);
    if (it == value_id.end()) continue;
    if (auto n = value_name.find(v->id); n != value_name.end()) {
      v->name = n->second;
    }
    v->id = it->second;
  }
  for (auto& op : after->ops) {
    for (uint32_t& id : op->operands) {
      if (auto it = value_id.find(id); it != value_id.end()) id = it->second;
    }
    // (A loop edge's input is the result of the body's last op.)
    for (uint32_t& id : op->results) {
      if (auto it = value_id.find(id); it != value_id.end()) id = it->second;
    }
  }
}

// Fuses the regions of `module` (unplanned as `pg`) that pay, priced by
// costers made from `base`; whether any was fused.
StatusOr<bool> FuseRegions(const plan::Coster& base, const FuseOptions& options,
                           PlannedGraph* pg, fb::ModuleT* module,
                           passes::DecisionLog* log) {
  uint32_t first_id = 0;
  for (const auto& op : module->ops) first_id = std::max(first_id, op->id + 1);
  int64_t cycles_before = 0, peak_before = 0;
  {
    const plan::Coster coster = base.ForAnotherGraph();
    StatusOr<plan::Graph> graph = plan::Graph::Build(pg->module);
    if (!graph.ok() && graph.status().code() == StatusCode::kInfeasible) {
      // A later pass's ops (fuse-residual's two-result op and Normalize)
      // have no planner price: the module passes through unchanged.
      log->Info({}, "skip",
                "the plan cannot be priced by the planner, nothing fused: " +
                    graph.status().message(),
                Numbers{});
      return false;
    }
    if (!graph.ok()) return graph.status();
    StatusOr<plan::Evaluation> eval =
        plan::Evaluate(*graph, coster, pg->plan, plan::EvalMode::kFull);
    if (!eval.ok()) return eval.status();
    cycles_before = eval->total_cycles;
    peak_before = eval->peak_bytes;
  }
  Fuser fuser(base, options, log);
  StatusOr<int> formed = fuser.Run(pg, first_id);
  if (!formed.ok()) return formed.status();
  if (*formed == 0) return false;
  StatusOr<plan::Graph> graph = plan::Graph::Build(pg->module);
  if (!graph.ok()) return graph.status();
  const plan::Coster coster = base.ForAnotherGraph();
  StatusOr<plan::Evaluation> eval =
      plan::Evaluate(*graph, coster, pg->plan, plan::EvalMode::kFull);
  if (!eval.ok()) return eval.status();
  StatusOr<std::vector<uint32_t>> inserted = plan::WritePlan(
      *graph, coster, pg->plan, *eval, "", &pg->module);
  if (!inserted.ok()) return inserted.status();
  // WritePlan wrote the ops with their recipes in graph order: the GEMM
  // notes of the input go back on the same ops.
  std::map<uint32_t, std::string> notes;
  for (int i = 0; i < graph->num_ops(); ++i) {
    notes[graph->op(i).id] = pg->gemm_notes[i];
  }
  for (auto& op : pg->module.ops) {
    auto it = notes.find(op->id);
    if (it != notes.end() && op->recipe) op->recipe->note = it->second;
  }
  RestoreCopyIds(*module, &pg->module);
  log->Info({}, "summary",
            std::to_string(*formed) + " region" + (*formed == 1 ? "" : "s") +
                " fused: plan " + Thousands(cycles_before) + " -> " +
                Thousands(eval->total_cycles) + " cycles",
            Numbers{cycles_before, eval->total_cycles, peak_before,
                    eval->peak_bytes});
  *module = std::move(pg->module);
  return true;
}

}  // namespace

StatusOr<bool> FuseElementwisePass::Transform(fb::ModuleT* module,
                                              passes::DecisionLog* log) {
  if (!module->target) {
    return Status::BadInput("the module has no target");
  }
  StatusOr<plan::PriceOptions> pricing = PlannedPricing(*module);
  if (!pricing.ok()) return pricing.status();
  StatusOr<PlannedGraph> pg = Unplan(*module);
  if (!pg.ok()) return pg.status();
  StatusOr<plan::Coster> base = plan::Coster::Create(*module->target, *pricing);
  if (!base.ok()) return base.status();
  plan::TakeSavedPrices(name(), options(), *base);
  StatusOr<bool> fused = FuseRegions(*base, options_, &*pg, module, log);
  if (fused.ok()) TILEC_RETURN_IF_ERROR(plan::SavePassPrices(options(), *base));
  return fused;
}

}  // namespace tilec::fuse
