// The library behind `import-onnx`: an ONNX model (opsets 13-17 of the
// default domain) becomes a tilec graph in the conventions of
// passes/import/model_builder.h, so that the planner compiles it exactly
// like a graph from import-model.
//
// How it works
//   1. Every node is visited once in file order. Its outputs get shapes and
//      element types; nodes whose inputs are all constant are evaluated
//      (shape arithmetic: Shape, Gather, Unsqueeze, Concat, Slice, Cast,
//      integer and float elementwise math, Reshape, ...), so a Reshape whose
//      target is computed from Shape(x) has a constant target.
//   2. From the graph outputs backwards, each tensor that tilec must hold is
//      matched against the forms exporters emit, and the matched form
//      becomes tilec ops (docs/import-onnx.md lists them):
//        MatMul + Add, Gemm (transA/transB/alpha/beta) -> MatMul, BiasAdd
//        LayerNormalization, and its decomposed forms -> LayerNorm
//        GELU in its erf, tanh and sigmoid (quick) forms -> Gelu
//        Reshape/Transpose/MatMul/Softmax attention over q, k, v
//          projections of one tensor -> fused QKV MatMul + BiasAdd,
//          AttentionScores, Softmax, AttentionContext
//        Softmax over the last axis, and its decomposed form -> Softmax
//        Conv with stride = kernel (patch embedding) then flatten and
//          transpose -> Patchify, MatMul, BiasAdd
//        Cast between float types -> Cast (nothing, when both map to the
//          same tilec dtype), Add of two activations -> Add, a scalar Mul
//          or Div -> Fused Scale.
//        Other Add, Sub, Mul, Div, Pow (same shapes, a row parameter or a
//          constant scalar), Sqrt, Tanh, Erf, Sigmoid, Relu -> Fused of one
//          Unary or Binary step (import_elementwise.h).
//        Concat, Gather (constant indices), Slice (constant bounds, step
//          1), Expand and a broadcasting Add over leading dims, all on any
//          axis but the last -> CopyRows (then Add): a class token, its
//          pick for the head, a position table per image.
//        nn.MultiheadAttention(batch_first=True) over a constant probe
//          repeated per image (SigLIP's MAP head) -> the probe's q MatMul,
//          BiasAdd, CopyRows per image, kv MatMul over [Wk | Wv], BiasAdd,
//          cross AttentionScores, Softmax, AttentionContext.
//        ReduceMean over the tokens -> MatMul of a constant averaging
//          matrix by the tokens.
//      Reshape, Flatten, Squeeze, Unsqueeze, Identity and a Transpose that
//      keeps the axes of more than one element in order do not move data
//      (tilec values are row-major) and become nothing.
//   3. Anything else that an output depends on is an Infeasible error
//      (exit 3) naming the node, its op type and the opset:
//      "node '/mlp/Sin' (Sin, opset 17): ...". Nodes no output needs are
//      ignored.
//
// Values: graph inputs keep their ONNX names (role Input, a Gaussian(0, 1)
// init so the graph runs without --inputs); graph outputs keep theirs
// (role Output); other values are named after the ONNX tensor they hold.
// Activations are 2-D [rows, width] with rows the product of the leading
// ONNX dimensions (an image input stays [B, C, H, W]). Weights (role
// Weight) are the model's initializers and constants, transformed as tilec
// needs them (transposed into [in, out], concatenated for fused QKV,
// flattened for Patchify) and written as little-endian F32 into one
// sidecar byte string; each Weight's Sidecar names `sidecar_path`, its
// offset, size and FNV-1a 64 checksum. Uniform constants (a missing
// LayerNorm beta) get a Constant init instead.

#ifndef TILEC_PASSES_ONNX_IMPORT_ONNX_H_
#define TILEC_PASSES_ONNX_IMPORT_ONNX_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "onnx/onnx_pb.h"

namespace tilec::passes {

// The default-domain opsets import-onnx is written and tested against.
inline constexpr int64_t kMinOnnxOpset = 13;
inline constexpr int64_t kMaxOnnxOpset = 17;

// How ONNX float types become tilec dtypes.
enum class OnnxDTypePolicy {
  kF16,   // every float tensor F16: tilec's convention (the default)
  kF32,   // every float tensor F32
  kKeep,  // FLOAT -> F32, FLOAT16 -> F16, BFLOAT16 -> BF16; DOUBLE refused
};

// "f16", "f32", "keep".
Status ParseOnnxDTypePolicy(std::string_view text, OnnxDTypePolicy* policy);

struct OnnxImportOptions {
  OnnxDTypePolicy dtype = OnnxDTypePolicy::kF16;
  // One MatMul over [Wq | Wk | Wv] where the exporter wrote three
  // projections of the same tensor. Off: Infeasible (tilec's attention ops
  // read one fused qkv value).
  bool fuse_qkv = true;
  // Graph outputs to import, by name; empty: all of them.
  std::vector<std::string> outputs;
  // The path Weight values' Sidecar records (relative to the IR's
  // directory, normally the sidecar file's base name).
  std::string sidecar_path = "weights.bin";
  // Directory that external tensor data is resolved against.
  std::string model_dir = ".";
  // The value of a symbolic first dimension of the graph inputs (a dynamic
  // batch), recorded as the module's batch. Any other symbolic dimension is
  // Infeasible; a batch other than 1 for a model without a symbolic one is
  // BadInput (its batch was fixed at export).
  int64_t batch = 1;
  // Seeds of the inputs' Gaussian inits (as import-model's --input_seed).
  uint64_t input_seed = 2;
  // Used in messages, e.g. the model's file name.
  std::string model_name = "model.onnx";
};

// Parses a serialized ModelProto. Malformed or truncated bytes: BadInput
// naming `name`.
Status ParseOnnxModel(std::string_view bytes, const std::string& name,
                      ::onnx::ModelProto* model);

// Replaces module->values, module->ops and module->model with the graph of
// `model` and fills *sidecar with the weights' bytes. BadInput for a model
// that breaks ONNX's own rules (an undefined tensor name, a missing
// default-domain opset), Infeasible for a valid model tilec cannot
// represent. On error the module is not modified.
Status ImportOnnx(const ::onnx::ModelProto& model,
                  const OnnxImportOptions& options, fb::ModuleT* module,
                  std::string* sidecar);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_ONNX_IMPORT_ONNX_H_
