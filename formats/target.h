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

#include "formats/tilec_generated.h"

namespace tilec::ir {

// Bounds on a target's sizes: far beyond any tile machine tilec models
// (IPU21: 1,472 tiles of 624 KiB), small enough that a tool may allocate
// per tile and per byte of one tile's memory.
inline constexpr int64_t kMaxTargetTiles = int64_t{1} << 16;
inline constexpr int64_t kMaxTileSramBytes = int64_t{64} << 20;

// The variable names a kernel formula may use: M, K, N, n, rows, w, P, B.
std::span<const std::string_view> FormulaVariables();

// Every kernel formula the compiler and the simulator use; a target must
// define all of them.
std::span<const std::string_view> RequiredKernels();

// Checks a target: every number that is a size, rate or count is positive,
// overheads (base cycles, sync, fragment, copy call, reserved bytes) are not
// negative, reserved_bytes < sram_bytes, the standard memory elements fit in
// the tensor memory, tiles and sram_bytes are within the bounds above,
// alignment is a power of two, every formula is well formed (known
// variables, positive divisors, non-negative coefficients, positive
// multipliers, unique kernel names) and every kernel in RequiredKernels() is
// present. Returns "" when the target is fine, otherwise one message listing
// every problem found ("; "-separated).
// `require_kernels` = false skips the last rule: a module written before a
// kernel was added still reads (and prints); costing it fails later, naming
// the missing formula.
std::string ValidateTarget(const fb::TargetT& target,
                           bool require_kernels = true);

// Tensor memory of all tiles: tiles * (sram_bytes - reserved_bytes), of a
// validated target.
int64_t TargetTensorBytes(const fb::TargetT& target);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_TARGET_H_
