#ifndef TILEC_KERNELS_KERNEL_NAMES_H_
#define TILEC_KERNELS_KERNEL_NAMES_H_

// The names of the device kernels: what a device program's Compute entry
// names, what the registry (kernels/registry.cc) runs and charges, and what
// the lowering emits. Defined once here; every use names the constant. The
// formulas they are charged with are named in formats/target.h
// (ir::formula, the target data's keys), re-exported as kernels::formula.
//
// A new kernel: its own file (kernels.h declares it), a name here, one
// entry in the registry table, and its formula in formats/targets/*.json
// (a new formula also gets its name in ir::formula).

#include <string_view>

#include "formats/target.h"

namespace tilec::kernels {

namespace formula = ir::formula;

namespace names {
inline constexpr std::string_view kGemm = "gemm";
inline constexpr std::string_view kGemmNt = "gemm_nt";
inline constexpr std::string_view kReducePartials = "reduce_partials";
inline constexpr std::string_view kAdd = "add";
inline constexpr std::string_view kBiasAdd = "bias_add";
inline constexpr std::string_view kGelu = "gelu";
inline constexpr std::string_view kBiasGelu = "bias_gelu";
inline constexpr std::string_view kCast = "cast";
inline constexpr std::string_view kLayerNorm = "layernorm";
inline constexpr std::string_view kLnMoments = "ln_moments";
inline constexpr std::string_view kMomentsCombine = "moments_combine";
inline constexpr std::string_view kNormalize = "normalize";
inline constexpr std::string_view kResidualMoments = "residual_moments";
inline constexpr std::string_view kSoftmax = "softmax";
inline constexpr std::string_view kSoftmaxState = "softmax_state";
inline constexpr std::string_view kSoftmaxCombine = "softmax_combine";
inline constexpr std::string_view kSoftmaxNormalize = "softmax_normalize";
inline constexpr std::string_view kCopy = "copy";
inline constexpr std::string_view kUnary = "unary";
inline constexpr std::string_view kBinary = "binary";
inline constexpr std::string_view kBinaryRow = "binary_row";
inline constexpr std::string_view kBinaryCol = "binary_col";
inline constexpr std::string_view kScale = "scale";
}  // namespace names

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_KERNEL_NAMES_H_
