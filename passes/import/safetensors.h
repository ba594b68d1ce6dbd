// Pretrained weights for import-model: a checkpoint in the safetensors
// layout (an 8-byte little-endian header length, a JSON header naming each
// tensor's dtype, shape and [begin, end) byte range of the data section,
// then the data) with the tensor names of the SigLIP / CLIP vision towers
// (Hugging Face's SiglipVisionModel, CLIPVisionModel):
//
//   <prefix>encoder.layers.N.layer_norm1.{weight,bias}   -> lN.ln1.{gamma,beta}
//   <prefix>encoder.layers.N.self_attn.{q,k,v}_proj.weight [out, in]
//        -> lN.attn.qkv.w [in, 3*out]: the three transposed, side by side
//   <prefix>encoder.layers.N.self_attn.{q,k,v}_proj.bias  -> lN.attn.qkv_bias.b
//   <prefix>encoder.layers.N.self_attn.out_proj.{weight,bias}
//        -> lN.attn.proj.w (transposed), lN.attn.proj_bias.b
//   <prefix>encoder.layers.N.layer_norm2.{weight,bias}   -> lN.ln2.{gamma,beta}
//   <prefix>encoder.layers.N.mlp.fc1.{weight,bias}        -> lN.mlp.up.w,
//   up_bias.b <prefix>encoder.layers.N.mlp.fc2.{weight,bias}        ->
//   lN.mlp.down.w, down_bias.b
//
// A whole SigLIP or CLIP model (--part=model) also reads, with the same
// prefix:
//
//   embeddings.patch_embedding.weight [w, 3, p, p] -> embed.patch.w
//        [3pp, w] (Patchify's (c, ky, kx) columns), .bias -> patch_bias.b
//   embeddings.position_embedding.weight [T, w]   -> embed.position.w
//   post_layernorm.{weight,bias}                  -> post_ln.{gamma,beta}
//   head.probe [1, 1, w]                          -> head.probe [1, w]
//   head.attention.in_proj_weight [3w, w]: rows [q | k | v]
//        -> head.attn.q.w [w, w] and head.attn.kv.w [w, 2w] (transposed)
//   head.attention.in_proj_bias [3w] -> head.attn.q_bias.b, kv_bias.b
//   head.attention.out_proj.{weight,bias} -> head.attn.proj.w, proj_bias.b
//   head.layernorm.{weight,bias}                  -> head.ln2.{gamma,beta}
//   head.mlp.fc1/fc2.{weight,bias}  -> head.mlp.up/down.w, up/down_bias.b
//
// and CLIP's, where the patch convolution has no bias:
//
//   embeddings.class_embedding [w]                -> embed.class [1, w]
//   pre_layrnorm.{weight,bias} (Hugging Face's spelling) -> pre_ln.*
//   visual_projection.weight [768, w], beside the tower: the prefix less
//        a trailing "vision_model."                -> head.proj.w [w, 768]
//
// <prefix> is whatever precedes "encoder.layers.0.self_attn.q_proj.weight"
// in the checkpoint ("vision_model." for a saved SiglipVisionModel, "" for
// a bare encoder). Layer lN of the graph reads layer N + first_layer.
//
// Hugging Face's ViTModel / ViTForImageClassification checkpoints, found by
// "<prefix>encoder.layer.0.attention.attention.query.weight" ("vit." in a
// ViTForImageClassification, "" in a ViTModel), name a layer's tensors
//
//   <prefix>encoder.layer.N.layernorm_before / layernorm_after -> ln1 / ln2
//   <prefix>encoder.layer.N.attention.attention.{query,key,value}
//        -> lN.attn.qkv.w, qkv_bias.b (as q_proj, k_proj, v_proj above)
//   <prefix>encoder.layer.N.attention.output.dense -> lN.attn.proj.*
//   <prefix>encoder.layer.N.intermediate.dense / output.dense
//        -> lN.mlp.up.* / lN.mlp.down.*
//
// and, for --part=model (vit-b16-224's class token and classifier):
//
//   embeddings.patch_embeddings.projection.{weight,bias} -> embed.patch.w,
//        patch_bias.b (as SigLIP's patch embedding)
//   embeddings.cls_token [1, 1, w]                -> embed.class [1, w]
//   embeddings.position_embeddings [1, T, w]      -> embed.position.w
//   layernorm.{weight,bias}                       -> post_ln.{gamma,beta}
//   classifier.{weight,bias} [classes, w], beside the tower: the prefix
//        less a trailing "vit."  -> head.classifier.w (transposed),
//        classifier_bias.b
//
// A ViTModel checkpoint has no classifier: it serves the layer parts, and
// --part=model exits 2 naming 'classifier.weight'.

// Tensors may be F32, F16 or BF16; every element is decoded exactly to F32
// and written to the sidecar (sidecar.h); the weight keeps its IR dtype
// (F16) and is rounded to it when materialized. A missing tensor, a wrong
// shape or dtype, a truncated file, a header that lies about its offsets
// (a range outside the data section, a size that disagrees with dtype and
// shape, overlapping ranges): BadInput naming the tensor and the file.

#ifndef TILEC_PASSES_IMPORT_SAFETENSORS_H_
#define TILEC_PASSES_IMPORT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/import/sidecar.h"

namespace tilec::passes {

// One tensor of the header.
struct SafetensorsEntry {
  std::string dtype;  // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

// An open checkpoint: its header parsed and checked, data read on demand.
class SafetensorsFile {
 public:
  // Reads and validates the header of `path`; `name` is used in messages.
  static Status Open(const std::string& path, SafetensorsFile* file);

  const std::string& name() const { return name_; }
  const std::map<std::string, SafetensorsEntry>& entries() const {
    return entries_;
  }
  // The tensor `tensor` as F32, checked against `shape`.
  Status Read(const std::string& tensor, const std::vector<int64_t>& shape,
              std::vector<float>* data) const;

 private:
  std::string path_;
  std::string name_;
  uint64_t data_begin_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
};

// Replaces the init of every Weight value of a graph import-model built
// (model_builder.h naming) with a Sidecar holding the checkpoint's tensor,
// transformed as the table above says. The module is not modified on error.
Status LoadSafetensorsWeights(const SafetensorsFile& file, int64_t first_layer,
                              SidecarBuilder* sidecar, fb::ModuleT* module);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_IMPORT_SAFETENSORS_H_
