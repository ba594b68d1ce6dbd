// The kernel registry: the one entry point through which the device
// simulator runs tile kernels and counts their cycles. A device program's
// Compute entry names a kernel and gives its operands (args, buffer slices),
// integer params and float fparams; this file fixes what each position means.
//
// Calls are checked before anything runs: the number of args, params and
// fparams, params' ranges, operand dtypes, and that every operand holds the
// bytes its shape needs. Errors name the kernel and what is wrong.
//
// Layouts (args are operands, inputs first and outputs last; "..." is one
// or more; shapes are row-major; moments are F32 [rows] x {count, mean, M2}):
//
// kernel            args                           params              fparams
// ----------------  -----------------------------  ------------------  -------
// gemm              A[M,K] B[K,N] C[M,N]           M K N accumulate    -
// gemm_nt           A[M,K] B[N,K] C[M,N]           M K N accumulate    scale
// reduce_partials   partial[n]... out[n]           n                   -
// add               a[rows,w] b[rows,w] out        rows w              -
// bias_add          x[rows,w] bias[w] out          rows w              -
// gelu              x[rows,w] out                  rows w form         -
// bias_gelu         x[rows,w] bias[w] out          rows w form         -
// cast              in[rows,w] out                 rows w              -
// layernorm         x[rows,w] gamma[w] beta[w] out rows w              eps
// ln_moments        x[rows,w] moments              rows w              -
// moments_combine   moments... out                 rows                -
// normalize         x[rows,w] moments gamma[w]     rows w              eps
//                   beta[w] out
// residual_moments  a[rows,w] b[rows,w] sum        rows w              -
//                   moments
// softmax           x[rows,w] out                  rows w              scale
// copy              src dst                        bytes               -
// unary             x[rows,w] out                  rows w fn           -
// binary            x[rows,w] y[rows,w] out        rows w fn           -
//                                                  operand_first
// binary_row        x[rows,w] row[w] out           rows w fn           -
//                                                  operand_first
// binary_col        x[rows,w] col[rows] out        rows w fn           -
//                                                  operand_first
// scale             x[rows,w] out                  rows w              scale
//
// Params: M K N are GEMM rows, depth and columns on this tile; accumulate is
// 0 (C = A*B) or 1 (C += A*B, K-split partials); n is elements per partial;
// rows and w are the row count and row width of the tile's block (for
// moments and normalize, w is the width of the tile's column slice); form is
// 0 tanh, 1 erf, 2 quick (fb::GeluForm); fn is an fb::ElementwiseFn (unary
// kernels take Sqrt..Relu, binary ones Add..Pow) and operand_first 1 puts
// the second input on the left (y - x); bytes is the copy length. Fparams:
// eps is LayerNorm's epsilon, scale multiplies softmax's input (scale:
// the whole output). Output
// dtypes pick the variant: out FP8 means FP8 output with out's scale.
// Details of each kernel's math are in kernels.h.
//
// Cycle formulas (target kernel names) and their variables:
//   gemm, gemm_nt: gemm_fp8 / gemm_f16 / gemm_f32 by A's dtype, M K N.
//   reduce_partials: n, P = number of partial args.
//   add, bias_add: add, n = rows * roundup(w, vector_elements) (tail cost).
//   gelu: gelu, n as add.  bias_gelu: bias_gelu, or bias_gelu_fp8 when out
//   is FP8, n as add.  cast: cast, n as add.
//   layernorm: layernorm, or layernorm_fp8 when out is FP8, rows w.
//   ln_moments: ln_moments, rows w.  moments_combine: rows, P = number of
//   partial args.  normalize: normalize or normalize_fp8 by out, rows w.
//   residual_moments: rows w.  softmax, softmax_normalize: softmax or
//   softmax_fp8 by out, rows w.  softmax_state: ln_moments, rows w.
//   softmax_combine: moments_combine, rows, P.  copy: B = bytes.
//   unary, binary, binary_row, binary_col: by fn, sums of gelu and add
//   with n as add (kernels.h, ElementwiseCycles).  scale: add, n as add.
// The path argument of Cycles selects a formula's slow path; only formulas
// with a slow_path_term_multiplier (binary elementwise: add) change.

#ifndef TILEC_KERNELS_REGISTRY_H_
#define TILEC_KERNELS_REGISTRY_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kernels/cost.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "kernels/status.h"

namespace tilec::kernels {

using KernelRunFn = Status (*)(std::span<Operand> args,
                               std::span<const int64_t> params,
                               std::span<const float> fparams);
using KernelCyclesFn = StatusOr<int64_t> (*)(const CostModel& model,
                                             std::span<const Operand> args,
                                             std::span<const int64_t> params,
                                             KernelPath path);

// The memory-element rules of the target (docs/machine.md, "Memory") that
// apply to a kernel's operands: emit-device places buffers by them, the
// simulator checks them.
enum class MemoryRule {
  kNone,
  // Args 0 and 1 are two input streams: in the same element the kernel
  // takes its slow path (charged, not an error).
  kBinaryInputs,
  // Arg 2 (C) must be in interleaved memory and must not share an
  // effective element with arg 0 (A, the left operand stream).
  kGemmAccumulator,
};

struct KernelInfo {
  std::string_view name;
  KernelRunFn run;
  KernelCyclesFn cycles;
  // Human-readable layout, as in the table above.
  std::string_view args;
  std::string_view params;
  std::string_view fparams;
  // Argument counts: exactly min_args..max_args operands (max_args -1: no
  // upper bound), exactly num_params params and num_fparams fparams.
  int min_args;
  int max_args;
  int num_params;
  int num_fparams;
  // Every target formula the kernel may be charged with.
  std::span<const std::string_view> formulas;
  MemoryRule memory_rule = MemoryRule::kNone;
  // The last `outputs` args are written, the others read (a GEMM that
  // accumulates reads its output too).
  int outputs = 1;
};

// Every registered kernel, in the order of the table above.
std::span<const KernelInfo> RegisteredKernels();
// nullptr when no kernel has that name.
const KernelInfo* FindKernel(std::string_view kernel);

// Runs `kernel` on tile-local operands after checking the call.
Status Run(std::string_view kernel, std::span<Operand> args,
           std::span<const int64_t> params, std::span<const float> fparams);

// Cycles of that call on one tile of `model`'s target (operands are needed
// only for their dtypes and count, never read). Checks the same counts and
// ranges as Run, but not operand sizes.
StatusOr<int64_t> Cycles(const CostModel& model, std::string_view kernel,
                         std::span<const Operand> args,
                         std::span<const int64_t> params,
                         std::span<const float> fparams,
                         KernelPath path = KernelPath::kFast);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_REGISTRY_H_
