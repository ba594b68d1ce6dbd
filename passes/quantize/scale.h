// Per-tensor power-of-two FP8 scales and what they cost a tensor
// (docs/quantize.md, "Scales"): the exponent that fits a tensor's largest
// magnitude into the format less a margin, and the fractions of elements
// that saturate or flush to zero at a given exponent. The rounding itself is
// the numerics library's (kernels/numerics.h), so the pass counts exactly
// what the reference, the simulator and --dump-tensors store.

#ifndef TILEC_PASSES_QUANTIZE_SCALE_H_
#define TILEC_PASSES_QUANTIZE_SCALE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/tilec_generated.h"
#include "kernels/host_cpu.h"
#include "kernels/numerics.h"

namespace tilec::quantize {

// The FP8 format of an FP8 dtype (FP8E4M3 or FP8E5M2; CHECKed).
kernels::Fp8Format FormatOf(fb::DType dtype);

// The largest finite magnitude of `data` (NaN and infinities ignored), 0 for
// an empty or all-zero tensor.
float FiniteAmax(std::span<const float> data);

// The scale exponent for a tensor of largest magnitude `amax`: the largest e
// with amax * 2^e <= the format's largest finite value
// (kernels::Fp8ScaleExpForAmax), less `margin` (bits of headroom above the
// calibrated range). amax 448 gives 0 for E4M3, amax 1.0 gives 8. An amax
// of 0, NaN or infinity has no range to fit: 0 (the caller refuses such a
// tensor or reports it; see docs/quantize.md).
int ChooseScaleExp(float amax, kernels::Fp8Format fmt, int margin);

// What storing `data` as `fmt` with `scale_exp` does to it.
struct QuantStats {
  float amax = 0;
  // Fractions of all elements: |x| * 2^scale_exp beyond the largest finite
  // value (stored clamped to it), and nonzero x stored as zero.
  double saturated = 0;
  double flushed = 0;
};
QuantStats Measure(std::span<const float> data, kernels::Fp8Format fmt,
                   int scale_exp);

// The magnitudes of one or more tensors in constant memory (7 KB), enough
// to Measure them at any format and exponent exactly as Measure does their
// concatenation: how a body activation is calibrated over every iteration
// of its repeat (docs/quantize.md) without keeping any iteration's data.
// Elements are counted by binade and by where their significand lies
// against the two points where storing them can change within a binade:
// 1 (the flush threshold, half the smallest subnormal, is a power of two)
// and 1.75 (the largest finite significand of both formats, CHECKed).
class MagnitudeHistogram {
 public:
  // `path`: where the host has AVX-512, tests also count on the portable
  // loop, which must give the same counts.
  void Add(std::span<const float> data,
           kernels::SimdPath path = kernels::SimdPath::kFastest);
  QuantStats Measure(kernels::Fp8Format fmt, int scale_exp) const;
  float amax() const { return amax_; }     // finite elements only
  size_t count() const { return count_; }  // every element added
  friend bool operator==(const MagnitudeHistogram&,
                         const MagnitudeHistogram&) = default;

  // An element's bin is (binade - kMinBinade) * kClasses + its significand
  // class: exactly 1, in (1, 1.75], in (1.75, 2).
  static constexpr int kMinBinade = -149;  // the smallest F32 subnormal
  static constexpr int kBinades = 127 - kMinBinade + 1;
  static constexpr int kClasses = 3;
  static constexpr int kBins = kBinades * kClasses;

 private:
  std::array<uint64_t, kBins> counts_{};
  float amax_ = 0;
  size_t count_ = 0;
};

}  // namespace tilec::quantize

#endif  // TILEC_PASSES_QUANTIZE_SCALE_H_
