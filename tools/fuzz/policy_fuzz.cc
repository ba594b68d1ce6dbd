// libFuzzer target: quantize-fp8's --policy parser (passes/quantize/
// policy.h) against a fixed graph, TILEC_FUZZ_GRAPH (scripts/fuzz.sh
// imports a small ViT layer), so that names and ids can resolve.

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>

#include "passes/quantize/policy.h"
#include "tools/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tilec::fuzz::FuzzGraph("policy_fuzz");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tilec::StatusOr<tilec::quantize::Policy> policy =
      tilec::quantize::ParsePolicy(
          std::string(reinterpret_cast<const char*>(data), size), "<fuzz>",
          tilec::fuzz::FuzzGraph("policy_fuzz"));
  if (!policy.ok() && policy.status().code() == tilec::StatusCode::kInternal) {
    std::cerr << policy.status().message() << "\n";
    __builtin_trap();
  }
  return 0;
}
