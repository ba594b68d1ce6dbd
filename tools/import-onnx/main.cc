// import-onnx: an ONNX model as tilec IR, its weights in a sidecar file.

#include <gflags/gflags.h>

#include <limits>
#include <sstream>

#include "formats/ir.h"
#include "passes/import/sidecar.h"
#include "passes/onnx/import_onnx.h"
#include "tools/common/tool.h"

DEFINE_string(
    sidecar, "",
    "Where the weights go (little-endian F32, checksummed in the "
    "IR). Default: <-o>.weights next to the IR; required with -o - when the "
    "model has weights.");
DEFINE_string(dtype, "f16",
              "tilec dtype of every float tensor: f16 (tilec's convention), "
              "f32, or keep (FLOAT -> f32, FLOAT16 -> f16, BFLOAT16 -> bf16).");
DEFINE_bool(no_fuse_qkv, false,
            "Keep q, k and v projections apart instead of fusing them into "
            "one [in, 3*H*D] MatMul (tilec's attention ops need the fused "
            "form, so attention then does not import: exit 3).");
DEFINE_string(outputs, "",
              "Comma-separated graph outputs to import (default: all); the "
              "nodes only other outputs need are ignored.");
DEFINE_uint64(input_seed, 2,
              "Seed of the graph inputs' generated contents (used when no "
              "--inputs directory is given to later tools).");
DEFINE_int64(batch, 1,
             "The value of a symbolic first (batch) dimension of the graph "
             "inputs, as a dynamic-batch export declares; recorded as the "
             "module's batch. Any other symbolic dimension: exit 3.");
DEFINE_string(
    target, "ipu21",
    "Target the module is for: a preset (ipu21, tiny) or a JSON path.");

namespace tilec::tools {
namespace {

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

Status Run(const std::vector<std::string>& args) {
  std::string path;
  TILEC_RETURN_IF_ERROR(SingleInput(args, &path));
  passes::OnnxImportOptions options;
  TILEC_RETURN_IF_ERROR(
      passes::ParseOnnxDTypePolicy(FLAGS_dtype, &options.dtype));
  options.fuse_qkv = !FLAGS_no_fuse_qkv;
  options.outputs = SplitCommas(FLAGS_outputs);
  options.input_seed = FLAGS_input_seed;
  if (FLAGS_batch < 1 || FLAGS_batch > std::numeric_limits<int32_t>::max()) {
    return Status::BadInput("--batch=" + std::to_string(FLAGS_batch) +
                            ": expected a positive batch");
  }
  options.batch = FLAGS_batch;
  options.model_name = ir::DisplayName(path);
  options.model_dir = ir::DirectoryOf(path);
  passes::SidecarPaths sidecar;
  TILEC_RETURN_IF_ERROR(
      passes::ResolveSidecarPaths(FLAGS_o, FLAGS_sidecar, &sidecar));
  options.sidecar_path = sidecar.recorded;

  TILEC_RETURN_IF_ERROR(
      CheckOutputs({{"the model", path}, {"--target", FLAGS_target}},
                   {{"-o", FLAGS_o}, {"--sidecar", sidecar.write}}));
  std::string bytes;
  TILEC_RETURN_IF_ERROR(ir::ReadFile(path, &bytes));
  ::onnx::ModelProto model;
  TILEC_RETURN_IF_ERROR(
      passes::ParseOnnxModel(bytes, options.model_name, &model));
  bytes = std::string();  // the parsed model holds the weights now
  fb::ModuleT module;
  module.target = std::make_unique<fb::TargetT>();
  TILEC_RETURN_IF_ERROR(ir::LoadTarget(FLAGS_target, module.target.get()));
  std::string weights;
  TILEC_RETURN_IF_ERROR(passes::ImportOnnx(model, options, &module, &weights));
  return passes::WriteModuleAndSidecar(module, "import-onnx", FLAGS_o, sidecar,
                                       weights);
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "import-onnx [MODEL.onnx|-] [-o OUT.tilec] [--sidecar=WEIGHTS] "
      "[--dtype=f16|f32|keep] [--outputs=A,B] [--no-fuse-qkv] [--batch=N]: an "
      "ONNX model "
      "(opsets 13-17) as tilec IR, weights in a checksummed sidecar file.\n"
      "Exit 0: imported; 2: bad usage, unreadable or malformed model; 3: a "
      "valid model with a node tilec cannot represent (named with its op "
      "type and opset); 1: internal error. docs/import-onnx.md lists what "
      "maps onto tilec.");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
