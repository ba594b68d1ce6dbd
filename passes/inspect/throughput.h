// Throughput of a compiled program: cycles per image, images per second at
// the target's clock, and the fraction of the chip's FP8 peak its GEMMs'
// useful work fills (docs/report.md, "Throughput").

#ifndef TILEC_PASSES_INSPECT_THROUGHPUT_H_
#define TILEC_PASSES_INSPECT_THROUGHPUT_H_

#include <cstdint>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::inspect {

// The multiply-accumulates of the graph's GEMMs, from its ops' shapes:
// MatMul a [M,K] x b [K,N]: M*K*N; attention scores [B,H,Tq,Tk] and
// context from probabilities [B,H,Tq,Tk]: B*H*Tq*Tk*head_dim. An op in a
// repeat's body counts once per iteration. What the program computes
// beyond that (padding, duplicated work) is not useful work. BadInput
// (naming the op) for a GEMM whose operands are missing or whose count
// overflows.
StatusOr<int64_t> GraphGemmMacs(const fb::ModuleT& module);

struct Throughput {
  // Images per run: the batch import recorded (Model.batch, import-model's
  // and import-onnx's --batch); 0 when the module does not record one,
  // and then the per-image figures are 0 too.
  int64_t batch = 0;
  int64_t cycles = 0;     // simulated cycles of one run
  int64_t gemm_macs = 0;  // GraphGemmMacs
  double cycles_per_image = 0;   // cycles / batch
  double images_per_second = 0;  // clock_hz / cycles_per_image
  // Every tile's AMP at its FP8 rate (tiles x amp_macs_fp8): the chip's
  // peak, what the fraction is measured against whatever the GEMMs' dtypes.
  int64_t fp8_peak_macs_per_cycle = 0;
  double fp8_peak_fraction = 0;  // gemm_macs / (cycles x the peak)
};

// The figures of a run of `cycles` simulated cycles of `module` (which has
// a target).
StatusOr<Throughput> ThroughputOf(const fb::ModuleT& module, int64_t cycles);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_THROUGHPUT_H_
