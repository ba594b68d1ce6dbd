#include "passes/plan/weight_homes.h"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "passes/core/ownership.h"

namespace tilec::plan {

Plan WithAllHomes(const Graph& graph, const Coster& coster, Plan plan) {
  plan.homes.resize(graph.num_values());
  int next = 0;
  int weights = 0;
  for (int v = 0; v < graph.num_values(); ++v) {
    const ValueNode& value = graph.value(v);
    if (value.role != fb::ValueRole::Weight || value.uses.empty()) continue;
    WeightHome home;
    home.fixed = passes::HomeOwnership(
        value.shape, coster.StoredBytes(graph, v), coster.tiles(), next);
    next = (home.fixed.first_tile + home.fixed.tiles) % coster.tiles();
    home.delivery = true;
    home.first_replica = weights++;
    plan.homes[v] = std::move(home);
  }
  return plan;
}

int CountHomes(const Graph& graph, const Plan& plan) {
  int n = 0;
  for (int v = 0; v < graph.num_values(); ++v) n += plan.Home(v) != nullptr;
  return n;
}

namespace {

struct Candidate {
  int value = -1;
  int64_t saved = 0;  // cycles, with everything else as it is
  int64_t bytes = 0;  // compute-layout bytes on its busiest tile
  bool row_copied = false;  // a CopyRows reads it
};

std::string Label(const ValueNode& v) {
  return "%" + std::to_string(v.id) + " " + v.name;
}

// The weights on `eval`'s peak tile that SpreadHomes may spread.
std::vector<int> SpreadableOnPeak(const Graph& graph, const Coster& coster,
                                  const Plan& plan, const Evaluation& eval) {
  std::vector<int> weights;
  for (const MemoryItem& item : eval.peak_items) {
    const WeightHome* home = item.weight >= 0 ? plan.Home(item.weight) : nullptr;
    if (!home || !home->delivery || home->spread ||
        std::find(weights.begin(), weights.end(), item.weight) !=
            weights.end()) {
      continue;
    }
    const std::optional<fb::OwnershipT> layout =
        FirstConsumerLayout(graph, coster, plan, item.weight);
    if (layout && layout->kind == fb::OwnershipKind::Blocked &&
        layout->replicas == 1) {
      weights.push_back(item.weight);
    }
  }
  std::sort(weights.begin(), weights.end());
  return weights;
}

}  // namespace

Status SpreadHomes(const Graph& graph, const Coster& coster, Plan* plan,
                   Evaluation* eval,
                   const std::function<void(fb::DecisionT)>& record) {
  while (!eval->feasible()) {
    RepairRankValue best = eval->RepairRank();
    int best_weight = -1;
    Evaluation best_eval;
    for (int v : SpreadableOnPeak(graph, coster, *plan, *eval)) {
      Plan trial = *plan;
      trial.homes[v]->spread = true;
      StatusOr<Evaluation> e = Evaluate(graph, coster, trial, EvalMode::kFull);
      if (!e.ok()) return e.status();
      const RepairRankValue key = e->RepairRank();
      if (key < best) {
        best = key;
        best_weight = v;
        best_eval = std::move(*e);
      }
    }
    if (best_weight < 0) break;
    const ValueNode& value = graph.value(best_weight);
    fb::DecisionT d;
    for (const auto& [op, slot] : value.uses) d.ops.push_back(graph.op(op).id);
    d.ops.erase(std::unique(d.ops.begin(), d.ops.end()), d.ops.end());
    // One slab a block (S = 1) moves the blocks to other tiles.
    const bool moved = best_eval.owners[best_weight].sub_partitions.empty();
    d.action = "weight " + Label(value) +
               (moved ? ": home moved off its consumer's tiles, "
                      : ": home spread beyond its consumer's layout, ") +
               passes::FormatOwnership(eval->owners[best_weight]) + " -> " +
               passes::FormatOwnership(best_eval.owners[best_weight]) +
               ", delivered to it before each use";
    // A required repair (the plan does not fit without it): recorded as
    // accepted outside --max-decisions (limit_index 0).
    d.outcome = fb::Outcome::Accepted;
    d.reason = "memory repair: the plan does not fit (" + eval->Diagnosis() +
               "); of the weights there, spreading this one brings it "
               "closest to fitting";
    d.cycles_before = eval->total_cycles;
    d.cycles_after = best_eval.total_cycles;
    d.bytes_before = eval->peak_bytes;
    d.bytes_after = best_eval.peak_bytes;
    record(std::move(d));
    plan->homes[best_weight]->spread = true;
    *eval = std::move(best_eval);
  }
  return Status::Ok();
}

Status PromoteWeights(const Graph& graph, const Coster& coster, Plan* plan,
                      Evaluation* eval,
                      const std::function<void(fb::DecisionT)>& record,
                      const std::function<bool(fb::DecisionT)>& try_apply) {
  // Rank by the cycles each promotion alone saves (its redistribution; the
  // cycles-only evaluation is cheap) per byte of compute layout it keeps.
  std::vector<Candidate> ranked;
  for (int v = 0; v < graph.num_values(); ++v) {
    if (!plan->Home(v)) continue;
    // A row copy reads the weight where it is, so its price depends on
    // home or compute layout as a redistribution's does.
    const bool row_copied = std::any_of(
        graph.value(v).uses.begin(), graph.value(v).uses.end(),
        [&graph](const std::pair<int, int>& use) {
          return graph.op(use.first).kind == fb::OpKind::CopyRows;
        });
    if (!row_copied &&
        std::none_of(eval->redistributions.begin(),
                     eval->redistributions.end(),
                     [v](const Redistribution& r) { return r.value == v; })) {
      fb::DecisionT d;
      d.action = "weight " + Label(graph.value(v)) + ": stays in its home " +
                 passes::FormatOwnership(eval->owners[v]);
      d.outcome = fb::Outcome::Info;
      d.reason = "the home already holds every element where its consumers "
                 "need it: nothing is redistributed";
      d.cycles_before = d.cycles_after = eval->total_cycles;
      d.bytes_before = d.bytes_after = eval->peak_bytes;
      record(std::move(d));
      continue;
    }
    Plan trial = *plan;
    trial.homes[v].reset();
    StatusOr<Evaluation> e =
        Evaluate(graph, coster, trial, EvalMode::kCyclesOnly);
    if (!e.ok()) return e.status();
    Candidate c;
    c.value = v;
    c.saved = eval->total_cycles - e->total_cycles;
    c.row_copied = row_copied;
    // A body weight's twins take its ownership: promoting it keeps every
    // iteration's copy in compute layout.
    c.bytes = graph.Copies(v) *
              passes::MaxBytesPerTile(e->owners[v], graph.value(v).shape,
                                      coster.StoredBytes(graph, v));
    ranked.push_back(c);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Candidate& a, const Candidate& b) {
                     // a.saved / a.bytes > b.saved / b.bytes, exactly.
                     return static_cast<__int128>(a.saved) * b.bytes >
                            static_cast<__int128>(b.saved) * a.bytes;
                   });
  for (const Candidate& c : ranked) {
    const ValueNode& value = graph.value(c.value);
    Plan trial = *plan;
    const fb::OwnershipT home = eval->owners[c.value];
    trial.homes[c.value].reset();
    StatusOr<Evaluation> e = Evaluate(graph, coster, trial, EvalMode::kFull);
    if (!e.ok()) return e.status();
    fb::DecisionT d;
    for (const auto& [op, slot] : value.uses) d.ops.push_back(graph.op(op).id);
    d.ops.erase(std::unique(d.ops.begin(), d.ops.end()), d.ops.end());
    d.action = "weight " + Label(value) + ": kept resident in compute layout " +
               passes::FormatOwnership(e->owners[c.value]) + " instead of home " +
               passes::FormatOwnership(home) + " (" + std::to_string(c.bytes) +
               " B on its busiest tile" +
               (graph.Copies(c.value) > 1
                    ? ", " + std::to_string(graph.Copies(c.value)) +
                          " iterations' copies"
                    : std::string()) +
               ")";
    d.cycles_before = eval->total_cycles;
    d.cycles_after = e->total_cycles;
    d.bytes_before = eval->peak_bytes;
    d.bytes_after = e->peak_bytes;
    if (!e->feasible()) {
      d.outcome = fb::Outcome::Rejected;
      d.reason = "rejected by memory: " + e->Diagnosis();
      record(std::move(d));
    } else if (e->total_cycles >= eval->total_cycles) {
      d.outcome = fb::Outcome::Rejected;
      d.reason = c.row_copied ? "rejected by cost: its row copies are no "
                                "cheaper from compute layout"
                              : "rejected by cost: the redistribution from "
                                "its home saves nothing";
      record(std::move(d));
    } else {
      d.reason = "the whole program still fits; saves " +
                 std::to_string(eval->total_cycles - e->total_cycles) +
                 (c.row_copied ? " cycles of its row copies"
                               : " cycles of redistribution from its home");
      // The plan fits either way: a promotion only saves cycles, so it is
      // an optimization under --max-decisions, not a repair.
      if (try_apply(std::move(d))) {
        *plan = std::move(trial);
        *eval = std::move(*e);
      }
    }
  }
  return Status::Ok();
}

}  // namespace tilec::plan
