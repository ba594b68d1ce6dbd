// The contents of input and weight values: generated from their recorded
// WeightInit (seed and distribution) or read from a sidecar file, then
// rounded to the value's stored dtype, so that every tool (reference,
// simulator, tests) sees exactly the numbers the device would hold.
//
// Generation is counter-based and uses no std:: distribution (their output
// differs between standard library versions) and no libm transcendental
// function (their last bit differs between libms): element i depends only on
// (seed, i) through splitmix64 hashing, and Gaussians come from Box-Muller
// with a logarithm and a sine/cosine evaluated here with +, -, *, / and
// sqrt, which IEEE 754 rounds identically everywhere (the library is built
// with -ffp-contract=off so no platform fuses them differently).
//
//   Gaussian  mean + stddev * z, z ~ N(0, 1)
//   Constant  mean
//   Uniform   mean + stddev * (2u - 1), u in [0, 1): [mean - stddev,
//             mean + stddev)
//
// Each element is computed in double, converted to F32 (round to nearest)
// and then rounded to the stored dtype (FP8 with the value's scale).
//
// Errors are the project's Status (formats/status.h), naming the value.

#ifndef TILEC_SIM_TENSOR_DATA_H_
#define TILEC_SIM_TENSOR_DATA_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/basics.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/host_cpu.h"
#include "kernels/numerics.h"

namespace tilec::kernels {

// The number of elements of a shape: an error for a negative dimension or a
// product above 2^48 (far beyond memory, far below overflow). `what` names
// the value in the message.
Status ShapeElements(const std::vector<int64_t>& shape, const std::string& what,
                     size_t* count);

// "value 3 (l0.mlp.up.w)": how messages name a value.
std::string DescribeValue(const fb::ValueT& value);

// The kernels' dtype for an IR dtype; F32 for a value outside the enum
// (the IR verifier rejects those before anything runs).
DType KernelDType(fb::DType dtype);

// Rounds every element in place to what a tensor of `dtype` stores (FP8 with
// `fp8_scale_exp`, saturating; F32 unchanged): encode, then decode.
void RoundToStored(fb::DType dtype, int fp8_scale_exp, std::span<float> data);

// The stored bytes (little-endian codes of `dtype`, FP8 scaled) of `data`.
std::string EncodeStored(fb::DType dtype, int fp8_scale_exp,
                         std::span<const float> data);

// The checksum of sidecar ranges is ir::Fnv1a64 (formats/basics.h).
using ir::Fnv1a64;

// `count` F32 elements of `init`'s distribution, before any dtype rounding.
// Deterministic: the same (init, i) always gives the same element, whatever
// `count`, the platform or the standard library.
std::vector<float> GenerateInit(const fb::WeightInitT& init, size_t count);

// Elements [begin, end) (begin even) of GenerateInit(init, n) for any
// n >= end, into data[begin, end). Vectorized where the host has AVX-512
// (with DQ) or AVX2, with the same bits as the element-by-element loop;
// `path` limits the choice, for tests that compare the paths.
void GenerateInitRange(const fb::WeightInitT& init, size_t begin, size_t end,
                       float* data,
                       kernels::SimdPath path = kernels::SimdPath::kFastest);

// The contents of an input or weight value, rounded to its stored dtype.
// A value with a sidecar reads it (the sidecar wins over an init, which may
// be kept to describe the data): `sidecar.bytes` bytes at `sidecar.offset`
// of `sidecar.path`, resolved against `sidecar_dir` unless absolute, as
// little-endian F32 (bytes must be 4 x the element count), checked against
// `sidecar.fnv1a64`. Otherwise the init generates it. A value with neither
// is a BadInput error naming its id and name. `*data`'s memory is reused,
// whatever it holds.
Status MaterializeValue(const fb::ValueT& value, const std::string& sidecar_dir,
                        std::vector<float>* data);
// Sidecar paths relative to the working directory.
Status MaterializeValue(const fb::ValueT& value, std::vector<float>* data);

}  // namespace tilec::kernels

#endif  // TILEC_SIM_TENSOR_DATA_H_
