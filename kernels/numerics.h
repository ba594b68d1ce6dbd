// Number formats used by tile accelerators: IEEE binary16 (F16), bfloat16
// (BF16) and the two OCP 8-bit floats (FP8 E4M3 "fn" and E5M2).
//
// All encoders round to nearest, ties to even, directly from the float's bits
// (there is never an intermediate rounding step, even when a power-of-two
// scale is applied). Decoders are exact except where a scale pushes the
// decoded value outside float's normal range, in which case the result is
// the correctly rounded float.
//
// Scales: a tensor may carry a per-tensor power-of-two scale exponent s. The
// stored code is round(x * 2^s) and the decoded value is code_value * 2^-s.
// s = 0 means "unscaled".

#ifndef TILEC_KERNELS_NUMERICS_H_
#define TILEC_KERNELS_NUMERICS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tilec::kernels {

// ---------------------------------------------------------------------------
// F16 (IEEE binary16: 1 sign, 5 exponent bits with bias 15, 10 mantissa bits)
// and BF16 (1 sign, 8 exponent bits with bias 127, 7 mantissa bits).
//
// Encoding: round to nearest even; overflow goes to infinity; infinities map
// to infinities; NaN stays NaN with its sign and the top payload bits kept and
// the quiet bit forced on (so a quiet NaN's payload survives a round trip and
// a signalling NaN can never turn into an infinity).
// Decoding is exact (every F16/BF16 value is a float); NaN payloads are kept.

uint16_t F16Encode(float x, int scale_exp = 0);
float F16Decode(uint16_t code, int scale_exp = 0);
uint16_t Bf16Encode(float x, int scale_exp = 0);
float Bf16Decode(uint16_t code, int scale_exp = 0);

// x rounded to the nearest F16 / BF16 value, returned as a float.
float RoundToF16(float x);
float RoundToBf16(float x);

// ---------------------------------------------------------------------------
// FP8.
//
// kE4M3: OCP E4M3FN. Bias 7, no infinities, only S.1111.111 (0x7F/0xFF) is
//   NaN, so the largest finite value is S.1111.110 = 448. The smallest
//   subnormal is 2^-9.
// kE5M2: IEEE-like. Bias 15, largest finite 57344 (0x7B), infinities
//   0x7C/0xFC, NaN 0x7D..0x7F (and negatives). Smallest subnormal 2^-16.
enum class Fp8Format { kE4M3, kE5M2 };

// What to do with values whose rounded magnitude exceeds the largest finite
// value (this includes +-inf).
enum class Saturation {
  kSaturate,       // Clamp to +-max finite. NaN stays NaN.
  kNonSaturating,  // E4M3: NaN; E5M2: +-inf.
};

// Largest finite value of the format (448 or 57344).
float Fp8MaxFinite(Fp8Format fmt);

// Encodes round(x * 2^scale_exp). NaN inputs give the format's NaN (E4M3
// 0x7F, E5M2 0x7E, sign kept).
uint8_t Fp8Encode(float x, Fp8Format fmt, int scale_exp = 0,
                  Saturation sat = Saturation::kSaturate);
// Returns value(code) * 2^-scale_exp.
float Fp8Decode(uint8_t code, Fp8Format fmt, int scale_exp = 0);

// Encode then decode with the same scale: x quantized to the scaled FP8 grid.
float RoundToFp8(float x, Fp8Format fmt, int scale_exp = 0,
                 Saturation sat = Saturation::kSaturate);

// Chooses the per-tensor scale exponent for a tensor whose largest magnitude
// is amax: the largest integer e with |amax| * 2^e <= Fp8MaxFinite(fmt), so
// the tensor uses as much of the FP8 range as possible without saturating.
// Returns 0 when amax is zero or not finite (nothing sensible to fit).
int Fp8ScaleExpForAmax(float amax, Fp8Format fmt);
// Same, with amax taken over the finite elements of `values` (NaN and inf are
// ignored: they encode to NaN/saturate regardless of the scale).
int Fp8ScaleExpForTensor(std::span<const float> values, Fp8Format fmt);

// ---------------------------------------------------------------------------
// Bulk conversions. `src` and `dst` must have the same size (CHECKed).
// These hoist table and scale-factor setup out of the loop.

void F16EncodeArray(std::span<const float> src, std::span<uint16_t> dst,
                    int scale_exp = 0);
void F16DecodeArray(std::span<const uint16_t> src, std::span<float> dst,
                    int scale_exp = 0);
void Bf16EncodeArray(std::span<const float> src, std::span<uint16_t> dst,
                     int scale_exp = 0);
void Bf16DecodeArray(std::span<const uint16_t> src, std::span<float> dst,
                     int scale_exp = 0);
void Fp8EncodeArray(std::span<const float> src, std::span<uint8_t> dst,
                    Fp8Format fmt, int scale_exp = 0,
                    Saturation sat = Saturation::kSaturate);
void Fp8DecodeArray(std::span<const uint8_t> src, std::span<float> dst,
                    Fp8Format fmt, int scale_exp = 0);

// ---------------------------------------------------------------------------
// Storage dtypes, for kernels that read and write byte buffers.

enum class DType { kF32, kF16, kBF16, kFp8E4M3, kFp8E5M2 };

// Bytes per element: 4, 2, 2, 1, 1.
int DTypeBytes(DType dtype);
// "f32", "f16", "bf16", "fp8e4m3", "fp8e5m2".
std::string_view DTypeName(DType dtype);

// Stores round_dtype(value * 2^scale_exp) at dst (DTypeBytes(dtype) bytes,
// little-endian). The scale applies to every dtype, F32 included, so one
// tensor description works for all of them; pass 0 for unscaled tensors.
// FP8 saturates (the usual choice for stored activations and weights).
void StoreAs(DType dtype, float value, int scale_exp, uint8_t* dst);
// Reads one little-endian element at src and returns its value * 2^-scale_exp.
float LoadAs(DType dtype, const uint8_t* src, int scale_exp);

// Array forms: dst (resp. src) holds src.size() (resp. dst.size()) elements,
// i.e. exactly that many times DTypeBytes(dtype) bytes (CHECKed).
void StoreArrayAs(DType dtype, std::span<const float> src, int scale_exp,
                  std::span<uint8_t> dst);
void LoadArrayAs(DType dtype, std::span<const uint8_t> src, int scale_exp,
                 std::span<float> dst);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_NUMERICS_H_
