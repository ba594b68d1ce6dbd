// Builds the graph of a transformer model (or one part of it) from a preset
// plus overrides: the library behind `import-model`.
//
// Graph conventions
//   * Every activation is 2-D [rows, width] row-major with rows =
//     batch * tokens, dtype F16. Attention scores and probabilities are
//     [batch, heads, tokens, tokens]. The fused QKV activation is
//     [rows, 3 * width] with columns [q heads | k heads | v heads]; head h of
//     q is columns h*D .. h*D+D-1 (D = head_dim = width / heads).
//   * The graph input is the value `x` (role Input, Gaussian mean 0 stddev 1,
//     seed DeriveSeed(input_seed, 0)). The last value is the only Output.
//   * Weights (role Weight, F16) carry no data, only a WeightInit:
//     GEMM weights Gaussian(0, sqrt(2 / (fan_in + fan_out))), biases
//     Gaussian(0, 0.02), LayerNorm gamma Constant 1 and beta Constant 0;
//     the position embedding and the class token like a bias, the MAP probe
//     Gaussian(0, 1).
//     Each weight's seed is DeriveSeed(weight_seed, value id).
//   * Values and ops have separate dense id spaces starting at 0, assigned
//     in creation order; ops are in execution order and each op's weights
//     are created just before its result. The same config and part always
//     give the same ids and names.
//
// One layer (prefix "l<i>."; the op name is listed, its result is
// "<op name>.out" and its weights are "<op name>.<w|b|gamma|beta>"):
//
//   op                    kind              operands                 result
//   l0.ln1                LayerNorm         x, .gamma, .beta         [r,w]
//   l0.attn.qkv           MatMul            ln1.out, .w [w,3w]       [r,3w]
//   l0.attn.qkv_bias      BiasAdd           qkv.out, .b [3w]         [r,3w]
//   l0.attn.scores        AttentionScores   qkv_bias.out             [B,H,T,T]
//   l0.attn.softmax       Softmax           scores.out               [B,H,T,T]
//   l0.attn.ctx           AttentionContext  softmax.out, qkv_bias.out [r,w]
//   l0.attn.proj          MatMul            ctx.out, .w [w,w]        [r,w]
//   l0.attn.proj_bias     BiasAdd           proj.out, .b [w]         [r,w]
//   l0.attn.residual      Add               x, proj_bias.out         [r,w]
//   l0.ln2                LayerNorm         attn.residual.out, ...   [r,w]
//   l0.mlp.up             MatMul            ln2.out, .w [w,m]        [r,m]
//   l0.mlp.up_bias        BiasAdd           up.out, .b [m]           [r,m]
//   l0.mlp.gelu           Gelu              up_bias.out              [r,m]
//   l0.mlp.down           MatMul            gelu.out, .w [m,w]       [r,w]
//   l0.mlp.down_bias      BiasAdd           down.out, .b [w]         [r,w]
//   l0.mlp.residual       Add               ln2's input, down_bias.out [r,w]
//
// Parts: "mlp-block" is the last seven ops (l0.ln2 .. l0.mlp.residual) with
// `x` as the residual input: 7 ops, 14 values. "layer" is all sixteen: 16
// ops, 29 values. "model" is the whole vision tower: the embedding, the
// `layers` layers (layer i+1 reads layer i's l<i>.mlp.residual.out) and
// the preset's head. Its input is the image `pixel_values` [B,3,S,S]
// (Gaussian like `x`), S = g*p for a square grid of g*g patches of side
// `patch`; tokens T = g*g, plus one for a class token.
//
//   op                    kind              operands                 result
//   embed.patchify        Patchify          pixel_values             [B*g*g,3pp]
//                         (the host writes the patches)
//   embed.patch           MatMul            patchify.out, .w [3pp,w] [B*g*g,w]
//   embed.patch_bias      BiasAdd           patch.out, .b            (not CLIP)
//   embed.class_concat    CopyRows          embed.class [1,w], the   [B*T,w]
//                         patch tokens: per image the class row, then its
//                         g*g patch rows (ViT, CLIP)
//   embed.position_rows   CopyRows          embed.position.w [T,w]   [B*T,w]
//                         once per image (batch > 1 only)
//   embed.position        Add               tokens, the positions    [B*T,w]
//   pre_ln                LayerNorm         position.out             (CLIP)
//   l0.. l<N-1>           the layers above
//   then the head.
//
// SigLIP's head is its multihead attention pooling: one learned probe
// query attends over the T tokens (the cross form of the attention ops:
// q [B, w], kv [B*T, 2w] with columns [k heads | v heads]), then
// h = ctx + MLP(LayerNorm(ctx)); the output is that one row per image.
//
//   post_ln               LayerNorm         last layer's out, ...    [B*T,w]
//   head.attn.q           MatMul            head.probe [1,w], .w     [1,w]
//   head.attn.q_bias      BiasAdd           q.out, .b                [1,w]
//   head.attn.q_rows      CopyRows          q_bias.out per image     [B,w]
//                         (batch > 1 only)
//   head.attn.kv          MatMul            post_ln.out, .w [w,2w]   [B*T,2w]
//   head.attn.kv_bias     BiasAdd           kv.out, .b [2w]          [B*T,2w]
//   head.attn.scores      AttentionScores   q, kv_bias.out           [B,H,1,T]
//   head.attn.softmax     Softmax           scores.out               [B,H,1,T]
//   head.attn.ctx         AttentionContext  softmax.out, kv_bias.out [B,w]
//   head.attn.proj        MatMul            ctx.out, .w [w,w]        [B,w]
//   head.attn.proj_bias   BiasAdd           proj.out, .b             [B,w]
//   head.ln2 .. head.mlp.residual           the MLP block on proj_bias.out
//
// The probe's query (probe Wq + bq) depends on weights only but is a
// one-row GEMM on the device: weights have no contents at import (they are
// generated from their seeds, or read from a checkpoint later), so there is
// nothing to fold, and the GEMM costs a few thousand cycles.
//
// ViT-B/16's and CLIP ViT-L/14's heads read each image's class token:
//
//   head.class_rows       CopyRows          row b*T of the last      [B,w]
//                         layer's out, for each image b
//   post_ln               LayerNorm         class_rows.out, ...      [B,w]
//   head.classifier       MatMul            post_ln.out, .w [w,1000] (ViT)
//   head.classifier_bias  BiasAdd           classifier.out, .b       [B,1000]
//   head.proj             MatMul            post_ln.out, .w [w,768]  (CLIP)
//
// (the final LayerNorm works per row, so picking the class rows first is
// the real models' LayerNorm-then-pick). With `repeat`, only the layers
// are rolled.

#ifndef TILEC_PASSES_IMPORT_MODEL_BUILDER_H_
#define TILEC_PASSES_IMPORT_MODEL_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::passes {

// What follows the last layer of a whole model (--part=model).
enum class ModelHead {
  kMap,         // SigLIP: attention pooling with a learned probe
  kClassifier,  // ViT: the class token's LayerNorm, then classes
  kProjection,  // CLIP: the class token's LayerNorm, then a projection
};

// Sizes and numerics of a model. Presets fill every field; any field may be
// overridden afterwards.
struct ModelConfig {
  std::string preset;  // recorded in the module; not interpreted by Build
  int64_t batch = 1;
  int64_t tokens = 0;
  int64_t width = 0;
  int64_t mlp_width = 0;
  int64_t heads = 0;
  int64_t layers = 0;  // --part=model
  // --part=mlp-block: consecutive MLP blocks l0, l1, ... (each residual
  // feeding the next block's LayerNorm); --layers sets it for that part.
  int64_t mlp_blocks = 1;
  float eps = 0.0f;
  fb::GeluForm gelu = fb::GeluForm::Tanh;
  uint64_t weight_seed = 1;
  uint64_t input_seed = 2;
  // --part=model: the patch side of the image (tokens = a square grid of
  // patches, plus the class token where there is one), the embedding's
  // options and the head.
  int64_t patch = 0;
  bool class_token = false;
  bool patch_bias = true;
  bool pre_norm = false;  // CLIP's ln_pre
  ModelHead head = ModelHead::kMap;
  int64_t head_width = 0;  // kClassifier's classes, kProjection's width
  // Identical layers (--part=model, or several MLP blocks) are written once
  // as a repeat (formats/repeat.h); false writes every layer out. The
  // library builds written out unless told; import-model's --repeat is on.
  bool repeat = false;

  // Valid only after ValidateModelConfig succeeded.
  int64_t head_dim() const { return width / heads; }
  int64_t rows() const { return batch * tokens; }
};

// Values given on the command line; unset fields keep the preset's value.
// The flag each field stands for is named in error messages.
struct ModelOverrides {
  std::optional<int64_t> batch;        // --batch
  std::optional<int64_t> tokens;       // --tokens
  std::optional<int64_t> width;        // --width
  std::optional<int64_t> mlp_width;    // --mlp_width
  std::optional<int64_t> heads;        // --heads
  std::optional<int64_t> layers;       // --layers
  std::optional<float> eps;            // --eps
  std::optional<fb::GeluForm> gelu;    // --gelu
  std::optional<uint64_t> weight_seed; // --weight_seed
  std::optional<uint64_t> input_seed;  // --input_seed
  std::optional<bool> repeat;          // --repeat
  std::optional<int64_t> patch;        // --patch
};

enum class ModelPart { kMlpBlock, kLayer, kModel };

// All functions returning std::string return "" on success and otherwise a
// one-line message that names the offending flag and value, e.g.
// "--heads=7: --width=1152 is not divisible by it".

// "siglip-so400m-384", "vit-b16-224", "clip-vit-l14-224".
std::vector<std::string> PresetNames();
Status PresetConfig(std::string_view preset, ModelConfig* config);

// "mlp-block", "layer", "model".
Status ParseModelPart(std::string_view text, ModelPart* part);
std::string_view ModelPartName(ModelPart part);

// "tanh", "erf", "quick" (the spelling of --gelu).
Status ParseGeluForm(std::string_view text, fb::GeluForm* form);
std::string_view GeluFormName(fb::GeluForm form);

void ApplyOverrides(const ModelOverrides& overrides, ModelConfig* config);

// Sizes positive and within the IR's int32 fields, width divisible by heads,
// eps positive and finite, at most 65536 layers and no tensor above 2^48
// elements. `layers` is checked for every part, although only "model" uses
// it.
Status ValidateModelConfig(const ModelConfig& config);

// The per-value seed: splitmix64(base ^ value_id). Decorrelates the weights
// of one model while keeping every tensor reproducible from the IR alone.
uint64_t DeriveSeed(uint64_t base, uint32_t value_id);

// Validates `config`, then replaces module->values, module->ops and
// module->model with the graph of `part`. Other fields (target,
// schema_version, producer, log, ...) are left alone. On error the module is
// not modified. module->model records the preset name, the part name, the
// sizes, the seeds and `layers` = the number of l<i> prefixes in the graph
// (N for "model", 1 for "layer" and "mlp-block").
Status BuildModel(const ModelConfig& config, ModelPart part,
                  fb::ModuleT* module);

// Preset name + part name + overrides, as `import-model` receives them.
Status BuildModel(std::string_view preset, std::string_view part,
                  const ModelOverrides& overrides, fb::ModuleT* module);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_IMPORT_MODEL_BUILDER_H_
