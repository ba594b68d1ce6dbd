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
//     SigLIP's position embedding like a bias, its MAP probe Gaussian(0, 1).
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
// ops, 29 values. "model" chains `layers` layers (layer i+1 reads layer i's
// l<i>.mlp.residual.out): 16*N ops, 1 + 28*N values, for the presets
// without a MAP head (ViT-B/16, CLIP ViT-L/14): their real models prepend a
// learned class token to the patch tokens (197 and 257 tokens) and pool
// it, and the IR has no concatenation to express that, so their "model"
// stays the layers only, reading `x` as the embedded tokens.
//
// SigLIP's "model" is the whole vision tower, batch 1 (the position
// embedding is a same-shape Add; it does not broadcast over a batch yet),
// tokens a square grid g*g of patches of side `patch` (14: 27*27 = 729):
//
//   op                    kind              operands                 result
//   embed.patchify        Patchify          pixel_values [1,3,S,S]   [T,3pp]
//                         (S = g*p; the host writes the patches)
//   embed.patch           MatMul            patchify.out, .w [3pp,w] [T,w]
//   embed.patch_bias      BiasAdd           patch.out, .b            [T,w]
//   embed.position        Add               patch_bias.out, .w [T,w] [T,w]
//   l0.. l<N-1>           the layers above
//   post_ln               LayerNorm         last layer's out, ...    [T,w]
//   head.attn.q           MatMul            head.probe [1,w], .w     [1,w]
//   head.attn.q_bias      BiasAdd           q.out, .b                [1,w]
//   head.attn.kv          MatMul            post_ln.out, .w [w,2w]   [T,2w]
//   head.attn.kv_bias     BiasAdd           kv.out, .b [2w]          [T,2w]
//   head.attn.scores      AttentionScores   q_bias.out, kv_bias.out  [1,H,1,T]
//   head.attn.softmax     Softmax           scores.out               [1,H,1,T]
//   head.attn.ctx         AttentionContext  softmax.out, kv_bias.out [1,w]
//   head.attn.proj        MatMul            ctx.out, .w [w,w]        [1,w]
//   head.attn.proj_bias   BiasAdd           proj.out, .b             [1,w]
//   head.ln2 .. head.mlp.residual           the MLP block on proj_bias.out
//
// The head is SigLIP's multihead attention pooling: one learned probe
// query attends over the T tokens (the cross form of the attention ops:
// q [1, w], kv [T, 2w] with columns [k heads | v heads]), then
// h = ctx + MLP(LayerNorm(ctx)); the output is that one row per image.
// The probe's query (probe Wq + bq) depends on weights only but is a
// one-row GEMM on the device: weights have no contents at import (they are
// generated from their seeds, or read from a checkpoint later), so there is
// nothing to fold, and the GEMM costs a few thousand cycles. The graph
// input is `pixel_values` (Gaussian like `x`); 4 + 16*N + 17 ops,
// 8 + 28*N + 32 values. With `repeat`, only the layers are rolled.

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
  // --part=model of a preset with a MAP head (SigLIP): the patch side of
  // the image (tokens = a square grid of patches) and whether the model is
  // built whole (patch embedding .. head) rather than as its layers.
  int64_t patch = 0;
  bool map_head = false;
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
