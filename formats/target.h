#ifndef TILEC_FORMATS_TARGET_H_
#define TILEC_FORMATS_TARGET_H_

// The one validator of a target description (formats/tilec.fbs, table
// Target). ir::LoadTarget runs it on every target a tool loads (a preset,
// --target=FILE.json, import-model's included) and ir::VerifyModule on the
// target every module carries, so no later tool meets a target that an
// earlier one accepted and it rejects.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

// Bounds on a target's sizes: far beyond any tile machine tilec models
// (IPU21: 1,472 tiles of 624 KiB), small enough that a tool may allocate
// per tile and per byte of one tile's memory.
inline constexpr int64_t kMaxTargetTiles = int64_t{1} << 16;
inline constexpr int64_t kMaxTileSramBytes = int64_t{64} << 20;
// Exchange schedules count cycles in 32 bits: under these, a phase of the
// 4,096 packets the planner schedules exactly stays far below 2^31 even
// with every packet in a row (ipu21: 2, 4,148 and 52 + 2 per row).
inline constexpr int64_t kMaxExchangeFragmentCycles = int64_t{1} << 12;
inline constexpr int64_t kMaxExchangePacketWords = int64_t{1} << 18;
inline constexpr int64_t kMaxRouteLatencyCycles = int64_t{1} << 18;

// The variable names a kernel formula may use: M, K, N, n, rows, w, P, B.
std::span<const std::string_view> FormulaVariables();

// The names of the kernel formulas (docs/machine.md), the keys of a
// target's "kernels" table: defined here once, since the target data is
// formats'.
// kernels/kernel_names.h names the device kernels that are charged with them
// (kernels/registry.h: which kernel uses which formula).
namespace formula {
inline constexpr std::string_view kGemmFp8 = "gemm_fp8";
inline constexpr std::string_view kGemmF16 = "gemm_f16";
inline constexpr std::string_view kGemmF32 = "gemm_f32";
inline constexpr std::string_view kReducePartials = "reduce_partials";
inline constexpr std::string_view kAdd = "add";
inline constexpr std::string_view kGelu = "gelu";
inline constexpr std::string_view kBiasGelu = "bias_gelu";
inline constexpr std::string_view kBiasGeluFp8 = "bias_gelu_fp8";
inline constexpr std::string_view kCast = "cast";
inline constexpr std::string_view kLayerNorm = "layernorm";
inline constexpr std::string_view kLayerNormFp8 = "layernorm_fp8";
inline constexpr std::string_view kLnMoments = "ln_moments";
inline constexpr std::string_view kResidualMoments = "residual_moments";
inline constexpr std::string_view kMomentsCombine = "moments_combine";
inline constexpr std::string_view kNormalize = "normalize";
inline constexpr std::string_view kNormalizeFp8 = "normalize_fp8";
inline constexpr std::string_view kSoftmax = "softmax";
inline constexpr std::string_view kSoftmaxFp8 = "softmax_fp8";
inline constexpr std::string_view kCopy = "copy";
}  // namespace formula

// Every kernel formula above; a target must define all of them (the
// registry charges each, kernels_test checks).
std::span<const std::string_view> RequiredKernels();

// Checks a target: every number that is a size, rate or count is positive,
// overheads (base cycles, sync, fragment, copy call, latencies, code bytes)
// are not negative, reserved_bytes is 0 (schema 3 sizes code per program),
// the standard memory elements fit in sram_bytes and the runtime code in
// them, tiles and sram_bytes are within the bounds above,
// alignment is a power of two, every formula is well formed (known
// variables, positive divisors, non-negative coefficients, positive
// multipliers, unique kernel names) and every kernel in RequiredKernels() is
// present. Returns Ok when the target is fine, otherwise BadInput with one
// message listing every problem found ("; "-separated).
// `require_kernels` = false skips the last rule: a module written before a
// kernel was added still reads (and prints); costing it fails later, naming
// the missing formula.
Status ValidateTarget(const fb::TargetT& target, bool require_kernels = true);

// Code lives in whole standard elements from address 0 (runtime, the
// program's own code, exchange tables: docs/device-program.md, "Memory");
// `code_bytes` rounded up to whole elements is where a tile's tensors start.
int64_t CodeRegionBytes(const fb::TargetT& target, int64_t code_bytes);

// The most tensor memory a tile can have: sram_bytes less the runtime's
// whole elements, before any program code or exchange table. A program's
// tiles have less (DeviceProgram.code); the planner budgets for its own.
int64_t MaxTileTensorBytes(const fb::TargetT& target);

// Tensor memory of all tiles at most: tiles * MaxTileTensorBytes, of a
// validated target.
int64_t TargetTensorBytes(const fb::TargetT& target);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_TARGET_H_
