// Target presets for the kernels' tests, loaded through the IR library (the
// schema-checked JSON in formats/targets/).

#ifndef TILEC_KERNELS_TEST_TARGET_H_
#define TILEC_KERNELS_TEST_TARGET_H_

#include <string>

#include "formats/tilec_generated.h"

namespace tilec::kernels {

// The preset "ipu21" or "tiny"; a failed load fails the test (and returns an
// empty target).
fb::TargetT LoadTestTarget(const std::string& name);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_TEST_TARGET_H_
