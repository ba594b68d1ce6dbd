// import-model: builds a model's graph from a preset plus overrides.

#include <gflags/gflags.h>

#include <optional>

#include "formats/ir.h"
#include "passes/import/model_builder.h"
#include "passes/import/safetensors.h"
#include "passes/import/sidecar.h"
#include "tools/common/tool.h"

DEFINE_string(
    preset, "siglip-so400m-384",
    "Model preset: siglip-so400m-384, vit-b16-224, clip-vit-l14-224.");
DEFINE_string(part, "mlp-block",
              "What to build: mlp-block, layer or model. model is the whole "
              "vision tower: the image [B,3,S,S] (S = sqrt(patches) * patch) "
              "cut into patches by the host, the patch embedding GEMM, the "
              "class token (vit-b16-224, clip-vit-l14-224), the position "
              "embedding, the layers and the head: siglip-so400m-384's MAP "
              "head (one probe query attending over the tokens, then its "
              "MLP: [B, width]), vit-b16-224's classifier ([B, 1000]) or "
              "clip-vit-l14-224's projection ([B, 768]) of the class token "
              "after LayerNorm.");
DEFINE_int64(layers, 0,
             "Layers for --part=model (default: the preset's); consecutive "
             "MLP blocks for --part=mlp-block (default 1); --part=layer is "
             "one layer.");
DEFINE_int64(batch, 1, "Batch size (rows = batch * tokens).");
DEFINE_int64(tokens, 0, "Override the preset's token count.");
DEFINE_int64(width, 0, "Override the preset's model width.");
DEFINE_int64(mlp_width, 0, "Override the preset's MLP width.");
DEFINE_int64(heads, 0, "Override the preset's attention head count.");
DEFINE_int64(patch, 0,
             "Override the preset's patch side (--part=model of SigLIP).");
DEFINE_double(eps, 0, "Override the preset's LayerNorm epsilon.");
DEFINE_string(gelu, "", "Override the preset's GELU form: tanh, erf, quick.");
DEFINE_uint64(weight_seed, 1, "Seed of the generated weights.");
DEFINE_uint64(input_seed, 2, "Seed of the generated input.");
DEFINE_bool(repeat, true,
            "Write identical layers once, as a repeat the later stages plan, "
            "emit and run once per layer (docs/repeat.md); false writes "
            "every layer out.");
DEFINE_string(
    target, "ipu21",
    "Target the module is for: a preset (ipu21, tiny) or a JSON path.");

DEFINE_string(weights, "",
              "Pretrained weights: a SigLIP/CLIP vision tower or Hugging "
              "Face ViT checkpoint in "
              "the safetensors layout (F32, F16 or BF16), its tensors "
              "written to the --sidecar file (passes/import/safetensors.h "
              "names them). Empty: weights generated from --weight_seed.");
DEFINE_int64(weights_first_layer, 0,
             "The checkpoint layer that the graph's layer l0 reads (l1 reads "
             "the next, ...), e.g. --part=layer --weights_first_layer=26 for "
             "so400m's last layer.");
DEFINE_string(sidecar, "",
              "With --weights: where the weights go (little-endian F32, "
              "checksummed in the IR). Default: <-o>.weights next to the IR; "
              "required with -o -.");

namespace tilec::tools {
namespace {

// Only flags given on the command line override the preset.
template <typename T>
std::optional<T> IfSet(const char* flag, T value) {
  if (gflags::GetCommandLineFlagInfoOrDie(flag).is_default) return std::nullopt;
  return value;
}

Status Run(const std::vector<std::string>& args) {
  if (!args.empty()) {
    return Status::BadInput("import-model takes no input file, got " + args[0]);
  }
  passes::ModelOverrides overrides;
  overrides.layers = IfSet<int64_t>("layers", FLAGS_layers);
  overrides.batch = IfSet<int64_t>("batch", FLAGS_batch);
  overrides.tokens = IfSet<int64_t>("tokens", FLAGS_tokens);
  overrides.width = IfSet<int64_t>("width", FLAGS_width);
  overrides.mlp_width = IfSet<int64_t>("mlp_width", FLAGS_mlp_width);
  overrides.heads = IfSet<int64_t>("heads", FLAGS_heads);
  overrides.patch = IfSet<int64_t>("patch", FLAGS_patch);
  overrides.eps = IfSet<float>("eps", static_cast<float>(FLAGS_eps));
  overrides.weight_seed = IfSet<uint64_t>("weight_seed", FLAGS_weight_seed);
  overrides.input_seed = IfSet<uint64_t>("input_seed", FLAGS_input_seed);
  overrides.repeat = FLAGS_repeat;
  if (!FLAGS_gelu.empty()) {
    fb::GeluForm form;
    TILEC_RETURN_IF_ERROR(passes::ParseGeluForm(FLAGS_gelu, &form));
    overrides.gelu = form;
  }
  fb::ModuleT module;
  module.target = std::make_unique<fb::TargetT>();
  TILEC_RETURN_IF_ERROR(ir::LoadTarget(FLAGS_target, module.target.get()));
  TILEC_RETURN_IF_ERROR(
      passes::BuildModel(FLAGS_preset, FLAGS_part, overrides, &module));
  if (FLAGS_weights.empty()) {
    return ir::WriteModule(module, "import-model", FLAGS_o);
  }
  passes::SidecarPaths paths;
  TILEC_RETURN_IF_ERROR(
      passes::ResolveSidecarPaths(FLAGS_o, FLAGS_sidecar, &paths));
  TILEC_RETURN_IF_ERROR(
      CheckOutputs({{"--weights", FLAGS_weights}, {"--target", FLAGS_target}},
                   {{"-o", FLAGS_o}, {"--sidecar", paths.write}}));
  passes::SafetensorsFile checkpoint;
  TILEC_RETURN_IF_ERROR(
      passes::SafetensorsFile::Open(FLAGS_weights, &checkpoint));
  passes::SidecarBuilder sidecar(paths.recorded);
  TILEC_RETURN_IF_ERROR(passes::LoadSafetensorsWeights(
      checkpoint, FLAGS_weights_first_layer, &sidecar, &module));
  return passes::WriteModuleAndSidecar(module, "import-model", FLAGS_o, paths,
                                       sidecar.bytes());
}

}  // namespace
}  // namespace tilec::tools

int main(int argc, char** argv) {
  auto args = tilec::tools::InitTool(
      argc, argv,
      "import-model [--preset=P] [--part=mlp-block|layer|model] [-o OUT]: "
      "build a model graph as tilec IR");
  return tilec::tools::RunAndFinish(
      [&] { return tilec::tools::Run(args); });
}
