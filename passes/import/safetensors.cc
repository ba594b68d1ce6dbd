#include "passes/import/safetensors.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "kernels/numerics.h"

namespace tilec::passes {
namespace {

// The format allows 100 MB, but a JSON tree costs about 72 times its text
// (7 GB for 100 MB); real checkpoints' headers are well under 1 MB.
constexpr uint64_t kMaxHeaderBytes = 8'000'000;
// A header nests 3 deep ({name: {shape: [...]}}); anything far deeper is
// no checkpoint, and nesting is what makes the JSON tree expensive.
constexpr int kMaxHeaderDepth = 32;

// The deepest nesting of [ and { in `json`, outside strings.
int JsonDepth(const std::string& json) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : json) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

int DTypeBytes(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") {
    return 2;
  }
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" ||
      dtype == "F8_E5M2") {
    return 1;
  }
  return 0;
}

std::string Shape(const std::vector<int64_t>& s) {
  return ir::ShapeToString(s);
}

Status ParseEntry(const std::string& name, const nlohmann::json& j,
                  uint64_t data_bytes, const std::string& where,
                  SafetensorsEntry* e) {
  const std::string what = where + ": tensor '" + name + "'";
  if (!j.is_object() || !j.contains("dtype") || !j["dtype"].is_string() ||
      !j.contains("shape") || !j["shape"].is_array() ||
      !j.contains("data_offsets") || !j["data_offsets"].is_array() ||
      j["data_offsets"].size() != 2) {
    return Status::BadInput(what +
                            ": header entry lacks dtype, shape or "
                            "data_offsets [begin, end]");
  }
  e->dtype = j["dtype"].get<std::string>();
  uint64_t elements = 1;
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
      return Status::BadInput(what +
                              ": shape has a dimension that is not a "
                              "small non-negative integer");
    }
    const uint64_t extent = d.get<uint64_t>();
    e->shape.push_back(static_cast<int64_t>(extent));
    // Checked before multiplying: [2^40, 2^24] must not wrap to 0.
    if (extent != 0 && elements > (uint64_t{1} << 48) / extent) {
      return Status::BadInput(what + ": more than 2^48 elements");
    }
    elements *= extent;
  }
  const auto& offsets = j["data_offsets"];
  if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    return Status::BadInput(what + ": data_offsets are not byte offsets");
  }
  e->begin = offsets[0].get<uint64_t>();
  e->end = offsets[1].get<uint64_t>();
  if (e->begin > e->end || e->end > data_bytes) {
    return Status::BadInput(
        what + ": data_offsets [" + std::to_string(e->begin) + ", " +
        std::to_string(e->end) + ") lie outside the data section (" +
        std::to_string(data_bytes) + " bytes)");
  }
  const int width = DTypeBytes(e->dtype);
  if (width > 0 && e->end - e->begin != elements * width) {
    return Status::BadInput(what + ": data_offsets hold " +
                            std::to_string(e->end - e->begin) + " bytes, " +
                            e->dtype + Shape(e->shape) + " needs " +
                            std::to_string(elements * width));
  }
  return Status::Ok();
}

}  // namespace

Status SafetensorsFile::Open(const std::string& path, SafetensorsFile* file) {
  SafetensorsFile f;
  f.path_ = path;
  f.name_ = path;
  TILEC_RETURN_IF_ERROR(ir::RequireRegularFile(path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::BadInput(f.name_ + ": cannot open");
  in.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char prefix[8];
  if (size < 8 || !in.read(reinterpret_cast<char*>(prefix), 8)) {
    return Status::BadInput(f.name_ +
                            ": truncated: no safetensors header "
                            "length");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | prefix[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > size - 8) {
    return Status::BadInput(f.name_ +
                            ": truncated or not safetensors: the "
                            "header length " +
                            std::to_string(header_bytes) +
                            " exceeds the file (" + std::to_string(size) +
                            " bytes) or " +
                            std::to_string(kMaxHeaderBytes) +
                            " bytes, the most a header may have");
  }
  std::string header(header_bytes, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_bytes))) {
    return Status::BadInput(f.name_ + ": cannot read the header");
  }
  if (JsonDepth(header) > kMaxHeaderDepth) {
    return Status::BadInput(f.name_ + ": the safetensors header nests more "
                            "than " + std::to_string(kMaxHeaderDepth) +
                            " deep");
  }
  nlohmann::json j = nlohmann::json::parse(header, nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::BadInput(f.name_ +
                            ": the safetensors header is not a "
                            "JSON object");
  }
  f.data_begin_ = 8 + header_bytes;
  const uint64_t data_bytes = size - f.data_begin_;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") continue;
    SafetensorsEntry e;
    TILEC_RETURN_IF_ERROR(ParseEntry(name, value, data_bytes, f.name_, &e));
    f.entries_.emplace(name, std::move(e));
  }
  // Ranges must not overlap: a header that reuses bytes lies about them. An
  // empty tensor holds no bytes (writers put it at any boundary).
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> by_begin;
  for (const auto& [name, e] : f.entries_) {
    if (e.end > e.begin) by_begin.emplace_back(&name, &e);
  }
  std::sort(by_begin.begin(), by_begin.end(), [](const auto& a, const auto& b) {
    return a.second->begin < b.second->begin;
  });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    if (by_begin[i].second->begin < by_begin[i - 1].second->end) {
      return Status::BadInput(f.name_ + ": tensor '" + *by_begin[i].first +
                              "' overlaps tensor '" + *by_begin[i - 1].first +
                              "' in the data section");
    }
  }
  *file = std::move(f);
  return Status::Ok();
}

Status SafetensorsFile::Read(const std::string& tensor,
                             const std::vector<int64_t>& shape,
                             std::vector<float>* data) const {
  const std::string what = name_ + ": tensor '" + tensor + "'";
  auto it = entries_.find(tensor);
  if (it == entries_.end()) return Status::BadInput(what + " is missing");
  const SafetensorsEntry& e = it->second;
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16") {
    return Status::BadInput(what + " is " + e.dtype +
                            ", expected F32, F16 or BF16");
  }
  if (e.shape != shape) {
    return Status::BadInput(what + " has shape " + Shape(e.shape) +
                            ", the model needs " + Shape(shape));
  }
  std::string bytes(e.end - e.begin, '\0');
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_begin_ + e.begin));
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return Status::BadInput(what + ": cannot read its data");
  }
  const int width = DTypeBytes(e.dtype);
  data->resize(bytes.size() / width);
  for (size_t i = 0; i < data->size(); ++i) {
    const unsigned char* p =
        reinterpret_cast<const unsigned char*>(bytes.data()) + i * width;
    if (width == 4) {
      std::memcpy(&(*data)[i], p, 4);  // little-endian hosts only
    } else {
      const uint16_t bits = static_cast<uint16_t>(p[0] | p[1] << 8);
      (*data)[i] = e.dtype == "F16" ? kernels::F16Decode(bits)
                                    : kernels::Bf16Decode(bits);
    }
  }
  return Status::Ok();
}

namespace {

// [rows, cols] -> [cols, rows].
std::vector<float> Transposed(const std::vector<float>& m, int64_t rows,
                              int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = m[r * cols + c];
  }
  return t;
}

// The modules of one encoder layer in a checkpoint family, after the
// layer's prefix (each holds .weight and .bias).
struct LayerNames {
  const char* ln1;
  const char* ln2;
  const char* qkv[3];  // q, k, v
  const char* attn_out;
  const char* fc1;
  const char* fc2;
};

// Hugging Face's SiglipVisionModel and CLIPVisionModel (and SigLIP's head
// MLP, named as a layer's MLP).
constexpr LayerNames kSiglipLayer = {
    "layer_norm1",        "layer_norm2",
    {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
    "self_attn.out_proj", "mlp.fc1",
    "mlp.fc2"};
// Hugging Face's ViTModel and ViTForImageClassification.
constexpr LayerNames kVitLayer = {
    "layernorm_before",
    "layernorm_after",
    {"attention.attention.query", "attention.attention.key",
     "attention.attention.value"},
    "attention.output.dense",
    "intermediate.dense",
    "output.dense"};

// The contents of the graph weight `rest` of a layer (the name after
// "l<i>.") from the checkpoint's tensors `prefix` + `names`, in tilec's
// orientation.
Status WeightContents(const SafetensorsFile& file, const std::string& prefix,
                      const LayerNames& names, const std::string& rest,
                      const std::vector<int64_t>& shape,
                      std::vector<float>* data) {
  auto plain = [&](const char* module, const char* field) {
    return file.Read(prefix + module + field, shape, data);
  };
  // A PyTorch Linear weight [out, in] as tilec's [in, out].
  auto linear = [&](const char* module) {
    std::vector<float> w;
    TILEC_RETURN_IF_ERROR(file.Read(prefix + module + ".weight",
                                    {shape[1], shape[0]}, &w));
    *data = Transposed(w, shape[1], shape[0]);
    return Status::Ok();
  };
  if (rest == "ln1.gamma") return plain(names.ln1, ".weight");
  if (rest == "ln1.beta") return plain(names.ln1, ".bias");
  if (rest == "ln2.gamma") return plain(names.ln2, ".weight");
  if (rest == "ln2.beta") return plain(names.ln2, ".bias");
  if (rest == "attn.proj.w") return linear(names.attn_out);
  if (rest == "attn.proj_bias.b") return plain(names.attn_out, ".bias");
  if (rest == "mlp.up.w") return linear(names.fc1);
  if (rest == "mlp.up_bias.b") return plain(names.fc1, ".bias");
  if (rest == "mlp.down.w") return linear(names.fc2);
  if (rest == "mlp.down_bias.b") return plain(names.fc2, ".bias");
  if (rest == "attn.qkv.w") {
    // [in, 3*out] with columns [q | k | v].
    const int64_t in = shape[0], out = shape[1] / 3;
    data->assign(static_cast<size_t>(in * 3 * out), 0.0f);
    for (int p = 0; p < 3; ++p) {
      std::vector<float> w;
      TILEC_RETURN_IF_ERROR(file.Read(
          prefix + names.qkv[p] + ".weight", {out, in}, &w));
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          (*data)[i * 3 * out + p * out + o] = w[o * in + i];
        }
      }
    }
    return Status::Ok();
  }
  if (rest == "attn.qkv_bias.b") {
    const int64_t out = shape[0] / 3;
    data->clear();
    for (int p = 0; p < 3; ++p) {
      std::vector<float> b;
      TILEC_RETURN_IF_ERROR(
          file.Read(prefix + names.qkv[p] + ".bias", {out}, &b));
      data->insert(data->end(), b.begin(), b.end());
    }
    return Status::Ok();
  }
  return Status::Internal("no checkpoint tensor for the graph weight '" + rest +
                          "'");
}

// Rows [begin, end) of a PyTorch [rows, in] weight as tilec's [in, rows].
Status LinearRows(const SafetensorsFile& file, const std::string& name,
                  const std::vector<int64_t>& stored, int64_t begin,
                  int64_t end, std::vector<float>* data) {
  std::vector<float> w;
  TILEC_RETURN_IF_ERROR(file.Read(name, stored, &w));
  const int64_t in = stored[1];
  std::vector<float> rows(w.begin() + begin * in, w.begin() + end * in);
  *data = Transposed(rows, end - begin, in);
  return Status::Ok();
}

// Elements [begin, begin + count) of a vector tensor of `size` elements.
Status Slice(const SafetensorsFile& file, const std::string& name,
             int64_t size, int64_t begin, int64_t count,
             std::vector<float>* data) {
  std::vector<float> v;
  TILEC_RETURN_IF_ERROR(file.Read(name, {size}, &v));
  data->assign(v.begin() + begin, v.begin() + begin + count);
  return Status::Ok();
}

// What precedes the tower's own prefix `tower`, where the modules beside
// it live: "" for "vision_model." in a CLIPVisionModelWithProjection
// checkpoint (its visual_projection), for "vit." in a
// ViTForImageClassification one (its classifier).
std::string TowerRoot(const std::string& prefix, const std::string& tower) {
  if (prefix.size() >= tower.size() &&
      prefix.compare(prefix.size() - tower.size(), tower.size(), tower) == 0) {
    return prefix.substr(0, prefix.size() - tower.size());
  }
  return prefix;
}

// A patch convolution's weight [w, 3, p, p] as tilec's [3pp, w] in
// Patchify's (c, ky, kx) column order.
Status PatchWeight(const SafetensorsFile& file, const std::string& tensor,
                   const std::vector<int64_t>& shape,
                   std::vector<float>* data) {
  const int64_t w = shape[1];
  const auto p = static_cast<int64_t>(
      std::lround(std::sqrt(static_cast<double>(shape[0] / 3))));
  std::vector<float> conv;
  TILEC_RETURN_IF_ERROR(file.Read(tensor, {w, 3, p, p}, &conv));
  *data = Transposed(conv, w, shape[0]);
  return Status::Ok();
}

// The weights of a whole SigLIP or CLIP model outside its layers (model_builder.h):
// the patch and position embeddings, CLIP's class token and ln_pre,
// post-LayerNorm, and SigLIP's MAP head (whose nn.MultiheadAttention keeps
// q, k and v in one in_proj [3w, w]) or CLIP's projection.
Status TowerWeightContents(const SafetensorsFile& file,
                           const std::string& prefix, const std::string& name,
                           const std::vector<int64_t>& shape,
                           std::vector<float>* data) {
  auto plain = [&](const std::string& tensor) {
    return file.Read(prefix + tensor, shape, data);
  };
  const std::string head = "head.";
  if (name == "embed.patch.w") {
    return PatchWeight(file, prefix + "embeddings.patch_embedding.weight",
                       shape, data);
  }
  if (name == "embed.patch_bias.b") {
    return plain("embeddings.patch_embedding.bias");
  }
  if (name == "embed.position.w") {
    return plain("embeddings.position_embedding.weight");
  }
  if (name == "embed.class") {
    return file.Read(prefix + "embeddings.class_embedding", {shape[1]}, data);
  }
  // Hugging Face's CLIP spells its ln_pre "pre_layrnorm".
  if (name == "pre_ln.gamma") return plain("pre_layrnorm.weight");
  if (name == "pre_ln.beta") return plain("pre_layrnorm.bias");
  if (name == "head.proj.w") {
    // CLIP's projection sits beside the tower, not in it.
    return LinearRows(file,
                      TowerRoot(prefix, "vision_model.") +
                          "visual_projection.weight",
                      {shape[1], shape[0]}, 0, shape[1], data);
  }
  if (name == "post_ln.gamma") return plain("post_layernorm.weight");
  if (name == "post_ln.beta") return plain("post_layernorm.bias");
  if (name == "head.probe") {
    return file.Read(prefix + "head.probe", {1, 1, shape[1]}, data);
  }
  // in_proj [3w, w]: rows [q | k | v]; the graph's kv is [k | v].
  const std::string in_proj = prefix + "head.attention.in_proj_";
  if (name == "head.attn.q.w" || name == "head.attn.kv.w") {
    const int64_t w = shape[0];
    const int64_t begin = name == "head.attn.q.w" ? 0 : w;
    return LinearRows(file, in_proj + "weight", {3 * w, w}, begin,
                      begin + shape[1], data);
  }
  if (name == "head.attn.q_bias.b" || name == "head.attn.kv_bias.b") {
    const bool q = name == "head.attn.q_bias.b";
    const int64_t w = q ? shape[0] : shape[0] / 2;
    return Slice(file, in_proj + "bias", 3 * w, q ? 0 : w, shape[0], data);
  }
  if (name == "head.attn.proj.w") {
    return LinearRows(file, prefix + "head.attention.out_proj.weight",
                      {shape[1], shape[0]}, 0, shape[1], data);
  }
  if (name == "head.attn.proj_bias.b") {
    return plain("head.attention.out_proj.bias");
  }
  if (name == "head.ln2.gamma") return plain("head.layernorm.weight");
  if (name == "head.ln2.beta") return plain("head.layernorm.bias");
  // The head's MLP is named as a layer's.
  if (name.compare(0, head.size(), head) == 0) {
    return WeightContents(file, prefix + head, kSiglipLayer,
                          name.substr(head.size()), shape, data);
  }
  return Status::Internal("weight '" + name +
                          "' does not follow import-model's naming");
}

// The weights of a whole Hugging Face ViT outside its layers: the patch
// embedding, class token and positions (both [1, T, w] in the checkpoint),
// the final LayerNorm and ViTForImageClassification's classifier, beside
// the "vit." tower.
Status VitTowerWeightContents(const SafetensorsFile& file,
                              const std::string& prefix,
                              const std::string& name,
                              const std::vector<int64_t>& shape,
                              std::vector<float>* data) {
  auto plain = [&](const std::string& tensor) {
    return file.Read(prefix + tensor, shape, data);
  };
  if (name == "embed.patch.w") {
    return PatchWeight(
        file, prefix + "embeddings.patch_embeddings.projection.weight", shape,
        data);
  }
  if (name == "embed.patch_bias.b") {
    return plain("embeddings.patch_embeddings.projection.bias");
  }
  if (name == "embed.class") {
    return file.Read(prefix + "embeddings.cls_token", {1, 1, shape[1]}, data);
  }
  if (name == "embed.position.w") {
    return file.Read(prefix + "embeddings.position_embeddings",
                     {1, shape[0], shape[1]}, data);
  }
  if (name == "post_ln.gamma") return plain("layernorm.weight");
  if (name == "post_ln.beta") return plain("layernorm.bias");
  const std::string root = TowerRoot(prefix, "vit.");
  if (name == "head.classifier.w") {
    return LinearRows(file, root + "classifier.weight", {shape[1], shape[0]},
                      0, shape[1], data);
  }
  if (name == "head.classifier_bias.b") {
    return file.Read(root + "classifier.bias", shape, data);
  }
  return Status::Internal("weight '" + name +
                          "' does not follow import-model's naming");
}

using TowerContents = Status (*)(const SafetensorsFile& file,
                                 const std::string& prefix,
                                 const std::string& name,
                                 const std::vector<int64_t>& shape,
                                 std::vector<float>* data);

// A checkpoint family: where its layers are and how they and the tensors
// around them are named.
struct Family {
  const char* layers;  // the layer N prefix is layers + "N."
  const LayerNames* layer;
  TowerContents tower;
  // The tensor whose name ends in Anchor() fixes the checkpoint's prefix.
  std::string Anchor() const {
    return std::string(layers) + "0." + layer->qkv[0] + ".weight";
  }
};

constexpr Family kFamilies[] = {
    {"encoder.layers.", &kSiglipLayer, TowerWeightContents},
    {"encoder.layer.", &kVitLayer, VitTowerWeightContents},
};

// The family of `file` and the prefix its anchor has; false if none.
bool FindFamily(const SafetensorsFile& file, const Family** family,
                std::string* prefix) {
  for (const Family& f : kFamilies) {
    const std::string anchor = f.Anchor();
    for (const auto& [name, e] : file.entries()) {
      if (name.size() >= anchor.size() &&
          name.compare(name.size() - anchor.size(), anchor.size(), anchor) ==
              0) {
        *family = &f;
        *prefix = name.substr(0, name.size() - anchor.size());
        return true;
      }
    }
  }
  return false;
}

}  // namespace

Status LoadSafetensorsWeights(const SafetensorsFile& file, int64_t first_layer,
                              SidecarBuilder* sidecar, fb::ModuleT* module) {
  const Family* family = nullptr;
  std::string prefix;
  if (!FindFamily(file, &family, &prefix)) {
    return Status::BadInput(
        file.name() + ": " +
        (file.entries().empty()
             ? std::string("the checkpoint holds no tensors")
             : "no tensor '[prefix]" + kFamilies[0].Anchor() +
                   "' or '[prefix]" + kFamilies[1].Anchor() +
                   "': not a SigLIP/CLIP vision tower or ViT checkpoint"));
  }
  size_t weight_bytes = 0;
  for (const auto& v : module->values) {
    if (v->role != fb::ValueRole::Weight) continue;
    size_t count = 1;
    for (int64_t d : v->shape) count *= static_cast<size_t>(d);
    weight_bytes += count * sizeof(float);
  }
  sidecar->Reserve(weight_bytes);
  std::vector<std::pair<fb::ValueT*, std::unique_ptr<fb::SidecarT>>> loaded;
  for (const auto& v : module->values) {
    if (v->role != fb::ValueRole::Weight) continue;
    // "l<i>.<rest>" in a layer, anything else around the layers.
    const size_t dot = v->name.find('.');
    const bool in_layer = v->name.size() >= 2 && v->name[0] == 'l' &&
                          dot != std::string::npos && dot > 1 &&
                          std::isdigit(static_cast<unsigned char>(v->name[1]));
    std::vector<float> data;
    if (in_layer) {
      const int64_t layer =
          std::stoll(v->name.substr(1, dot - 1)) + first_layer;
      const std::string layer_prefix =
          prefix + family->layers + std::to_string(layer) + ".";
      TILEC_RETURN_IF_ERROR(WeightContents(file, layer_prefix, *family->layer,
                                           v->name.substr(dot + 1), v->shape,
                                           &data));
    } else {
      TILEC_RETURN_IF_ERROR(
          family->tower(file, prefix, v->name, v->shape, &data));
    }
    loaded.emplace_back(v.get(), sidecar->Append(data));
  }
  for (auto& [value, s] : loaded) {
    value->sidecar = std::move(s);
    value->init = nullptr;
  }
  return Status::Ok();
}

}  // namespace tilec::passes
