#include "passes/quantize/support.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "formats/print.h"
#include "kernels/kernel_names.h"
#include "passes/core/decisions.h"
#include "passes/plan/graph.h"
#include "passes/plan/search.h"
#include "sim/inputs.h"

namespace tilec::quantize {

using passes::Thousands;

fb::ValueT* FindValue(const fb::ModuleT& module, uint32_t id) {
  for (auto& v : module.values) {
    if (v->id == id) return v.get();
  }
  return nullptr;
}

int ProducerIndex(const fb::ModuleT& module, uint32_t id) {
  for (size_t i = 0; i < module.ops.size(); ++i) {
    const auto& r = module.ops[i]->results;
    if (std::find(r.begin(), r.end(), id) != r.end()) return static_cast<int>(i);
  }
  return -1;
}

std::vector<std::pair<int, int>> Uses(const fb::ModuleT& module, uint32_t id) {
  std::vector<std::pair<int, int>> uses;
  for (size_t i = 0; i < module.ops.size(); ++i) {
    const auto& ops = module.ops[i]->operands;
    for (size_t s = 0; s < ops.size(); ++s) {
      if (ops[s] == id) uses.emplace_back(static_cast<int>(i), static_cast<int>(s));
    }
  }
  return uses;
}

std::string ValueLabel(const fb::ValueT& v) {
  return "%" + std::to_string(v.id) + " " + v.name;
}

std::string OpLabel(const fb::OperationT& op) {
  return "op " + std::to_string(op.id) + " (" + op.name + ")";
}

std::string Fraction(double f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g%%", f * 100);
  return buf;
}

std::string StatsText(const fb::ValueT& v) {
  return ir::DTypeText(v.dtype, v.fp8_scale_exp) + " (amax " +
         ir::NumberText(v.fp8_amax) + ", saturated " +
         Fraction(v.fp8_saturated) + ", flushed " + Fraction(v.fp8_flushed) +
         ")";
}

void MarkQuantized(fb::ValueT* v, fb::DType dtype, int scale_exp,
                   const MagnitudeHistogram& magnitudes) {
  const QuantStats stats = magnitudes.Measure(FormatOf(dtype), scale_exp);
  v->unquantized_dtype = v->dtype;
  v->fp8_quantized = true;
  v->dtype = dtype;
  v->fp8_scale_exp = scale_exp;
  v->fp8_amax = stats.amax;
  v->fp8_saturated = static_cast<float>(stats.saturated);
  v->fp8_flushed = static_cast<float>(stats.flushed);
}

std::string Fp8OutputKernel(const fb::OperationT& op) {
  switch (op.kind) {
    case fb::OpKind::LayerNorm:
      return std::string(kernels::formula::kLayerNormFp8);
    case fb::OpKind::Normalize:
      return std::string(kernels::formula::kNormalizeFp8);
    case fb::OpKind::Softmax:
      return std::string(kernels::formula::kSoftmaxFp8);
    case fb::OpKind::Fused: {
      const auto& body = op.body;
      const size_t n = body.size();
      if (n >= 2 && body[n - 2]->kind == fb::FusedStepKind::BiasAdd &&
          body[n - 1]->kind == fb::FusedStepKind::Gelu) {
        return std::string(kernels::formula::kBiasGeluFp8);
      }
      return "";
    }
    default:
      return "";
  }
}

StatusOr<Priced> PriceByPlanning(const fb::ModuleT& module,
                                 const plan::Coster& base, bool repair,
                                 bool keep_plan) {
  StatusOr<plan::Graph> graph = plan::Graph::Build(module);
  if (!graph.ok()) return graph.status();
  const plan::Coster coster = base.ForAnotherGraph();
  plan::SearchOptions options;
  // Repair runs only where the greedy plan does not fit.
  options.repair = repair;
  // The greedy plan on one thread: with --threads=2 the pass prices two
  // trials at once (TrialPrices), which keeps both cores busy, and greedy
  // plans on two threads each only crowded them; memory repair's trials,
  // minutes of a trial at batch 8, stay on two (docs/quantize.md). A
  // repaired trial's greedy plan is on two as well: once the pass decides,
  // no other trial is priced beside it (TrialPrices::PriceAhead).
  options.greedy_on_threads = repair;
  plan::Search search(*graph, coster, options);
  Priced p;
  Status s = search.Initialize();
  if (s.code() == StatusCode::kInfeasible) {
    p.why = s.message();
    p.peak = search.closest_peak_bytes();
    p.excess = search.closest().Excess();
    return p;
  }
  TILEC_RETURN_IF_ERROR(s);
  p.feasible = true;
  p.repaired = search.repaired();
  p.cycles = search.evaluation().total_cycles;
  p.peak = search.evaluation().peak_bytes;
  if (!keep_plan) return p;
  auto initial = std::make_shared<plan::InitialPlan>();
  initial->state = search.Checkpoint();
  for (const auto& d : search.decisions()) {
    initial->decisions.push_back(std::make_unique<fb::DecisionT>(*d));
  }
  p.initial_plan = std::move(initial);
  return p;
}

bool NearerToFitting(const Priced& after, const Priced& before) {
  return !after.feasible && !before.feasible && after.peak > 0 &&
         std::pair(after.excess, after.peak) <
             std::pair(before.excess, before.peak);
}

std::string NearerText(const Priced& after, const Priced& before) {
  auto closest = [](const Priced& p) {
    return Thousands(p.excess) + " B over capacity summed over its steps "
           "(peak " + Thousands(p.peak) + " B per tile)";
  };
  return "the closest plan from " + closest(before) + " to " + closest(after);
}

std::string PricedText(const Priced& p) {
  if (!p.feasible) return "does not fit (" + p.why + ")";
  return Thousands(p.cycles) + " cycles, peak " + Thousands(p.peak) +
         " B per tile" + (p.repaired ? " after memory repair" : "");
}

Status CheckCalibration(const fb::ModuleT& module, const std::string& dir,
                        const std::map<uint32_t, std::vector<float>>& inputs) {
  for (const auto& v : module.values) {
    if (v->role != fb::ValueRole::Input) continue;
    auto it = inputs.find(v->id);
    if (it == inputs.end()) continue;
    const std::string file = dir + "/" + kernels::InputFileName(*v);
    const std::vector<float>& data = it->second;
    bool nonzero = false;
    for (size_t i = 0; i < data.size(); ++i) {
      if (!std::isfinite(data[i])) {
        return Status::BadInput(
            file + ": element " + std::to_string(i) + " of " + ValueLabel(*v) +
            " is " + (std::isnan(data[i]) ? "NaN" : "infinite") +
            " (in its dtype): calibration needs finite inputs");
      }
      nonzero = nonzero || data[i] != 0;
    }
    if (!nonzero) {
      return Status::BadInput(file + ": every element of " + ValueLabel(*v) +
                              " is zero: an all-zero input calibrates no scale");
    }
  }
  return Status::Ok();
}

}  // namespace tilec::quantize
