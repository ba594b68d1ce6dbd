#ifndef TILEC_KERNELS_FB_DTYPE_H_
#define TILEC_KERNELS_FB_DTYPE_H_

// The one mapping from the IR's dtype enum to the kernels' DType.

#include <string>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/numerics.h"

namespace tilec::kernels {

// An error for a value outside the enum (the IR verifier rejects those).
inline StatusOr<DType> DTypeFromFb(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32:
      return DType::kF32;
    case fb::DType::F16:
      return DType::kF16;
    case fb::DType::BF16:
      return DType::kBF16;
    case fb::DType::FP8E4M3:
      return DType::kFp8E4M3;
    case fb::DType::FP8E5M2:
      return DType::kFp8E5M2;
  }
  return Status::BadInput("unknown IR dtype " +
                          std::to_string(static_cast<int>(dtype)));
}

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_FB_DTYPE_H_
