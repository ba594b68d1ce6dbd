#ifndef TILEC_FORMATS_BASICS_H_
#define TILEC_FORMATS_BASICS_H_

// Small facts about IR data that every layer needs.

#include <cstdint>
#include <string_view>

#include "formats/tilec_generated.h"

namespace tilec::ir {

// The largest rank of a value (ranks 1..4): what an ownership partitions
// and a box spans.
inline constexpr int kMaxRank = 4;

// Bytes of one stored element.
inline int DTypeBytes(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F32:
      return 4;
    case fb::DType::F16:
    case fb::DType::BF16:
      return 2;
    case fb::DType::FP8E4M3:
    case fb::DType::FP8E5M2:
      return 1;
  }
  return 4;
}

// FP8E4M3 or FP8E5M2.
inline bool IsFp8(fb::DType dtype) {
  return dtype == fb::DType::FP8E4M3 || dtype == fb::DType::FP8E5M2;
}

// The scale exponent a value's elements are stored with (stored =
// round(x * 2^exp)): fp8_scale_exp for FP8, 0 for every other dtype, which
// carries no scale. A non-FP8 value with a nonzero fp8_scale_exp is
// malformed: the verifier and the simulator reject it.
inline int StorageScaleExp(fb::DType dtype, int fp8_scale_exp) {
  return IsFp8(dtype) ? fp8_scale_exp : 0;
}

// ceil(a / b) for b > 0 and a of either sign. C++ division truncates toward
// zero, which rounds up only when a is negative; for a >= 0 this equals
// (a + b - 1) / b without its overflow near the top of the range.
inline int64_t CeilDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}

// The least multiple of b (b > 0) at or above a: a size padded to an
// alignment.
inline int64_t RoundUp(int64_t a, int64_t b) { return CeilDiv(a, b) * b; }

// FNV-1a, 64 bits: the checksum a Sidecar records, and a hash that is
// stable across platforms and runs (search state, graph identity). Pass a
// previous result as `hash` to continue over more bytes.
inline uint64_t Fnv1a64(std::string_view bytes,
                        uint64_t hash = 14695981039346656037ull) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_BASICS_H_
