#include "kernels/test_target.h"

#include <gtest/gtest.h>

#include "formats/ir.h"

namespace tilec::kernels {

fb::TargetT LoadTestTarget(const std::string& name) {
  fb::TargetT target;
  const tilec::Status status = ir::LoadTarget(name, &target);
  EXPECT_TRUE(status.ok()) << status.message();
  return target;
}

}  // namespace tilec::kernels
