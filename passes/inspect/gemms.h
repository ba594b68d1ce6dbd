// inspect-gemms: every GEMM of a planned module or device program beside
// the best the target's formulas allow (passes/plan/gemm_bound.h): its
// grid and staging, calls per tile, estimated and (for a program)
// simulated cycles, % of the AMP peak, the bound of its own grid and the
// best bound over all grids that fit memory, and simulated / bound.
// GEMMs are the MatMuls and the attention ops (Q·Kᵀ attention_scores, P·V
// attention_context, per batch and head). The context's bound counts the
// delivery of its probability rows, which the plan makes in a
// Redistribute op of its own: its cycles are counted with the context's.

#ifndef TILEC_PASSES_INSPECT_GEMMS_H_
#define TILEC_PASSES_INSPECT_GEMMS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/plan/gemm_bound.h"

namespace tilec::inspect {

struct GemmReport {
  uint32_t op = 0;
  std::string name;
  fb::OpKind kind = fb::OpKind::MatMul;
  int64_t heads = 1;  // attention: batch x heads products of [M,K] x [K,N]
  int64_t M = 0, K = 0, N = 0;
  fb::DType inputs = fb::DType::F16, result = fb::DType::F16;
  int m = 1, k = 1, n = 1;
  std::string recipe;     // the recipe's text
  int64_t calls_per_tile = 0;  // the most GEMM calls on one tile (program)
  int64_t estimate = 0;        // plan-ownership's estimate
  // A repeat's body runs `runs` times (docs/repeat.md): every figure here
  // is per run; the total counts every run.
  int runs = 1;
  int64_t simulated = -1;      // compute + exchange attributed; -1: no program
  int64_t simulated_compute = 0, simulated_exchange = 0;
  // Redistribute ops that deliver an operand the bound counts (the
  // context's probabilities): their ids, estimate and simulated cycles,
  // included in `estimate` and `simulated`.
  std::vector<uint32_t> deliveries;
  int64_t delivery_estimate = 0, delivery_simulated = 0;
  plan::GemmBound own_bound;   // the bound of the chosen grid
  plan::GemmBound best_bound;  // the best grid's
  double amp_fraction = 0;     // MACs / (tiles * AMP rate * cycles)
};

// The GEMMs in program order. A module without a device program reports
// estimates only. Errors: BadInput for a module without a target or a
// planned GEMM.
StatusOr<std::vector<GemmReport>> InspectGemms(const fb::ModuleT& module,
                                               int threads = 2);

// One block of lines per GEMM and a total, stable for goldens.
std::string GemmReportText(const std::vector<GemmReport>& gemms);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_GEMMS_H_
