// libFuzzer target: import-onnx's whole reader (passes/onnx): the protobuf
// parse, shape inference and constant folding, the pattern matcher, and
// external data, resolved in a sandbox directory that holds one honest
// weights file ("weights.bin", 4 KiB) and a marker file outside it. An
// input may fail with BadInput or Infeasible; an Internal error, a crash or
// a sidecar holding the marker is a finding.

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "formats/tilec_generated.h"
#include "passes/onnx/import_onnx.h"
#include "tools/fuzz/fuzz_support.h"

namespace {

constexpr char kMarker[] = "TILEC-FUZZ-OUTSIDE-MARKER";
std::string* sandbox = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sandbox = new std::string(tilec::fuzz::ScratchDir() + "/model");
  if (mkdir(sandbox->c_str(), 0755) != 0) std::abort();
  std::string weights(4096, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = char(i * 7 + 1);
  tilec::fuzz::WriteInput("model/weights.bin",
                          reinterpret_cast<const uint8_t*>(weights.data()),
                          weights.size());
  std::string marker;
  while (marker.size() < 4096) marker += kMarker;
  tilec::fuzz::WriteInput("outside.bin",
                          reinterpret_cast<const uint8_t*>(marker.data()),
                          marker.size());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ::onnx::ModelProto model;
  if (!tilec::passes::ParseOnnxModel(
           std::string_view(reinterpret_cast<const char*>(data), size),
           "<fuzz>", &model)
           .ok()) {
    return 0;
  }
  tilec::passes::OnnxImportOptions options;
  options.model_dir = *sandbox;
  options.model_name = "<fuzz>";
  tilec::fb::ModuleT module;
  module.target = std::make_unique<tilec::fb::TargetT>();
  std::string sidecar;
  tilec::Status status =
      tilec::passes::ImportOnnx(model, options, &module, &sidecar);
  if (status.code() == tilec::StatusCode::kInternal) {
    std::cerr << status.message() << "\n";
    __builtin_trap();
  }
  // libFuzzer learns the marker from this very comparison and may write it
  // into an initializer: only a marker the input does not hold is a leak.
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (sidecar.find(kMarker) != std::string::npos &&
      input.find(kMarker) == std::string_view::npos) {
    std::cerr << "a file outside the model's directory was read\n";
    __builtin_trap();
  }
  return 0;
}
