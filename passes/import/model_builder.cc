#include "passes/import/model_builder.h"

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "passes/import/roll.h"

namespace tilec::passes {
namespace {

struct Preset {
  const char* name;
  int64_t tokens;
  int64_t width;
  int64_t mlp_width;
  int64_t heads;
  int64_t layers;
  float eps;
  fb::GeluForm gelu;
  int64_t patch;
  ModelHead head;
  int64_t head_width;  // the classifier's classes or the projection's width
  bool class_token;
  bool patch_bias;
  bool pre_norm;
};

// Token counts include the class token where the model has one (ViT:
// 224/16 = 14 -> 196 + 1; CLIP: 224/14 = 16 -> 256 + 1); SigLIP pools
// without one, so 384/14 = 27 -> 27*27 = 729. ViT-B/16's head is
// ImageNet's 1000-class classifier, CLIP's the 768-wide projection into
// the joint image-text space; CLIP's patch convolution has no bias and
// its embeddings go through a LayerNorm (ln_pre) before the first layer.
constexpr Preset kPresets[] = {
    {"siglip-so400m-384", 729, 1152, 4304, 16, 27, 1e-6f, fb::GeluForm::Tanh,
     14, ModelHead::kMap, 0, false, true, false},
    {"vit-b16-224", 197, 768, 3072, 12, 12, 1e-12f, fb::GeluForm::Erf, 16,
     ModelHead::kClassifier, 1000, true, true, false},
    {"clip-vit-l14-224", 257, 1024, 4096, 16, 24, 1e-5f, fb::GeluForm::Quick,
     14, ModelHead::kProjection, 768, true, false, true},
};

// RGB images.
constexpr int64_t kImageChannels = 3;

struct PartName {
  ModelPart part;
  const char* name;
};

constexpr PartName kParts[] = {
    {ModelPart::kMlpBlock, "mlp-block"},
    {ModelPart::kLayer, "layer"},
    {ModelPart::kModel, "model"},
};

struct GeluName {
  fb::GeluForm form;
  const char* name;
};

constexpr GeluName kGeluNames[] = {
    {fb::GeluForm::Tanh, "tanh"},
    {fb::GeluForm::Erf, "erf"},
    {fb::GeluForm::Quick, "quick"},
};

// Stddev of the bias initialisation; small so that biases do not dominate
// the GEMM outputs.
constexpr float kBiasStddev = 0.02f;

// The verifier's bound on one value (formats/ir.h), checked here first so
// that a typo in a flag is refused before the graph is built.
constexpr int64_t kMaxElements = ir::kMaxValueElements;

// Far beyond any real model (so400m has 27 layers, the largest preset 24
// to 27); keeps the graph (28 values per layer) and the time to build, write
// and verify it small: 65,536 layers took gigabytes before anything was
// refused.
constexpr int64_t kMaxLayers = 1024;

std::string Flag(std::string_view flag, int64_t value) {
  return "--" + std::string(flag) + "=" + std::to_string(value);
}

Status CheckSize(std::string_view flag, int64_t value) {
  if (value <= 0)
    return Status::BadInput(Flag(flag, value) + ": must be positive");
  if (value > std::numeric_limits<int32_t>::max()) {
    return Status::BadInput(Flag(flag, value) +
                            ": must be at most 2147483647 (the IR stores " +
                            "it as a 32-bit integer)");
  }
  return Status::Ok();
}

// The product of `factors` (already known to be positive int32 values),
// false if it exceeds kMaxElements.
bool ElementsFit(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product) ||
        product > kMaxElements) {
      return false;
    }
  }
  return true;
}


using ir::RowSegment;

// Appends values and ops with dense ids; all the naming happens here so the
// scheme in the header has one implementation.
class GraphBuilder {
 public:
  explicit GraphBuilder(const ModelConfig& config) : config_(config) {}

  uint32_t Input(const std::string& name, std::vector<int64_t> shape) {
    const uint32_t id = NewValue(name, std::move(shape), fb::ValueRole::Input);
    SetInit(id, fb::Distribution::Gaussian, DeriveSeed(config_.input_seed, id),
            0.0f, 1.0f);
    return id;
  }

  // x -> LayerNorm(x; gamma, beta).
  uint32_t LayerNorm(const std::string& name, uint32_t x) {
    const int64_t w = config_.width;
    const uint32_t gamma = Weight(name + ".gamma", {w},
                                  fb::Distribution::Constant, 1.0f, 0.0f);
    const uint32_t beta = Weight(name + ".beta", {w},
                                 fb::Distribution::Constant, 0.0f, 0.0f);
    fb::OperationT* op = NewOp(fb::OpKind::LayerNorm, name, {x, gamma, beta},
                               Shape(x));
    op->eps = config_.eps;
    return op->results[0];
  }

  // a [M,K] x w [K,N]; Xavier-style init keeps the output variance near the
  // input's.
  uint32_t MatMul(const std::string& name, uint32_t a, int64_t n) {
    const int64_t m = Shape(a)[0];
    const int64_t k = Shape(a)[1];
    const float stddev =
        static_cast<float>(std::sqrt(2.0 / static_cast<double>(k + n)));
    const uint32_t w = Weight(name + ".w", {k, n}, fb::Distribution::Gaussian,
                              0.0f, stddev);
    return NewOp(fb::OpKind::MatMul, name, {a, w}, {m, n})->results[0];
  }

  uint32_t BiasAdd(const std::string& name, uint32_t a) {
    const int64_t n = Shape(a)[1];
    const uint32_t b = Weight(name + ".b", {n}, fb::Distribution::Gaussian,
                              0.0f, kBiasStddev);
    return NewOp(fb::OpKind::BiasAdd, name, {a, b}, Shape(a))->results[0];
  }

  uint32_t Gelu(const std::string& name, uint32_t x) {
    fb::OperationT* op = NewOp(fb::OpKind::Gelu, name, {x}, Shape(x));
    op->gelu = config_.gelu;
    return op->results[0];
  }

  uint32_t Add(const std::string& name, uint32_t a, uint32_t b) {
    return NewOp(fb::OpKind::Add, name, {a, b}, Shape(a))->results[0];
  }

  // Self-attention reads one fused qkv [B*T, 3w]; cross-attention reads
  // q [B*Tq, w] and kv [B*Tk, 2w] (formats/op_shapes.h).
  uint32_t AttentionScores(const std::string& name,
                           std::vector<uint32_t> operands, int64_t tq,
                           int64_t tk) {
    fb::OperationT* op =
        NewOp(fb::OpKind::AttentionScores, name, std::move(operands),
              {config_.batch, config_.heads, tq, tk});
    SetAttention(op);
    op->scale = static_cast<float>(
        1.0 / std::sqrt(static_cast<double>(config_.head_dim())));
    return op->results[0];
  }

  uint32_t Softmax(const std::string& name, uint32_t x) {
    fb::OperationT* op = NewOp(fb::OpKind::Softmax, name, {x}, Shape(x));
    op->scale = 1.0f;  // the 1/sqrt(D) scale is applied by AttentionScores
    return op->results[0];
  }

  // probs [B, H, Tq, Tk] and the qkv or kv operand -> [B*Tq, w].
  uint32_t AttentionContext(const std::string& name, uint32_t probs,
                            uint32_t qkv) {
    const int64_t rows = Shape(probs)[0] * Shape(probs)[2];
    fb::OperationT* op = NewOp(fb::OpKind::AttentionContext, name,
                               {probs, qkv}, {rows, config_.width});
    SetAttention(op);
    return op->results[0];
  }

  // image [B, C, S, S] -> patches [B*T, C*p*p] (written by the host).
  uint32_t Patchify(const std::string& name, uint32_t image) {
    const std::vector<int64_t>& s = Shape(image);
    const int64_t p = config_.patch;
    fb::OperationT* op = NewOp(fb::OpKind::Patchify, name, {image},
                               {s[0] * (s[2] / p) * (s[3] / p), s[1] * p * p});
    op->patch = static_cast<int32_t>(p);
    return op->results[0];
  }

  // x [B*T, w] + a learned table [T, w] (the position embedding), the
  // same rows for every image: at batch 1 a same-shape Add, above it the
  // table copied once per image first.
  uint32_t AddPositions(const std::string& name, uint32_t x) {
    const int64_t tokens = Shape(x)[0] / config_.batch;
    const uint32_t w =
        Weight(name + ".w", {tokens, config_.width},
               fb::Distribution::Gaussian, 0.0f, kBiasStddev);
    return Add(name, x, PerImage(name + "_rows", w));
  }

  // `rows` [n, w] repeated for each image: [B*n, w]; itself at batch 1.
  uint32_t PerImage(const std::string& name, uint32_t rows) {
    if (config_.batch == 1) return rows;
    const int64_t n = Shape(rows)[0];
    std::vector<RowSegment> segments;
    for (int64_t b = 0; b < config_.batch; ++b) {
      segments.push_back({0, 0, n, b * n});
    }
    return CopyRows(name, {rows}, segments);
  }

  // A learned row [1, w]: the MAP probe of unit variance, like the
  // activations it joins; ViT's and CLIP's class token like a bias.
  uint32_t Row(const std::string& name, float stddev) {
    return Weight(name, {1, config_.width}, fb::Distribution::Gaussian, 0.0f,
                  stddev);
  }

  // The result's rows copied from row ranges of `operands`, in order.
  uint32_t CopyRows(const std::string& name, std::vector<uint32_t> operands,
                    const std::vector<RowSegment>& segments) {
    const int64_t rows = segments.back().at + segments.back().count;
    fb::OperationT* op = NewOp(fb::OpKind::CopyRows, name,
                               std::move(operands), {rows, config_.width});
    for (const RowSegment& s : segments) ir::AppendRowSegment(s, op);
    return op->results[0];
  }

  size_t OpCount() const { return ops_.size(); }

  // The last value created is the graph's result.
  uint32_t MarkLastAsOutput() {
    values_.back()->role = fb::ValueRole::Output;
    return values_.back()->id;
  }

  // `model_shape` is the PyTorch module's shape of graph input or output
  // `id` (declared where it is not tilec's).
  void Declare(uint32_t id, const std::vector<int64_t>& model_shape) {
    ir::DeclareModelShape(model_shape, values_[id].get());
  }

  void MoveInto(fb::ModuleT* module) {
    module->values = std::move(values_);
    module->ops = std::move(ops_);
  }

 private:
  uint32_t NewValue(const std::string& name, std::vector<int64_t> shape,
                    fb::ValueRole role) {
    auto value = std::make_unique<fb::ValueT>();
    value->id = static_cast<uint32_t>(values_.size());
    value->name = name;
    value->shape = std::move(shape);
    value->dtype = fb::DType::F16;
    value->role = role;
    values_.push_back(std::move(value));
    return values_.back()->id;
  }

  uint32_t Weight(const std::string& name, std::vector<int64_t> shape,
                  fb::Distribution distribution, float mean, float stddev) {
    const uint32_t id = NewValue(name, std::move(shape), fb::ValueRole::Weight);
    SetInit(id, distribution, DeriveSeed(config_.weight_seed, id), mean,
            stddev);
    return id;
  }

  void SetInit(uint32_t id, fb::Distribution distribution, uint64_t seed,
               float mean, float stddev) {
    auto init = std::make_unique<fb::WeightInitT>();
    init->distribution = distribution;
    init->seed = seed;
    init->mean = mean;
    init->stddev = stddev;
    values_[id]->init = std::move(init);
  }

  // Creates the result value "<name>.out" and the op that produces it.
  fb::OperationT* NewOp(fb::OpKind kind, const std::string& name,
                        std::vector<uint32_t> operands,
                        std::vector<int64_t> result_shape) {
    const uint32_t result = NewValue(name + ".out", std::move(result_shape),
                                     fb::ValueRole::Activation);
    auto op = std::make_unique<fb::OperationT>();
    op->id = static_cast<uint32_t>(ops_.size());
    op->kind = kind;
    op->name = name;
    op->operands = std::move(operands);
    op->results = {result};
    ops_.push_back(std::move(op));
    return ops_.back().get();
  }

  void SetAttention(fb::OperationT* op) const {
    op->heads = static_cast<int32_t>(config_.heads);
    op->head_dim = static_cast<int32_t>(config_.head_dim());
  }

  const std::vector<int64_t>& Shape(uint32_t id) const {
    return values_[id]->shape;
  }

  const ModelConfig& config_;
  std::vector<std::unique_ptr<fb::ValueT>> values_;
  std::vector<std::unique_ptr<fb::OperationT>> ops_;
};

// LayerNorm -> up -> bias -> GELU -> down -> bias -> residual add with x.
uint32_t BuildMlpBlock(GraphBuilder& g, const ModelConfig& config,
                       const std::string& prefix, uint32_t x) {
  uint32_t h = g.LayerNorm(prefix + "ln2", x);
  h = g.MatMul(prefix + "mlp.up", h, config.mlp_width);
  h = g.BiasAdd(prefix + "mlp.up_bias", h);
  h = g.Gelu(prefix + "mlp.gelu", h);
  h = g.MatMul(prefix + "mlp.down", h, config.width);
  h = g.BiasAdd(prefix + "mlp.down_bias", h);
  return g.Add(prefix + "mlp.residual", x, h);
}

// Pre-norm attention with a fused QKV projection, then the MLP block.
uint32_t BuildLayer(GraphBuilder& g, const ModelConfig& config,
                    const std::string& prefix, uint32_t x) {
  uint32_t h = g.LayerNorm(prefix + "ln1", x);
  h = g.MatMul(prefix + "attn.qkv", h, 3 * config.width);
  const uint32_t qkv = g.BiasAdd(prefix + "attn.qkv_bias", h);
  h = g.AttentionScores(prefix + "attn.scores", {qkv}, config.tokens,
                        config.tokens);
  h = g.Softmax(prefix + "attn.softmax", h);
  h = g.AttentionContext(prefix + "attn.ctx", h, qkv);
  h = g.MatMul(prefix + "attn.proj", h, config.width);
  h = g.BiasAdd(prefix + "attn.proj_bias", h);
  const uint32_t residual = g.Add(prefix + "attn.residual", x, h);
  return BuildMlpBlock(g, config, prefix, residual);
}

// The side of the square patch grid of `tokens`, 0 if it is not a square.
int64_t GridSide(int64_t tokens) {
  int64_t side = static_cast<int64_t>(std::sqrt(static_cast<double>(tokens)));
  while (side * side > tokens) --side;
  while ((side + 1) * (side + 1) <= tokens) ++side;
  return side * side == tokens ? side : 0;
}

// The patches of one image: a square grid (tokens less the class token).
int64_t Patches(const ModelConfig& config) {
  return config.tokens - (config.class_token ? 1 : 0);
}

// The class token [1, w] before each image's patch tokens [P, w]:
// [B*(P+1), w].
uint32_t PrependClassToken(GraphBuilder& g, const ModelConfig& config,
                           uint32_t patches) {
  const uint32_t cls = g.Row("embed.class", kBiasStddev);
  const int64_t p = Patches(config);
  std::vector<RowSegment> segments;
  for (int64_t b = 0; b < config.batch; ++b) {
    segments.push_back({0, 0, 1, b * (p + 1)});
    segments.push_back({1, b * p, p, b * (p + 1) + 1});
  }
  return g.CopyRows("embed.class_concat", {cls, patches}, segments);
}

// The image [B, 3, S, S] with S = side * patch, cut into patches by the
// host (Patchify), projected to the width, given the class token where
// the model has one, the position embedding and (CLIP) a LayerNorm: the
// tokens the first layer reads.
uint32_t BuildPatchEmbedding(GraphBuilder& g, const ModelConfig& config) {
  const int64_t side = GridSide(Patches(config)) * config.patch;
  const uint32_t image =
      g.Input("pixel_values", {config.batch, kImageChannels, side, side});
  uint32_t h = g.Patchify("embed.patchify", image);
  h = g.MatMul("embed.patch", h, config.width);
  if (config.patch_bias) h = g.BiasAdd("embed.patch_bias", h);
  if (config.class_token) h = PrependClassToken(g, config, h);
  h = g.AddPositions("embed.position", h);
  if (config.pre_norm) h = g.LayerNorm("pre_ln", h);
  return h;
}

// Post-LayerNorm, then SigLIP's multihead attention pooling: the learned
// probe's query (a one-row GEMM on the device: the weights have no
// contents at import, so nothing can be folded), copied for each image,
// attends over the tokens' keys and values; out-projection, then the
// head's own MLP block.
uint32_t BuildMapHead(GraphBuilder& g, const ModelConfig& config,
                      uint32_t x) {
  x = g.LayerNorm("post_ln", x);
  uint32_t q = g.MatMul("head.attn.q", g.Row("head.probe", 1.0f),
                        config.width);
  q = g.BiasAdd("head.attn.q_bias", q);
  q = g.PerImage("head.attn.q_rows", q);
  uint32_t kv = g.MatMul("head.attn.kv", x, 2 * config.width);
  kv = g.BiasAdd("head.attn.kv_bias", kv);
  uint32_t h = g.AttentionScores("head.attn.scores", {q, kv}, 1,
                                 config.tokens);
  h = g.Softmax("head.attn.softmax", h);
  h = g.AttentionContext("head.attn.ctx", h, kv);
  h = g.MatMul("head.attn.proj", h, config.width);
  h = g.BiasAdd("head.attn.proj_bias", h);
  return BuildMlpBlock(g, config, "head.", h);
}

// ViT's and CLIP's heads read each image's class token only: picked
// first, then the final LayerNorm (per row, so picking first changes
// nothing), then ViT's classifier (with bias) or CLIP's projection
// (without).
uint32_t BuildClassTokenHead(GraphBuilder& g, const ModelConfig& config,
                             uint32_t x) {
  std::vector<RowSegment> segments;
  for (int64_t b = 0; b < config.batch; ++b) {
    segments.push_back({0, b * config.tokens, 1, b});
  }
  x = g.CopyRows("head.class_rows", {x}, segments);
  x = g.LayerNorm("post_ln", x);
  if (config.head == ModelHead::kClassifier) {
    x = g.MatMul("head.classifier", x, config.head_width);
    return g.BiasAdd("head.classifier_bias", x);
  }
  return g.MatMul("head.proj", x, config.head_width);
}

uint32_t BuildHead(GraphBuilder& g, const ModelConfig& config, uint32_t x) {
  return config.head == ModelHead::kMap ? BuildMapHead(g, config, x)
                                        : BuildClassTokenHead(g, config, x);
}

// The whole model's own limits: its image is a square grid of patches.
Status ValidateWholeModel(const ModelConfig& c) {
  TILEC_RETURN_IF_ERROR(CheckSize("patch", c.patch));
  if (c.head != ModelHead::kMap) {
    TILEC_RETURN_IF_ERROR(CheckSize("head_width", c.head_width));
  }
  if (Patches(c) < 1 || GridSide(Patches(c)) == 0) {
    return Status::BadInput(
        Flag("tokens", c.tokens) + ": --part=model needs a square grid of "
        "patches" + (c.class_token ? " plus the class token" : ""));
  }
  if (!ElementsFit({c.batch, kImageChannels, c.tokens, c.patch, c.patch})) {
    return Status::BadInput(Flag("patch", c.patch) +
                            ": the image would have more than 2^31 elements");
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

Status PresetConfig(std::string_view preset, ModelConfig* config) {
  for (const Preset& p : kPresets) {
    if (preset != p.name) continue;
    ModelConfig c;
    c.preset = p.name;
    c.tokens = p.tokens;
    c.width = p.width;
    c.mlp_width = p.mlp_width;
    c.heads = p.heads;
    c.layers = p.layers;
    c.eps = p.eps;
    c.gelu = p.gelu;
    c.patch = p.patch;
    c.head = p.head;
    c.head_width = p.head_width;
    c.class_token = p.class_token;
    c.patch_bias = p.patch_bias;
    c.pre_norm = p.pre_norm;
    *config = std::move(c);
    return Status::Ok();
  }
  std::string known;
  for (const Preset& p : kPresets) {
    known += known.empty() ? "" : ", ";
    known += p.name;
  }
  return Status::BadInput("--preset=" + std::string(preset) +
                          ": unknown preset (known: " + known + ")");
}

Status ParseModelPart(std::string_view text, ModelPart* part) {
  for (const PartName& p : kParts) {
    if (text == p.name) {
      *part = p.part;
      return Status::Ok();
    }
  }
  return Status::BadInput("--part=" + std::string(text) +
                          ": unknown part (known: mlp-block, layer, model)");
}

std::string_view ModelPartName(ModelPart part) {
  for (const PartName& p : kParts) {
    if (p.part == part) return p.name;
  }
  return "unknown";
}

Status ParseGeluForm(std::string_view text, fb::GeluForm* form) {
  for (const GeluName& g : kGeluNames) {
    if (text == g.name) {
      *form = g.form;
      return Status::Ok();
    }
  }
  return Status::BadInput("--gelu=" + std::string(text) +
                          ": unknown GELU form (known: tanh, erf, quick)");
}

std::string_view GeluFormName(fb::GeluForm form) {
  for (const GeluName& g : kGeluNames) {
    if (g.form == form) return g.name;
  }
  return "unknown";
}

void ApplyOverrides(const ModelOverrides& o, ModelConfig* config) {
  if (o.batch) config->batch = *o.batch;
  if (o.tokens) config->tokens = *o.tokens;
  if (o.width) config->width = *o.width;
  if (o.mlp_width) config->mlp_width = *o.mlp_width;
  if (o.heads) config->heads = *o.heads;
  if (o.layers) config->layers = *o.layers;
  if (o.eps) config->eps = *o.eps;
  if (o.gelu) config->gelu = *o.gelu;
  if (o.weight_seed) config->weight_seed = *o.weight_seed;
  if (o.input_seed) config->input_seed = *o.input_seed;
  if (o.repeat) config->repeat = *o.repeat;
  if (o.patch) config->patch = *o.patch;
}

Status ValidateModelConfig(const ModelConfig& c) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"batch", c.batch},         {"tokens", c.tokens}, {"width", c.width},
      {"mlp_width", c.mlp_width}, {"heads", c.heads},   {"layers", c.layers},
  };
  for (const auto& [flag, value] : sizes) {
    TILEC_RETURN_IF_ERROR(CheckSize(flag, value));
  }
  if (c.mlp_blocks < 1 || c.mlp_blocks > kMaxLayers) {
    return Status::BadInput(Flag("layers", c.mlp_blocks) +
                            ": MLP blocks must be 1 to " +
                            std::to_string(kMaxLayers));
  }
  if (c.layers > kMaxLayers) {
    return Status::BadInput(Flag("layers", c.layers) + ": must be at most " +
                            std::to_string(kMaxLayers));
  }
  if (c.width % c.heads != 0) {
    return Status::BadInput(Flag("width", c.width) + ": not divisible by " +
                            Flag("heads", c.heads));
  }
  if (!(c.eps > 0.0f) || !std::isfinite(c.eps)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", static_cast<double>(c.eps));
    return Status::BadInput("--eps=" + std::string(text) +
                            ": must be positive and finite");
  }
  if (GeluFormName(c.gelu) == "unknown") {
    return Status::BadInput(
        "--gelu=" + std::to_string(static_cast<int>(c.gelu)) +
        ": unknown GELU form");
  }
  // The largest tensors of a layer: QKV, the MLP hidden activation and its
  // weights, and the attention scores.
  const int64_t rows_elems[] = {3 * c.width, c.mlp_width};
  for (int64_t columns : rows_elems) {
    if (!ElementsFit({c.batch, c.tokens, columns})) {
      return Status::BadInput(Flag("batch", c.batch) + " " +
                              Flag("tokens", c.tokens) + ": an activation of " +
                              std::to_string(columns) +
                              " columns would have more than 2^31 elements");
    }
  }
  if (!ElementsFit({c.width, 3 * c.width}) ||
      !ElementsFit({c.width, c.mlp_width})) {
    return Status::BadInput(Flag("width", c.width) + " " +
                            Flag("mlp_width", c.mlp_width) +
                            ": a weight would have more than 2^31 elements");
  }
  if (!ElementsFit({c.batch, c.heads, c.tokens, c.tokens})) {
    return Status::BadInput(
        Flag("batch", c.batch) + " " + Flag("heads", c.heads) + " " +
        Flag("tokens", c.tokens) +
        ": the attention scores would have more than 2^31 elements");
  }
  return Status::Ok();
}

uint64_t DeriveSeed(uint64_t base, uint32_t value_id) {
  // splitmix64 (Steele, Lea, Flood 2014): one step from the combined state.
  uint64_t z = (base ^ value_id) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Status BuildModel(const ModelConfig& config, ModelPart part,
                  fb::ModuleT* module) {
  TILEC_RETURN_IF_ERROR(ValidateModelConfig(config));
  const bool whole = part == ModelPart::kModel;
  if (whole) TILEC_RETURN_IF_ERROR(ValidateWholeModel(config));

  // A part's input and output are token rows [B*T, w] here and
  // [B, T, w] in the PyTorch module, so --inputs and output files take
  // the module's shape; the whole model's image [B, 3, S, S] and pooled
  // output [B, w'] are the module's shapes already.
  const std::vector<int64_t> module_tokens = {config.batch, config.tokens,
                                              config.width};
  GraphBuilder g(config);
  uint32_t x = whole ? BuildPatchEmbedding(g, config)
                     : g.Input("x", {config.rows(), config.width});
  if (!whole) g.Declare(x, module_tokens);
  int64_t layers = 1;
  // Op ranges of the identical layers, rolled into a repeat below.
  std::vector<std::pair<size_t, size_t>> layer_ops;
  auto build_layers = [&](auto build_one) {
    for (int64_t i = 0; i < layers; ++i) {
      const size_t begin = g.OpCount();
      x = build_one(g, config, "l" + std::to_string(i) + ".", x);
      layer_ops.emplace_back(begin, g.OpCount());
    }
  };
  switch (part) {
    case ModelPart::kMlpBlock:
      layers = config.mlp_blocks;
      build_layers(BuildMlpBlock);
      break;
    case ModelPart::kLayer:
      BuildLayer(g, config, "l0.", x);
      break;
    case ModelPart::kModel:
      layers = config.layers;
      build_layers(BuildLayer);
      BuildHead(g, config, x);
      break;
  }
  const uint32_t output = g.MarkLastAsOutput();
  if (!whole) g.Declare(output, module_tokens);

  auto model = std::make_unique<fb::ModelT>();
  model->preset = config.preset;
  model->part = std::string(ModelPartName(part));
  // Validation bounded every size by int32.
  model->layers = static_cast<int32_t>(layers);
  model->batch = static_cast<int32_t>(config.batch);
  model->tokens = static_cast<int32_t>(config.tokens);
  model->width = static_cast<int32_t>(config.width);
  model->mlp_width = static_cast<int32_t>(config.mlp_width);
  model->heads = static_cast<int32_t>(config.heads);
  model->weight_seed = config.weight_seed;
  model->input_seed = config.input_seed;

  g.MoveInto(module);
  module->model = std::move(model);
  if (!config.repeat) return Status::Ok();
  return RollLayers(layer_ops, module);
}

Status BuildModel(std::string_view preset, std::string_view part,
                  const ModelOverrides& overrides, fb::ModuleT* module) {
  ModelConfig config;
  TILEC_RETURN_IF_ERROR(PresetConfig(preset, &config));
  ModelPart model_part;
  TILEC_RETURN_IF_ERROR(ParseModelPart(part, &model_part));
  ApplyOverrides(overrides, &config);
  // One layer is one layer whatever --layers says (scripts pass one set of
  // model flags with several parts).
  if (overrides.layers && model_part == ModelPart::kMlpBlock) {
    config.mlp_blocks = *overrides.layers;
  }
  return BuildModel(config, model_part, module);
}

}  // namespace tilec::passes
