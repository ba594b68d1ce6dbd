// libFuzzer target: plan-ownership's checkpoint reader (--resume). The
// input bytes are read as the checkpoint module and the planner resumes
// from it on a fixed graph, TILEC_FUZZ_GRAPH (scripts/fuzz.sh imports it;
// its seed corpus holds checkpoints of that graph, so inputs reach the
// search state's restore and not only the graph comparison). Zero further
// attempts: what is fuzzed is reading the state, not the search.

#include <cstddef>
#include <cstdint>
#include <iostream>
#include <string>

#include "formats/ir.h"
#include "passes/plan/planner.h"
#include "tools/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tilec::fuzz::FuzzGraph("checkpoint_fuzz");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  tilec::plan::PlannerOptions options;
  options.resume.emplace();
  if (!tilec::ir::ParseModule(bytes, "<fuzz>", &*options.resume).ok()) {
    return 0;
  }
  options.resume_name = "<fuzz>";
  options.attempts = 0;
  tilec::plan::PlanOwnershipPass pass(std::move(options));
  tilec::fb::ModuleT module = tilec::fuzz::FuzzGraph("checkpoint_fuzz");
  tilec::StatusOr<bool> ran = pass.Run(&module);
  if (!ran.ok() && ran.status().code() == tilec::StatusCode::kInternal) {
    std::cerr << ran.status().message() << "\n";
    __builtin_trap();
  }
  return 0;
}
