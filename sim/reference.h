// The reference executor: a module's graph run whole, without tiles, with
// the numerics of the device (kernels/numerics.h: F32 math, rounding where
// the device stores F16 or FP8). Every end-to-end test compares the simulator's
// outputs with it.
//
// How it computes
//   * Values without a producing op (inputs, weights) are materialized from
//     their init or sidecar (tensor_data.h), or taken from
//     ReferenceOptions::provided, and rounded to their stored dtype.
//   * Every op runs the tile kernels of kernels.h on whole tensors (one big
//     "tile"), so device and reference share the math: F32 arithmetic, F32
//     GEMM accumulation, F32 LayerNorm statistics. Kernel operands are the
//     decoded F32 values; since every stored value decodes exactly to F32
//     and every kernel computes in F32 and rounds once when it stores, this
//     gives the same numbers as running the kernels on the stored bytes.
//   * Except the GEMMs with no FP8 operand (MatMul, attention scores and
//     context in F16, BF16 or F32), which the BLAS path multiplies
//     (kernels/blas.h: OpenBLAS at 2 to 3 times the speed, scripts/bench.sh
//     gemm; on a host with AMX, F16 and BF16 operands on the matrix units,
//     kernels/amx.h): F32 products and sums in the library's or the units'
//     order, which equal the tile kernel's k-order sums to F32 summation
//     error, not bit for bit (and may differ on another CPU or OpenBLAS
//     version). GEMMs with an FP8
//     operand keep the tile kernel's k order: the simulator's FP8 tiles are
//     compared with them bit for bit where the planner leaves K whole
//     (docs/quantize.md). Either way the thread count does not change a
//     bit.
//   * Every op result is rounded to its value's stored dtype (F16, BF16, FP8
//     with its scale, saturating), where the device stores it.
//   * A repeat (Module.repeats, docs/repeat.md) runs its body `count` times:
//     iteration i reads each body weight's twin (made just before, freed
//     after its last read unless kept) and, for i > 0, the carried_out of
//     iteration i - 1 in place of carried_in, so a rolled graph computes
//     bit for bit what its written-out form does. Values made in the body
//     hold the last iteration's data at the end; `observe` sees every one.
//
// Op kinds (rows = product of all but the last dimension, w = the last):
//   LayerNorm         LayerNorm kernel, op.eps.
//   MatMul            F32 accumulation. FP8: Gemm, rows split over threads
//                     (each element is still summed in k order, so the
//                     result does not depend on the thread count). Else
//                     OpenBLAS in blocks of the shape's choosing, shared by
//                     the threads (the same bytes whatever their number).
//   BiasAdd, Add      BiasAdd / Add kernels.
//   Gelu              GeluKernel with op.gelu.
//   Cast              Cast kernel into the result's dtype and scale.
//   Softmax           Softmax kernel over the last axis with op.scale.
//   AttentionScores   per (batch, head): the q [T,D] slice of the fused
//                     qkv times the k slice [T,D] transposed, F32 (Gemm if
//                     either is FP8, else OpenBLAS), then times op.scale in
//                     F32, rounded once when stored.
//   AttentionContext  per (batch, head): probs [T,T] times the v slice
//                     [T,D] (Gemm or OpenBLAS, as scores), into columns
//                     h*D.. of the result.
//   Patchify          a gather: row b*T + py*(W/p) + px of the result is
//                     patch (py, px) of image b, columns (c, ky, kx);
//                     pixels past the last whole patch are dropped.
//   CopyRows          result rows [at, at+count) = rows [first,
//                     first+count) of the segment's operand; exact (the
//                     verifier keeps dtype and scale).
//   Redistribute      identity, re-rounded to the result's dtype (an FP8
//                     redistribution is visible).
//   Moments           LnMoments: per row {count, mean, M2}, result F32
//                     [rows, 3].
//   Normalize         x, moments, gamma, beta -> Normalize kernel, op.eps.
//   Fused             the body's steps in order on a running F32 value that
//                     starts as operand 0:
//                       BiasAdd      + operand (a [w] row), no rounding
//                       Gelu         step.gelu, no rounding
//                       Cast         rounded to step.dtype (FP8 with
//                                    step.fp8_scale_exp): the only rounding
//                                    inside the body
//                       ResidualAdd  + operand (shape of operand 0)
//                       Scale        * step.scale
//                       Moments      does not change the running value. If
//                                    the op has a second result, it receives
//                                    the per-row moments (F32 [rows, 3]) of
//                                    the running value as result 0 stores it
//                                    (rounded to result 0's dtype), as the
//                                    residual_moments kernel computes them
//                                    from the stored sum; without a second
//                                    result the step is skipped.
//                     Result 0 stores the final running value in its dtype.
//                     (BiasAdd then Gelu this way is bit-identical to the
//                     fused bias_gelu kernel, which does not round between
//                     the two.)
// Any other kind is a BadInput error naming the op.
//
// Errors are tilec::Status (formats/status.h): BadInput for graphs the
// reference cannot run (naming the op or value), Internal for kernel
// failures on checked shapes.

#ifndef TILEC_SIM_REFERENCE_H_
#define TILEC_SIM_REFERENCE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::kernels {

// One value's contents.
struct ReferenceTensor {
  uint32_t id = 0;
  std::string name;
  std::vector<int64_t> shape;
  // The shape its .npy files take when the model declares one for the
  // value (Value.declared_shape; empty: `shape`).
  std::vector<int64_t> file_shape;
  fb::DType dtype = fb::DType::F32;
  int fp8_scale_exp = 0;  // as in the IR; applies to FP8 dtypes only
  fb::ValueRole role = fb::ValueRole::Activation;
  // Row-major, decoded to F32, already on the stored dtype's grid.
  std::vector<float> data;

  // The stored bytes (little-endian codes, FP8 scaled), as the device holds
  // them.
  std::string StoredBytes() const;
};

// Every value of a module, in the module's value order.
class ReferenceResult {
 public:
  const std::vector<ReferenceTensor>& values() const { return values_; }
  // nullptr if no value has that id / name.
  const ReferenceTensor* Find(uint32_t id) const;
  const ReferenceTensor* FindByName(std::string_view name) const;
  // The values with role Output, in module order.
  std::vector<const ReferenceTensor*> Outputs() const;

  // Used by RunReference.
  void Reset(std::vector<ReferenceTensor> values);
  ReferenceTensor* Mutable(uint32_t id);

 private:
  std::vector<ReferenceTensor> values_;
  std::unordered_map<uint32_t, size_t> by_id_;
};

struct ReferenceOptions {
  // Sidecar paths are resolved against this directory (normally the
  // directory of the module file).
  std::string sidecar_dir = ".";
  // Contents for values without a producer, by value id, used instead of
  // their init or sidecar (rounded to the value's dtype). Each must have the
  // value's element count.
  std::map<uint32_t, std::vector<float>> provided;
  // Threads for GEMMs and weight generation; results do not depend on it.
  int threads = 2;
  // Whether GEMMs with an FP8 operand sum in the tile kernels' k order
  // (KOrder in reference_executor.h), which the simulator's results are
  // compared with bit for bit. Where no simulator result is compared with
  // the run (quantize-fp8's accuracy figures), false lets OpenBLAS take
  // them too, several times faster; each sum then differs from the k-order
  // one by F32 summation error only (kernels/blas.h).
  bool fp8_in_k_order = true;
  // Which values keep their contents in the result. The others are freed
  // after their last use (and sources are made just before their first),
  // so peak memory is about one layer's values instead of the whole
  // model's: run-reference on so400m's 27 layers needed 5.8 GB with kAll.
  enum class Keep {
    kAll,                // every value (run-reference --all, tests)
    kSourcesAndOutputs,  // inputs, weights and outputs (simulate-device --dump)
    kInputsAndOutputs,   // graph inputs and outputs (quantize-fp8's
                         // accuracy and simulate-device's comparisons,
                         // which read the residual input)
    kOutputs,            // the graph's outputs only (run-reference)
  };
  Keep keep = Keep::kAll;
  // Called with each op's results as the op makes them, and the iteration
  // of the repeat making them (0 outside repeats): what sees every
  // iteration of a body, whose values the result holds only for the last.
  // quantize-fp8 calibrates on it.
  std::function<void(const ReferenceTensor& tensor, uint32_t iteration)>
      observe;
  // Called with each value the run makes from its init or sidecar (not the
  // `provided` ones), each time it makes it, with its contents before the
  // rounding to its dtype (MaterializeUnrounded) that follows: quantize-fp8
  // measures weights on it rather than generating them again. Called from
  // the threads that make sources, at once for different values.
  std::function<void(const fb::ValueT& value, std::span<const float> unrounded)>
      observe_source;
};

// A value's init or sidecar contents in F32, before MaterializeValue rounds
// them to its dtype (tensor_data.h; the same errors).
Status MaterializeUnrounded(const fb::ValueT& value,
                            const std::string& sidecar_dir,
                            std::vector<float>* data);

Status RunReference(const fb::ModuleT& module, const ReferenceOptions& options,
                    ReferenceResult* result);
// With default options.
Status RunReference(const fb::ModuleT& module, ReferenceResult* result);

// ---------------------------------------------------------------- reports

// Statistics over the finite elements (min/max/mean 0 when there are none);
// sums in double.
struct TensorStats {
  size_t count = 0;      // all elements
  size_t nonfinite = 0;  // NaN and infinities, excluded from the rest
  double min = 0;
  double max = 0;
  double mean = 0;
  double l2 = 0;  // sqrt(sum of squares)
};
TensorStats ComputeStats(std::span<const float> data);

// One line without newline, fixed format:
// "<name> [729,1152] f16 min=-4.1875 max=4.35938 mean=0.00123129
//  l2=1021.37 nonfinite=0" (%.6g).
std::string SummaryLine(const ReferenceTensor& tensor);

// A name usable as a file name: [A-Za-z0-9._-] kept, anything else '_', a
// leading '.' becomes '_' (no hidden files, no "..").
std::string SafeFileName(std::string_view name);

// Writes `<base>.npy` (float32) and, unless the value is F32,
// `<base>.<dtype>.npy` with the raw stored codes (numerics.h DTypeName:
// f16, bf16, fp8e4m3, fp8e5m2) for each tensor into `out_dir` (created if
// missing), in the tensor's file_shape (else its shape). `base` is SafeFileName(name), or "value<id>" for an unnamed
// value, with "_v<id>" appended when two tensors would share a file.
// Appends the written file paths to `paths` if not null.
Status WriteTensorFiles(std::span<const ReferenceTensor* const> tensors,
                        const std::string& out_dir,
                        std::vector<std::string>* paths);

}  // namespace tilec::kernels

#endif  // TILEC_SIM_REFERENCE_H_
