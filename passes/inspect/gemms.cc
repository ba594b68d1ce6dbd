#include "passes/inspect/gemms.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "formats/target.h"
#include "formats/print.h"
#include "formats/repeat.h"
#include "kernels/cost.h"
#include "kernels/kernel_names.h"
#include "sim/simulator.h"
#include "passes/core/decisions.h"
#include "passes/inspect/amp.h"

namespace tilec::inspect {
namespace {

using passes::Thousands;

const fb::ValueT* FindValue(const fb::ModuleT& module, uint32_t id) {
  for (const auto& v : module.values) {
    if (v->id == id) return v.get();
  }
  return nullptr;
}

// The most GEMM calls any tile makes for each op.
std::map<uint32_t, int64_t> CallsPerTile(const fb::DeviceProgramT& program) {
  std::map<std::pair<uint32_t, uint32_t>, int64_t> calls;  // (op, tile)
  for (const auto& step : program.supersteps) {
    for (const auto& c : step->compute) {
      if (c->kernel == kernels::names::kGemm ||
          c->kernel == kernels::names::kGemmNt) {
        ++calls[{c->op, c->tile}];
      }
    }
  }
  std::map<uint32_t, int64_t> most;
  for (const auto& [key, n] : calls) {
    most[key.first] = std::max(most[key.first], n);
  }
  return most;
}

const fb::OperationT* Producer(const fb::ModuleT& module, uint32_t value) {
  for (const auto& op : module.ops) {
    for (uint32_t r : op->results) {
      if (r == value) return op.get();
    }
  }
  return nullptr;
}

StatusOr<GemmReport> DescribeMatMul(const fb::ModuleT& module,
                                    const fb::OperationT& op,
                                    const kernels::CostModel& model) {
  const std::string where =
      "op " + std::to_string(op.id) + " (" + op.name + ")";
  const fb::ValueT* a = FindValue(module, op.operands[0]);
  const fb::ValueT* b = FindValue(module, op.operands[1]);
  const fb::ValueT* c = FindValue(module, op.results[0]);
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Gemm || !a || !b || !c) {
    return Status::BadInput(where + " has no gemm recipe: run plan-ownership first");
  }
  GemmReport g;
  g.op = op.id;
  g.name = op.name;
  g.M = a->shape[0];
  g.K = a->shape[1];
  g.N = b->shape[1];
  g.inputs = a->dtype;
  g.result = c->dtype;
  g.m = op.recipe->m_split;
  g.k = op.recipe->k_split;
  g.n = op.recipe->n_split;
  g.recipe = ir::RecipeText(*op.recipe);
  g.estimate = op.estimate ? op.estimate->cycles : 0;
  const plan::GemmShapeDTypes shape{g.M, g.K, g.N, g.inputs, g.result};
  StatusOr<plan::GemmBound> own = plan::BoundOfGrid(model, shape, g.m, g.k, g.n);
  if (!own.ok()) return own.status().WithContext(where);
  g.own_bound = *own;
  const fb::TargetT& t = model.target();
  const std::vector<plan::GemmBound> all = plan::GridBounds(
      model, shape, t.tiles, ir::MaxTileTensorBytes(t));
  g.best_bound = all.empty() ? *own : all.front();
  return g;
}

// Q·Kᵀ reads qkv [B*T, 3*H*D]; P·V reads the probabilities [B,H,T,T] and
// qkv (docs/planning.md, "Attention").
StatusOr<GemmReport> DescribeAttention(const fb::ModuleT& module,
                                       const fb::OperationT& op,
                                       const kernels::CostModel& model) {
  const std::string where =
      "op " + std::to_string(op.id) + " (" + op.name + ")";
  const bool scores = op.kind == fb::OpKind::AttentionScores;
  // Self scores stage operand 0 (qkv); cross scores and context operand 1.
  const size_t staged = scores && op.operands.size() == 1 ? 0 : 1;
  if (op.operands.size() != staged + 1 || op.results.empty()) {
    return Status::BadInput(where + " has the wrong operand count");
  }
  const fb::ValueT* qkv = FindValue(module, op.operands[staged]);
  const fb::ValueT* probs = scores ? nullptr : FindValue(module, op.operands[0]);
  const fb::ValueT* c = FindValue(module, op.results[0]);
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Attention || !qkv ||
      !c || (!scores && !probs)) {
    return Status::BadInput(where +
                            " has no attention recipe: run plan-ownership first");
  }
  StatusOr<passes::AttentionGrid> grid = passes::MakeAttentionGrid(
      scores ? passes::AttentionPart::kScores
             : passes::AttentionPart::kContext,
      qkv->shape, scores ? c->shape : probs->shape, op.heads, op.head_dim,
      op.recipe->m_split, op.recipe->n_split,
      op.recipe->layout ? op.recipe->layout->first_tile : 0, op.first_image);
  if (!grid.ok()) return grid.status().WithContext(where);
  GemmReport g;
  g.op = op.id;
  g.name = op.name;
  g.kind = op.kind;
  g.heads = grid->B * grid->H;
  g.M = grid->Tq;
  g.K = grid->Inner();
  g.N = grid->cols.extent;
  const plan::AttentionDTypes dtypes{qkv->dtype,
                                     scores ? qkv->dtype : probs->dtype,
                                     c->dtype};
  g.inputs = scores ? qkv->dtype : probs->dtype;
  g.result = c->dtype;
  g.m = grid->m;
  g.n = grid->n;
  g.recipe = ir::RecipeText(*op.recipe);
  g.estimate = op.estimate ? op.estimate->cycles : 0;
  if (!scores) {
    const fb::OperationT* p = Producer(module, probs->id);
    if (p && p->kind == fb::OpKind::Redistribute) {
      g.deliveries.push_back(p->id);
      g.delivery_estimate = p->estimate ? p->estimate->cycles : 0;
      g.estimate += g.delivery_estimate;
    }
  }
  StatusOr<plan::GemmBound> own =
      plan::AttentionBoundOfGrid(model, *grid, dtypes);
  if (!own.ok()) return own.status().WithContext(where);
  g.own_bound = *own;
  const fb::TargetT& t = model.target();
  const std::vector<plan::GemmBound> all = plan::AttentionGridBounds(
      model, *grid, dtypes, t.tiles, ir::MaxTileTensorBytes(t));
  g.best_bound = all.empty() ? *own : all.front();
  return g;
}

void AddSimulation(const fb::ModuleT& module, const sim::SimResult& timing,
                   GemmReport* g) {
  g->simulated = 0;
  for (const sim::OpReport& r : timing.ops) {
    if (r.op == g->op) {
      g->simulated_compute = r.compute_cycles;
      g->simulated_exchange = r.exchange_cycles;
      g->simulated += r.compute_cycles + r.exchange_cycles;
    } else if (std::find(g->deliveries.begin(), g->deliveries.end(), r.op) !=
               g->deliveries.end()) {
      g->delivery_simulated += r.compute_cycles + r.exchange_cycles;
      g->simulated += r.compute_cycles + r.exchange_cycles;
    }
  }
  // The simulator sums every run of a repeated op.
  g->simulated /= g->runs;
  g->simulated_compute /= g->runs;
  g->simulated_exchange /= g->runs;
  g->delivery_simulated /= g->runs;
  const int rate = AmpMacsPerCycle(*module.target, g->inputs);
  if (g->simulated > 0 && rate > 0) {
    g->amp_fraction = static_cast<double>(g->heads * g->M * g->K * g->N) /
                      (static_cast<double>(module.target->tiles) * rate *
                       static_cast<double>(g->simulated));
  }
}

std::string Ratio(int64_t a, int64_t b) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", b > 0 ? static_cast<double>(a) / b : 0.0);
  return text;
}

std::string BoundText(const plan::GemmBound& b, bool attention) {
  const std::string grid =
      attention ? "m" + std::to_string(b.m) + " n" + std::to_string(b.n)
                : "m" + std::to_string(b.m) + " k" + std::to_string(b.k) +
                      " n" + std::to_string(b.n);
  if (attention) {
    return Thousands(b.Cycles()) + " with " + grid + " (kernel " +
           Thousands(b.kernel) + ", delivery " + Thousands(b.delivery) + ")";
  }
  return Thousands(b.Cycles()) + " with " + grid + " (kernel " +
         Thousands(b.kernel) + ", delivery " + Thousands(b.delivery) +
         ", partials " + Thousands(b.partials) + ", reduce " +
         Thousands(b.reduce) + ")";
}

}  // namespace

StatusOr<std::vector<GemmReport>> InspectGemms(const fb::ModuleT& module,
                                               int threads) {
  if (!module.target) return Status::BadInput("module has no target");
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(*module.target);
  if (!model.ok()) return model.status();
  std::vector<GemmReport> gemms;
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(module);
  if (!bodies.ok()) return bodies.status();
  for (size_t r = 0; r < module.ops.size(); ++r) {
    const auto& op = module.ops[r];
    const bool attention = op->kind == fb::OpKind::AttentionScores ||
                           op->kind == fb::OpKind::AttentionContext;
    if (op->kind != fb::OpKind::MatMul && !attention) continue;
    StatusOr<GemmReport> g = attention ? DescribeAttention(module, *op, *model)
                                       : DescribeMatMul(module, *op, *model);
    if (!g.ok()) return g.status();
    for (const ir::RepeatBody& body : *bodies) {
      if (body.Contains(r)) g->runs = static_cast<int>(body.repeat->count);
    }
    gemms.push_back(std::move(*g));
  }
  if (!module.program || gemms.empty()) return gemms;
  // Simulate verifies the program before it times it.
  sim::SimOptions timing;
  timing.execute = false;
  timing.threads = threads;
  sim::SimResult result;
  TILEC_RETURN_IF_ERROR(sim::Simulate(module, {}, timing, &result));
  const std::map<uint32_t, int64_t> calls = CallsPerTile(*module.program);
  for (GemmReport& g : gemms) {
    AddSimulation(module, result, &g);
    auto it = calls.find(g.op);
    g.calls_per_tile = it == calls.end() ? 0 : it->second;
  }
  return gemms;
}

std::string GemmReportText(const std::vector<GemmReport>& gemms) {
  std::string out;
  int64_t simulated = 0, bound = 0;
  for (const GemmReport& g : gemms) {
    out += "op " + std::to_string(g.op) + " " + g.name + ": ";
    if (g.kind != fb::OpKind::MatMul) {
      out += std::to_string(g.heads) + " x ";
    }
    out += "[" + std::to_string(g.M) + "," + std::to_string(g.K) + "] x [" +
           std::to_string(g.K) + "," + std::to_string(g.N) + "] " +
           ir::DTypeText(g.inputs) + " -> " + ir::DTypeText(g.result) + ", " +
           Thousands(g.heads * g.M * g.K * g.N) + " MACs";
    if (g.kind != fb::OpKind::MatMul) {
      out += std::string(" (") + ir::OpKindText(g.kind) + ", per batch and head)";
    }
    out += "\n";
    out += "  plan: " + g.recipe;
    if (g.calls_per_tile > 0) {
      out += ", " + std::to_string(g.calls_per_tile) + " GEMM call" +
             (g.calls_per_tile == 1 ? "" : "s") + " per tile at most";
    }
    if (g.runs > 1) {
      out += "\n  runs " + std::to_string(g.runs) +
             " times (a repeat's body): cycles below are per run";
    }
    out += "\n  cycles: estimate " + Thousands(g.estimate);
    if (g.simulated >= 0) {
      char peak[16];
      std::snprintf(peak, sizeof peak, "%.1f", 100 * g.amp_fraction);
      out += ", simulated " + Thousands(g.simulated) + " (compute " +
             Thousands(g.simulated_compute) + ", exchange " +
             Thousands(g.simulated_exchange) + ")";
      if (!g.deliveries.empty()) {
        out += " + " + Thousands(g.delivery_simulated) +
               " delivering its probabilities (op";
        for (uint32_t d : g.deliveries) out += " " + std::to_string(d);
        out += ")";
      }
      out += ", " + std::string(peak) + "% of the AMP peak";
    } else if (!g.deliveries.empty()) {
      out += " (with " + Thousands(g.delivery_estimate) +
             " delivering its probabilities)";
    }
    const bool attention = g.kind != fb::OpKind::MatMul;
    out += "\n  bound of this grid: " + BoundText(g.own_bound, attention) + "\n";
    out += "  best bound: " + BoundText(g.best_bound, attention);
    const int64_t measured = g.simulated >= 0 ? g.simulated : g.estimate;
    out += "; " + std::string(g.simulated >= 0 ? "simulated" : "estimate") +
           " / best bound " + Ratio(measured, g.best_bound.Cycles()) + "\n";
    simulated += g.runs * measured;
    bound += g.runs * g.best_bound.Cycles();
  }
  out += "total: " + Thousands(simulated) + " cycles in " +
         std::to_string(gemms.size()) + " GEMMs, best bounds " +
         Thousands(bound) + " (ratio " + Ratio(simulated, bound) + ")\n";
  return out;
}

}  // namespace tilec::inspect
