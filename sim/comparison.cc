// Simulated outputs against the reference: default tolerances and the
// comparison of two tensors (docs/device-program.md, "Comparing with the
// reference").

#include <algorithm>
#include <cmath>

#include "formats/basics.h"
#include "sim/simulator.h"

namespace tilec::sim {

Tolerance DefaultTolerance(bool graph_has_fp8) {
  // See docs/device-program.md, "Comparing with the reference".
  if (graph_has_fp8) return Tolerance{0.1, 0.1, 0.99};
  return Tolerance{2e-2, 1e-2, 0.9999};
}

bool ModuleHasFp8(const fb::ModuleT& module) {
  for (const auto& v : module.values) {
    if (v && ir::IsFp8(v->dtype)) return true;
  }
  for (const auto& op : module.ops) {
    if (!op) continue;
    for (const auto& step : op->body) {
      if (step && step->kind == fb::FusedStepKind::Cast &&
          ir::IsFp8(step->dtype)) {
        return true;
      }
    }
  }
  if (module.program) {
    for (const auto& b : module.program->buffers) {
      if (b && ir::IsFp8(b->dtype)) return true;
    }
  }
  return false;
}

Comparison CompareTensors(std::span<const float> sim,
                          std::span<const float> ref, const Tolerance& tol) {
  Comparison c;
  c.elements = static_cast<int64_t>(ref.size());
  if (sim.size() != ref.size()) {
    c.pass = false;
    c.mismatches = static_cast<int64_t>(std::max(sim.size(), ref.size()));
    return c;
  }
  double scale = 0;
  for (float r : ref) {
    if (std::isfinite(r)) scale = std::max(scale, std::fabs(double{r}));
  }
  c.scale = scale;
  const double floor = std::max(kRelativeFloor * scale, 1e-30);
  double dot = 0, ss = 0, rr = 0;
  bool worst_nonfinite = false;
  int64_t disagreeing_nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double s = sim[i], r = ref[i];
    if (!std::isfinite(s) || !std::isfinite(r)) {
      // Identical non-finite values (the same infinity, or NaN for NaN)
      // agree but still fail (below) unless tol.allow_nonfinite: an output
      // that is not a number is no pass because the reference holds the
      // same. Anything else is a mismatch that no tolerance excuses.
      ++c.nonfinite;
      if ((std::isnan(s) && std::isnan(r)) || s == r) continue;
      ++disagreeing_nonfinite;
      ++c.mismatches;
      if (!worst_nonfinite) {
        worst_nonfinite = true;
        c.worst_index = static_cast<int64_t>(i);
        c.worst_sim = sim[i];
        c.worst_ref = ref[i];
      }
      continue;
    }
    const double err = std::fabs(s - r);
    if (!worst_nonfinite && (c.worst_index < 0 || err > c.max_abs_err)) {
      c.worst_index = static_cast<int64_t>(i);
      c.worst_sim = sim[i];
      c.worst_ref = ref[i];
    }
    c.max_abs_err = std::max(c.max_abs_err, err);
    c.max_rel_err = std::max(c.max_rel_err, err / std::max(std::fabs(r), floor));
    if (err > tol.atol * scale + tol.rtol * std::fabs(r)) ++c.mismatches;
    dot += s * r;
    ss += s * s;
    rr += r * r;
  }
  if (worst_nonfinite) {
    c.max_abs_err = INFINITY;
    c.max_rel_err = INFINITY;
  }
  const int64_t failing_nonfinite =
      tol.allow_nonfinite ? disagreeing_nonfinite : c.nonfinite;
  if (failing_nonfinite == c.elements && c.elements > 0) {
    c.cosine = 0;  // nothing finite on both sides agrees
  } else if (ss == 0 && rr == 0) {
    c.cosine = 1;
  } else if (ss == 0 || rr == 0) {
    c.cosine = 0;
  } else {
    c.cosine = dot / (std::sqrt(ss) * std::sqrt(rr));
  }
  c.pass = c.mismatches == 0 && (c.nonfinite == 0 || tol.allow_nonfinite) &&
           c.cosine >= tol.min_cosine;
  return c;
}

}  // namespace tilec::sim
