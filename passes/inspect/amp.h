// The AMP rate a GEMM runs at on the target: multiply-accumulates per
// tile-cycle for its left operand's dtype (docs/machine.md: FP8 128, F16
// 64, F32 16 on ipu21), what "% of AMP peak" is measured against.

#ifndef TILEC_PASSES_INSPECT_AMP_H_
#define TILEC_PASSES_INSPECT_AMP_H_

#include "formats/tilec_generated.h"

namespace tilec::inspect {

inline int AmpMacsPerCycle(const fb::TargetT& target, fb::DType a) {
  switch (a) {
    case fb::DType::FP8E4M3:
    case fb::DType::FP8E5M2:
      return target.amp_macs_fp8;
    case fb::DType::F16:
    case fb::DType::BF16:
      return target.amp_macs_f16;
    case fb::DType::F32:
      break;
  }
  return target.amp_macs_f32;
}

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_AMP_H_
