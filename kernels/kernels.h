// Tile kernels: the compute a tile runs on its own memory, one file each
// (gemm.cc, reduce.cc, add.cc, elementwise.cc, gelu.cc, bias_gelu.cc,
// cast.cc, layernorm.cc, moments.cc, normalize.cc, softmax.cc, copy.cc),
// and their cycle costs.
//
// Operands are tile-local byte buffers in a stored dtype. Kernels read and
// write elements with the numerics library (kernels/numerics.h) and do their
// math in F32; statistics and GEMM accumulation are F32 too. Every kernel
// first decodes its inputs, then computes, then encodes its outputs, so an
// output may alias an input of the same shape (in-place work).
//
// Every kernel checks that each operand holds at least the bytes its shape
// needs (bytes needed <= bytes given) and returns an error that names the
// kernel, the operand and the numbers instead of touching memory outside it.
//
// Cycles: each kernel has a *Cycles function that picks the target's
// formula (kernels/cost.h) and its variables.
//
// Tail cost. The vector kernels add, bias add, GELU, bias + GELU (F16 and
// FP8 output), cast, unary, binary, binary_row, binary_col and scale work
// on groups of
// target.vector_elements (4) elements. A row whose width w is not a whole
// number of groups is still computed exactly, but its last group costs as much
// as a full one, so these kernels are charged with n = rows * roundup(w,
// vector_elements) instead of rows * w. Row-wise kernels (LayerNorm, moments,
// normalize, softmax) already charge per row through ceil(w/2) or ceil(w/4) and
// need no tail rule.

#ifndef TILEC_KERNELS_KERNELS_H_
#define TILEC_KERNELS_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "kernels/fb_dtype.h"
#include "kernels/host_cpu.h"
#include "kernels/numerics.h"
#include "kernels/status.h"

namespace tilec::kernels {

// A tile-local buffer (or a slice of one) holding elements of one dtype.
// Stored value = round(x * 2^scale_exp) (numerics.h); 0 means unscaled.
struct Operand {
  uint8_t* data = nullptr;
  size_t bytes = 0;
  DType dtype = DType::kF32;
  int scale_exp = 0;
};

// The kernels' dtype; an IR dtype (fb::DType) has ir::IsFp8 (formats/basics.h).
inline bool IsFp8(DType d) {
  return d == DType::kFp8E4M3 || d == DType::kFp8E5M2;
}


// GELU forms, with the IR's numbering (fb::GeluForm).
enum class GeluForm {
  kTanh = 0,   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kErf = 1,    // 0.5 x (1 + erf(x / sqrt(2)))
  kQuick = 2,  // x * sigmoid(1.702 x)
};
// An error for a number that is not a GeluForm.
StatusOr<GeluForm> GeluFormFromInt(int64_t form);
// One GELU in F32 (shared by the GELU kernels and their tests).
float Gelu(float x, GeluForm form);

// Row statistics of LayerNorm, stored as 3 F32 per row:
// {count, mean, M2} where M2 = sum (x - mean)^2 over the row's `count`
// elements, so variance = M2 / count. Counts are exact in F32 up to 2^24.
inline constexpr int kMomentFloats = 3;
inline constexpr size_t kMomentBytes = kMomentFloats * sizeof(float);

// ---------------------------------------------------------------- helpers
// (shared by the kernel files; public so the registry and tests use the
// same checks.)

// rows * w (or any product) with every factor >= 0 and the product below
// 2^40 elements; otherwise an error naming the kernel and the factors.
StatusOr<size_t> ElementCount(std::string_view kernel,
                              std::initializer_list<int64_t> factors);

// OK when `op` holds at least `elements` elements of its dtype, its dtype is
// valid, and its data pointer is set if any element is needed. `role` names
// the operand in the message ("A", "bias", ...).
Status CheckOperand(std::string_view kernel, std::string_view role,
                    const Operand& op, size_t elements);

// roundup(w, group): the width a vector kernel is charged for.
int64_t RoundUpToGroup(int64_t w, int64_t group);

// The first `elements` elements of `op` decoded to F32 / encoded from F32
// (callers have checked the operand with CheckOperand).
std::vector<float> LoadElements(const Operand& op, size_t elements);
void StoreElements(const Operand& op, std::span<const float> values);

// ---------------------------------------------------------------- gemm.cc
// C[M,N] (+)= A[M,K] * B[K,N], row-major. A and B are both FP8 (E4M3 or
// E5M2, each with its own scale), both F16, or both F32; C is F32 (the
// accumulator) or F16 (rounded once, after the whole sum). With
// `accumulate`, C's previous contents are the starting sum (K-split
// partials); otherwise they are ignored.
Status Gemm(const Operand& a, const Operand& b, const Operand& c, int64_t m,
            int64_t k, int64_t n, bool accumulate);
// C[M,N] (+)= scale * A[M,K] * B[N,K]^T: B row-major as [N, K] (the keys
// of attention scores, as delivered), the product summed in F32 in k order
// like Gemm, scaled in F32, then stored once. Charged Gemm's formulas: the
// AMP work is the same M*K*N (docs/machine.md: Q*K^T uses the GEMM
// formulas).
Status GemmNt(const Operand& a, const Operand& b, const Operand& c, int64_t m,
              int64_t k, int64_t n, bool accumulate, float scale);
// Columns [begin, end) of C[M,N] = A[M,K] * B[K,N], plain row-major F32
// arrays, C's other columns untouched: each element the same k-ordered sum
// Gemm makes. A caller that splits a product's columns among threads has
// each pack only its own part of B (the reference's FP8 products; a split
// by rows had every thread pack all of it).
// exact_products: A's and B's elements are values of dtypes whose every
// product is exact in F32 (ProductsExactInF32), which lets the AVX-512
// path fuse each multiply-add with the same bits.
void MultiplyF32Columns(const float* a, const float* b, float* c, int64_t m,
                        int64_t k, int64_t n, int64_t begin, int64_t end,
                        bool exact_products);
// Whether every product of an `a` value and a `b` value is exact in F32:
// both FP8 or F16 (at most 11 significant bits each, and an exponent range
// F32 holds).
bool ProductsExactInF32(DType a, DType b);
// "gemm_fp8", "gemm_f16" or "gemm_f32" by A's dtype, or an error.
StatusOr<std::string_view> GemmKernelName(DType a_dtype);
// Gemm and GemmNt pick a vectorized code path by the host's instruction set
// (AVX-512F, else AVX2, on x86-64) at run time; every path gives the same
// bits. Tests limit the choice to a slower path where the host has a
// faster one, and set kFastest to go back to choosing. Not for use while
// GEMMs are running.
using GemmPath = SimdPath;
void UseGemmPathForTesting(GemmPath path);
StatusOr<int64_t> GemmCycles(const CostModel& model, DType a_dtype, int64_t m,
                             int64_t k, int64_t n);

// ---------------------------------------------------------------- reduce.cc
// out[i] = sum_p partials[p][i] for i < n, summed in F32 in partial order.
// Partials are usually F32; out F32 or F16.
Status ReducePartials(std::span<const Operand> partials, const Operand& out,
                      int64_t n);
StatusOr<int64_t> ReducePartialsCycles(const CostModel& model, int64_t n,
                                       int64_t partials);

// ---------------------------------------------------------------- add.cc
// out[r,c] = a[r,c] + b[r,c] over [rows, w].
Status Add(const Operand& a, const Operand& b, const Operand& out,
           int64_t rows, int64_t w);
// out[r,c] = x[r,c] + bias[c]: a bias row of w elements broadcast down rows.
Status BiasAdd(const Operand& x, const Operand& bias, const Operand& out,
               int64_t rows, int64_t w);
// Both use the "add" formula with the tail cost; `path` is kSlow when the two
// inputs share a memory element (docs/machine.md).
StatusOr<int64_t> AddCycles(const CostModel& model, int64_t rows, int64_t w,
                            KernelPath path = KernelPath::kFast);

// ---------------------------------------------------------------- elementwise.cc
// General elementwise functions, numbered as the IR's fb::ElementwiseFn:
// binary Add, Sub, Mul, Div, Pow; unary Sqrt, Tanh, Erf, Sigmoid, Relu.
// Computed in F32 with the C library's functions (std::pow, std::erf, ...).
StatusOr<fb::ElementwiseFn> ElementwiseFnFromInt(int64_t fn);
bool IsUnaryFn(fb::ElementwiseFn fn);
float ApplyUnary(fb::ElementwiseFn fn, float x);
float ApplyBinary(fb::ElementwiseFn fn, float a, float b);
// out[r,c] = fn(x[r,c]) ("unary").
Status Unary(const Operand& x, const Operand& out, int64_t rows, int64_t w,
             fb::ElementwiseFn fn);
// out[r,c] = x[r,c] fn y[r,c] ("binary"); with broadcast Row y[c], a row
// of w elements broadcast down the rows ("binary_row"); with Column y[r],
// a column of `rows` elements, each row's one value applied across the
// row ("binary_col"); with `operand_first` the operands swap sides (y fn
// x: 1 - x, c / x).
Status Binary(const Operand& x, const Operand& y, const Operand& out,
              int64_t rows, int64_t w, fb::ElementwiseFn fn, bool operand_first,
              fb::Broadcast broadcast);
// out[r,c] = x[r,c] * scale ("scale").
Status ScaleKernel(const Operand& x, const Operand& out, int64_t rows,
                   int64_t w, float scale);
// Cycles of `fn` on [rows, w] as sums of the target's `gelu` and `add`
// formulas with the tail rule (docs/lowering.md, "General elementwise
// kernels"); `path` is the binary kernels' memory-element path. "scale"
// is charged as Mul.
StatusOr<int64_t> ElementwiseCycles(const CostModel& model,
                                    fb::ElementwiseFn fn, int64_t rows,
                                    int64_t w,
                                    KernelPath path = KernelPath::kFast);

// ---------------------------------------------------------------- gelu.cc
Status GeluKernel(const Operand& x, const Operand& out, int64_t rows,
                  int64_t w, GeluForm form);
StatusOr<int64_t> GeluCycles(const CostModel& model, int64_t rows, int64_t w);

// ---------------------------------------------------------------- bias_gelu.cc
// out[r,c] = GELU(x[r,c] + bias[c]); out F16 ("bias_gelu") or FP8 with its
// scale ("bias_gelu_fp8"); the sum is not rounded before the GELU.
Status BiasGelu(const Operand& x, const Operand& bias, const Operand& out,
                int64_t rows, int64_t w, GeluForm form);
StatusOr<int64_t> BiasGeluCycles(const CostModel& model, DType out_dtype,
                                 int64_t rows, int64_t w);

// ---------------------------------------------------------------- cast.cc
// out = in converted between any two of F32, F16, BF16, FP8 E4M3/E5M2, each
// with its own scale. FP8 saturates.
Status Cast(const Operand& in, const Operand& out, int64_t rows, int64_t w);
StatusOr<int64_t> CastCycles(const CostModel& model, int64_t rows, int64_t w);

// ---------------------------------------------------------------- layernorm.cc
// LayerNorm over complete rows of width w: F32 mean and variance (two
// passes), y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c]; out F16
// ("layernorm") or FP8 ("layernorm_fp8").
Status LayerNorm(const Operand& x, const Operand& gamma, const Operand& beta,
                 const Operand& out, int64_t rows, int64_t w, float eps);
StatusOr<int64_t> LayerNormCycles(const CostModel& model, DType out_dtype,
                                  int64_t rows, int64_t w);

// ---------------------------------------------------------------- moments.cc
// Partial moments of each row of x [rows, w] (a column slice of the full
// rows): moments [rows] x {count = w, mean, M2}.
Status LnMoments(const Operand& x, const Operand& moments, int64_t rows,
                 int64_t w);
StatusOr<int64_t> LnMomentsCycles(const CostModel& model, int64_t rows,
                                  int64_t w);
// Chan's parallel combination of P moment sets [rows] x {count, mean, M2}
// into out [rows] x {count, mean, M2}, in partial order. Sets with count 0
// are skipped.
Status CombineMoments(std::span<const Operand> partials, const Operand& out,
                      int64_t rows);
StatusOr<int64_t> CombineMomentsCycles(const CostModel& model, int64_t rows,
                                       int64_t partials);
// sum = a + b over [rows, w], stored in sum's dtype, and the partial moments
// of the *stored* sum (what a later normalize reads), as LnMoments.
Status ResidualMoments(const Operand& a, const Operand& b, const Operand& sum,
                       const Operand& moments, int64_t rows, int64_t w);
StatusOr<int64_t> ResidualMomentsCycles(const CostModel& model, int64_t rows,
                                        int64_t w);

// ---------------------------------------------------------------- normalize.cc
// LayerNorm of a column slice x [rows, w] from the full rows' moments
// [rows] x {count, mean, M2}: var = M2 / count,
// y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c], with gamma and beta
// the slice's w elements. out F16 ("normalize") or FP8 ("normalize_fp8").
Status Normalize(const Operand& x, const Operand& moments,
                 const Operand& gamma, const Operand& beta, const Operand& out,
                 int64_t rows, int64_t w, float eps);
StatusOr<int64_t> NormalizeCycles(const CostModel& model, DType out_dtype,
                                  int64_t rows, int64_t w);

// ---------------------------------------------------------------- softmax.cc
// Per row: z = x * scale, out = exp(z - max z) / sum exp(z - max z); out
// F16 ("softmax") or FP8 ("softmax_fp8", docs/machine.md: x 1.11).
Status Softmax(const Operand& x, const Operand& out, int64_t rows, int64_t w,
               float scale);
StatusOr<int64_t> SoftmaxCycles(const CostModel& model, DType out_dtype,
                                int64_t rows, int64_t w);
// Softmax over split rows, in three kernels. State of a column slice
// x [rows, w] (scaled by `scale`): state [rows] x {max, sum exp(z - max)},
// F32 (docs/machine.md: modelled as LayerNorm partial moments,
// "ln_moments").
Status SoftmaxState(const Operand& x, const Operand& state, int64_t rows,
                    int64_t w, float scale);
StatusOr<int64_t> SoftmaxStateCycles(const CostModel& model, int64_t rows,
                                     int64_t w);
// P states combined in partial order: max M = max m_p, sum = sum_p s_p *
// exp(m_p - M) (modelled as Chan's combination, "moments_combine").
Status CombineSoftmaxStates(std::span<const Operand> partials,
                            const Operand& out, int64_t rows);
StatusOr<int64_t> CombineSoftmaxStatesCycles(const CostModel& model,
                                             int64_t rows, int64_t partials);
// out = exp(x * scale - max) / sum from the whole rows' state; out F16 or
// FP8. Modelled as the complete-row softmax on the slice ("softmax",
// "softmax_fp8"): it recomputes exp and divides, the passes that dominate.
Status SoftmaxNormalize(const Operand& x, const Operand& state,
                        const Operand& out, int64_t rows, int64_t w,
                        float scale);

// ---------------------------------------------------------------- copy.cc
// Copies `bytes` bytes from src to dst (overlap allowed); dtypes ignored.
Status Copy(const Operand& src, const Operand& dst, int64_t bytes);
StatusOr<int64_t> CopyCycles(const CostModel& model, int64_t bytes);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_KERNELS_H_
