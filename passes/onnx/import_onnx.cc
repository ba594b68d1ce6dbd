#include "passes/onnx/import_onnx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>

#include "formats/ir.h"
#include "formats/large_stack.h"
#include "formats/op_shapes.h"
#include "passes/import/model_builder.h"
#include "passes/onnx/import_elementwise.h"
#include "passes/onnx/importer.h"

namespace tilec::passes {
namespace onnx_import {

int64_t Elements(const Shape& s) { return Product(s, 0, s.size()); }

// tilec's 2-D view of an ONNX activation: [product of the leading dims,
// last dim]; a scalar is [1, 1].
Shape View2D(const Shape& s) {
  if (s.empty()) return {1, 1};
  return {Product(s, 0, s.size() - 1), s.back()};
}

// Shape without leading 1s: how a broadcast operand is compared.
Shape StripOnes(const Shape& s) {
  size_t i = 0;
  while (i < s.size() && s[i] == 1) ++i;
  return Shape(s.begin() + i, s.end());
}

bool Near(double a, double b, double rel) {
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

bool IsView(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
         op == "Unsqueeze" || op == "Identity" || op == "Dropout";
}

// Emission recurses once per op along a chain (Value -> Emit -> Value of an
// operand); the chain is bounded and the importer runs on a stack that holds
// the bound with room to spare (frames are a few KiB, more with sanitizers).
constexpr int kMaxEmitDepth = 20000;
constexpr size_t kEmitStackBytes = size_t{1} << 30;

Status Importer::Run(fb::ModuleT* module, std::string* sidecar) {
  // Weights are the initializers, transformed but never larger (F32, at
  // most 4 bytes for each byte of data). Counted from the data the model
  // holds, not its dims, which a model may declare huge without any data;
  // external data is not counted (the sidecar grows as it is read).
  size_t initializer_bytes = 0;
  for (const auto& init : g_.proto().initializer()) {
    if (init.data_location() == TensorProto::EXTERNAL) continue;
    const size_t held =
        init.raw_data().size() +
        sizeof(float) * (init.float_data_size() + init.int32_data_size() +
                         init.int64_data_size() + init.double_data_size() +
                         init.uint64_data_size());
    initializer_bytes += held * sizeof(float);
  }
  sidecar_.Reserve(initializer_bytes);
  std::vector<std::string> outputs = options_.outputs;
  if (outputs.empty()) {
    for (const auto& o : g_.proto().output()) outputs.push_back(o.name());
  }
  std::set<std::string> declared;
  for (const auto& o : g_.proto().output()) declared.insert(o.name());
  std::set<uint32_t> output_values;
  for (const std::string& name : outputs) {
    if (!declared.count(name)) {
      return Status::BadInput(g_.model_name() + ": --outputs names '" + name +
                              "', which is not a graph output");
    }
    const OnnxTensorInfo* info = g_.Find(name);
    if (info == nullptr || !info->shape_known) {
      return Unknown(name, "graph output");
    }
    uint32_t id = 0;
    // An output may keep whatever rows its producer has: the data is the
    // same row-major tensor.
    TILEC_RETURN_IF_ERROR(
        Value(name, View2D(info->shape), &id, /*exact=*/false));
    fb::ValueT& v = *values_[id];
    if (v.role != fb::ValueRole::Activation &&
        v.role != fb::ValueRole::Output) {
      return Status::Infeasible(
          g_.model_name() + ": graph output '" + name + "' is the " +
          (v.role == fb::ValueRole::Input ? "graph input '" : "constant '") +
          v.name +
          "' without computation; tilec needs an op to compute "
          "an output");
    }
    if (!output_values.insert(id).second) {
      return Status::Infeasible(g_.model_name() + ": graph outputs '" +
                                v.name + "' and '" + name +
                                "' are the same tilec value");
    }
    v.role = fb::ValueRole::Output;
    v.name = name;
    ir::DeclareModelShape(info->shape, &v);
  }
  module->values = std::move(values_);
  module->ops = std::move(ops_);
  auto model = std::make_unique<fb::ModelT>();
  model->preset = "onnx";
  model->part = "model";
  model->layers = attention_layers_;
  model->batch = static_cast<int32_t>(
      g_.batch_bound() ? options_.batch : batch_);
  model->tokens = static_cast<int32_t>(tokens_);
  model->width = static_cast<int32_t>(width_);
  model->heads = static_cast<int32_t>(heads_);
  model->mlp_width = static_cast<int32_t>(mlp_width_);
  model->input_seed = options_.input_seed;
  module->model = std::move(model);
  *sidecar = sidecar_.TakeBytes();
  return Status::Ok();
}

Status Importer::Unsupported(const NodeProto& node,
                             const std::string& why) const {
  return Status::Infeasible(g_.model_name() + ": " + Label(node) + ": " +
                            why);
}

std::string Importer::Label(const NodeProto& node) const {
  const OnnxTensorInfo* info =
      node.output_size() > 0 ? g_.Find(node.output(0)) : nullptr;
  if (info != nullptr && info->producer >= 0) {
    return g_.NodeLabel(info->producer);
  }
  return "node '" + node.name() + "' (" + node.op_type() + ", opset " +
         std::to_string(g_.opset()) + ")";
}

Status Importer::Unknown(std::string tensor, const std::string& what) const {
  // Named where the shapes stop: the first node upstream whose output
  // has no known shape although its inputs have (an If, an op not
  // inferred), not the op that happened to need it.
  for (const NodeProto* n = g_.Producer(tensor); n != nullptr;
       n = g_.Producer(tensor)) {
    auto unknown = std::find_if(
        n->input().begin(), n->input().end(), [&](const std::string& in) {
          const OnnxTensorInfo* info = g_.Find(in);
          return !in.empty() && info != nullptr && !info->shape_known;
        });
    if (unknown == n->input().end()) break;
    tensor = *unknown;
  }
  const NodeProto* node = g_.Producer(tensor);
  if (node != nullptr) {
    return Unsupported(*node, "the shape of its output '" + tensor +
                                  "' is unknown (a shape computed from "
                                  "graph inputs, or an op whose shape "
                                  "import-onnx does not infer)");
  }
  return Status::Infeasible(g_.model_name() + ": " + what + " '" + tensor +
                            "' has no known shape");
}

// tilec values have at least one element along every dimension and at
// most ir::kMaxValueElements: a tensor beyond that is a valid model tilec
// cannot hold (exit 3), named here, before the IR verifier would call the
// value tilec built from it invalid.
Status Importer::CheckExtents(const std::string& tensor, const Shape& shape,
                              const NodeProto* node) const {
  std::string why;
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 1) {
      why = "tilec values have at least one element along every dimension";
      break;
    }
    if (elements > ir::kMaxValueElements / d) {
      why = "more than " + std::to_string(ir::kMaxValueElements) +
            " elements, the most a tilec value holds";
      break;
    }
    elements *= d;
  }
  if (why.empty()) return Status::Ok();
  why = "'" + tensor + "' is " + ir::ShapeToString(shape) + ": " + why;
  if (node != nullptr) return Unsupported(*node, why);
  return Status::Infeasible(g_.model_name() + ": graph input " + why);
}

Status Importer::MapType(int32_t elem_type, const std::string& tensor,
                         fb::DType* dtype) const {
  if (!IsOnnxFloatType(elem_type)) {
    return Status::Infeasible(g_.model_name() + ": tensor '" + tensor +
                              "' is " + OnnxTypeName(elem_type) +
                              "; tilec values are floating point");
  }
  switch (options_.dtype) {
    case OnnxDTypePolicy::kF16:
      *dtype = fb::DType::F16;
      return Status::Ok();
    case OnnxDTypePolicy::kF32:
      *dtype = fb::DType::F32;
      return Status::Ok();
    case OnnxDTypePolicy::kKeep:
      break;
  }
  switch (elem_type) {
    case TensorProto::FLOAT:
      *dtype = fb::DType::F32;
      return Status::Ok();
    case TensorProto::FLOAT16:
      *dtype = fb::DType::F16;
      return Status::Ok();
    case TensorProto::BFLOAT16:
      *dtype = fb::DType::BF16;
      return Status::Ok();
    default:
      return Status::Infeasible(
          g_.model_name() + ": tensor '" + tensor + "' is " +
          OnnxTypeName(elem_type) +
          "; tilec has no such dtype (--dtype=f32 or f16 converts it)");
  }
}

Status Importer::TypeOf(const std::string& tensor, fb::DType* dtype) const {
  const OnnxTensorInfo* info = g_.Find(tensor);
  return MapType(info != nullptr ? info->elem_type : 0, tensor, dtype);
}

uint32_t Importer::NewValue(const std::string& name, Shape shape,
                            fb::DType dtype, fb::ValueRole role) {
  auto v = std::make_unique<fb::ValueT>();
  v->id = static_cast<uint32_t>(values_.size());
  v->name = name;
  v->shape = std::move(shape);
  v->dtype = dtype;
  v->role = role;
  values_.push_back(std::move(v));
  return values_.back()->id;
}

uint32_t Importer::NewOp(fb::OpKind kind, const std::string& name,
                         std::vector<uint32_t> operands,
                         const std::string& result, Shape shape,
                         fb::DType dtype, fb::OperationT** op_out) {
  const uint32_t id =
      NewValue(result, std::move(shape), dtype, fb::ValueRole::Activation);
  auto op = std::make_unique<fb::OperationT>();
  op->id = static_cast<uint32_t>(ops_.size());
  op->kind = kind;
  op->name = name;
  op->operands = std::move(operands);
  op->results = {id};
  if (op_out != nullptr) *op_out = op.get();
  ops_.push_back(std::move(op));
  return id;
}

// A weight from numbers: appended to the sidecar as little-endian F32.
uint32_t Importer::NewWeight(const std::string& name, Shape shape,
                             const std::vector<float>& data, fb::DType dtype) {
  const uint32_t id =
      NewValue(name, std::move(shape), dtype, fb::ValueRole::Weight);
  const bool uniform =
      !data.empty() && std::all_of(data.begin(), data.end(), [&](float f) {
        return std::memcmp(&f, &data[0], sizeof f) == 0;
      });
  if (uniform) {
    auto init = std::make_unique<fb::WeightInitT>();
    init->distribution = fb::Distribution::Constant;
    init->mean = data[0];
    values_[id]->init = std::move(init);
    return id;
  }
  values_[id]->sidecar = sidecar_.Append(data);
  return id;
}

Status Importer::ConstantData(const std::string& tensor, ConstPtr* c) const {
  TILEC_RETURN_IF_ERROR(g_.Constant(tensor, c));
  if (*c == nullptr) {
    return Status::Internal("'" + tensor + "' is not a constant");
  }
  return Status::Ok();
}

std::vector<float> Importer::ToFloats(const OnnxConstant& c) {
  return std::vector<float>(c.data.begin(), c.data.end());
}

bool Importer::IsConstant(const std::string& tensor) const {
  const OnnxTensorInfo* info = g_.Find(tensor);
  return info != nullptr &&
         (info->value != nullptr || info->initializer != nullptr);
}

// The weight of a constant tensor viewed as `shape` (same element count),
// memoized per tensor and shape.
Status Importer::ConstantWeight(const std::string& tensor, const Shape& shape,
                                uint32_t* id) {
  const std::string key = tensor + ir::ShapeToString(shape);
  if (auto it = weights_.find(key); it != weights_.end()) {
    *id = it->second;
    return Status::Ok();
  }
  ConstPtr c;
  TILEC_RETURN_IF_ERROR(ConstantData(tensor, &c));
  if (c->elements() != Elements(shape)) {
    return Status::Internal(
        "constant '" + tensor + "' has " + std::to_string(c->elements()) +
        " elements, viewed as " + ir::ShapeToString(shape));
  }
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(MapType(c->elem_type, tensor, &dtype));
  *id = NewWeight(tensor, shape, ToFloats(*c), dtype);
  weights_[key] = *id;
  return Status::Ok();
}

const NodeProto* Importer::Node(const std::string& tensor) const {
  return g_.Producer(tensor);
}

const Shape* Importer::ShapeOf(const std::string& tensor) const {
  const OnnxTensorInfo* info = g_.Find(tensor);
  return info != nullptr && info->shape_known ? &info->shape : nullptr;
}

// A Cast between float types: precision changes inside a pattern (an
// exporter computing statistics in F32) do not change what it computes.
bool Importer::IsFloatCast(const NodeProto& n) const {
  if (n.op_type() != "Cast" && n.op_type() != "CastLike") return false;
  const OnnxTensorInfo* in = g_.Find(n.input(0));
  const OnnxTensorInfo* out = g_.Find(n.output(0));
  return in != nullptr && out != nullptr && IsOnnxFloatType(in->elem_type) &&
         IsOnnxFloatType(out->elem_type);
}

std::string Importer::PeelCasts(std::string t) const {
  for (const NodeProto* n = Node(t);
       n != nullptr && (IsFloatCast(*n) || n->op_type() == "Identity");
       n = Node(t)) {
    t = n->input(0);
  }
  return t;
}

// A Transpose that keeps the axes of more than one element in order
// ([B*H, 1, D] to [1, B*H, D], as attention over one query writes) moves
// no data: a view.
bool Importer::KeepsRowOrder(const NodeProto& n) const {
  if (n.op_type() != "Transpose") return false;
  const Shape* s = ShapeOf(n.input(0));
  const std::vector<int64_t> perm = IntsAttribute(n, "perm");
  if (s == nullptr || perm.size() != s->size()) return false;
  int64_t last = -1;
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= static_cast<int64_t>(s->size())) return false;
    if ((*s)[axis] == 1) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

// Through casts and views: the tensor whose data `t` is.
std::string Importer::PeelViews(std::string t) const {
  for (const NodeProto* n = Node(t);
       n != nullptr && (IsFloatCast(*n) || IsView(n->op_type()) ||
                        KeepsRowOrder(*n));
       n = Node(t)) {
    t = n->input(0);
  }
  return t;
}

bool Importer::Same(const std::string& a, const std::string& b) const {
  return PeelViews(a) == PeelViews(b);
}

// The producer of `t` (through casts) if it has op type `op`.
const NodeProto* Importer::NodeIs(const std::string& t, const char* op) const {
  const NodeProto* n = Node(PeelCasts(t));
  return n != nullptr && n->op_type() == op ? n : nullptr;
}

bool Importer::Scalar(const std::string& t, double* v) const {
  return g_.ScalarConstant(PeelCasts(t), v);
}

// A constant or graph input of `width` elements that broadcasts along
// the last dims only (a LayerNorm gamma or beta, a bias).
bool Importer::IsRowParam(const std::string& t, const Shape& trailing) const {
  const OnnxTensorInfo* info = g_.Find(PeelCasts(t));
  if (info == nullptr || !info->shape_known) return false;
  if (!info->graph_input && !IsConstant(PeelCasts(t))) {
    // A view of a graph input or constant (Flatten(W) in the expanded
    // LayerNorm function).
    const std::string base = PeelViews(t);
    const OnnxTensorInfo* b = g_.Find(base);
    if (b == nullptr || !(b->graph_input || IsConstant(base))) return false;
  }
  return StripOnes(info->shape) == StripOnes(trailing);
}

// The tilec value holding tensor `t` as `want` (a shape with t's element
// count): views pass through, graph inputs and constants take that shape,
// everything else is emitted once by the patterns below.
Status Importer::Value(const std::string& tensor, const Shape& want,
                       uint32_t* id, bool exact) {
  // Views and casts to the same dtype pass through in this loop, not by
  // recursion: a chain of 100,000 Identity nodes is one level deep.
  const NodeProto* view = nullptr;  // the last view or cast passed
  for (std::string t = tensor;;) {
    const OnnxTensorInfo* info = g_.Find(t);
    if (info == nullptr) {
      return Status::BadInput(g_.model_name() + ": tensor '" + t +
                              "' is not defined");
    }
    if (!info->shape_known) return Unknown(t, "tensor");
    if (Elements(info->shape) != Elements(want)) {
      // The model's declared shapes disagree (a view whose output is
      // declared with more or fewer elements than its input has).
      const std::string why =
          "'" + t + "' is " + ir::ShapeToString(info->shape) +
          " but is read as " + ir::ShapeToString(want) +
          ", another number of elements: the model's shapes disagree";
      if (view != nullptr) {
        return Status::BadInput(g_.model_name() + ": " + Label(*view) +
                                ": its input " + why);
      }
      return Status::BadInput(g_.model_name() + ": " + why);
    }
    if (auto it = memo_.find(t); it != memo_.end()) {
      *id = it->second;
      return exact ? CheckView(t, *id, want) : Status::Ok();
    }
    if (info->graph_input) {
      TILEC_RETURN_IF_ERROR(CheckExtents(t, info->shape, nullptr));
      fb::DType dtype;
      TILEC_RETURN_IF_ERROR(MapType(info->elem_type, t, &dtype));
      *id = NewValue(t, want, dtype, fb::ValueRole::Input);
      ir::DeclareModelShape(info->shape, values_[*id].get());
      auto init = std::make_unique<fb::WeightInitT>();
      init->distribution = fb::Distribution::Gaussian;
      init->seed = DeriveSeed(options_.input_seed, *id);
      init->mean = 0.0f;
      init->stddev = 1.0f;
      values_[*id]->init = std::move(init);
      memo_[t] = *id;
      return Status::Ok();
    }
    if (IsConstant(t)) return ConstantWeight(t, want, id);
    const NodeProto& node = g_.node(info->producer);
    if (node.domain() != "" && node.domain() != "ai.onnx") {
      return Unsupported(node, "custom domains are not imported");
    }
    if ((IsView(node.op_type()) || KeepsRowOrder(node)) &&
        node.output(0) == t) {
      view = &node;
      t = node.input(0);
      continue;
    }
    if (IsFloatCast(node)) {
      fb::DType from, to;
      TILEC_RETURN_IF_ERROR(TypeOf(node.input(0), &from));
      TILEC_RETURN_IF_ERROR(TypeOf(t, &to));
      if (from == to) {
        view = &node;
        t = node.input(0);
        continue;
      }
    }
    // Emitting a node asks for its operands' values: the one recursion
    // left, bounded so that a long chain of ops is a clear refusal, not
    // a stack overflow (ImportOnnx runs on a stack sized for the bound).
    if (depth_ >= kMaxEmitDepth) {
      return Unsupported(node, "an output is reached from it through a "
                               "chain of more than " +
                                   std::to_string(kMaxEmitDepth) +
                                   " ops; import-onnx reads chains up to "
                                   "that length");
    }
    ++depth_;
    Status emitted = Emit(node, t, want, id);
    --depth_;
    TILEC_RETURN_IF_ERROR(emitted);
    memo_[t] = *id;
    return exact ? CheckView(t, *id, want) : Status::Ok();
  }
}

Status Importer::CheckView(const std::string& t, uint32_t id,
                           const Shape& want) {
  if (values_[id]->shape == want) return Status::Ok();
  const NodeProto* node = Node(t);
  const std::string why =
      "tilec holds '" + t + "' as " + ir::ShapeToString(values_[id]->shape) +
      " and a consumer needs it as " + ir::ShapeToString(want) +
      ", a reshape that moves data between rows";
  if (node != nullptr) return Unsupported(*node, why);
  return Status::Infeasible(g_.model_name() + ": " + why);
}

Status Importer::Emit(const NodeProto& node, const std::string& t,
                      const Shape& want, uint32_t* id) {
  const std::string& op = node.op_type();
  if (node.output(0) != t) {
    return Unsupported(node, "its output '" + t +
                                 "' is not imported (only the first "
                                 "output of this op maps onto tilec)");
  }
  if (op == "Add" || op == "Mul" || op == "Div" ||
      op == "LayerNormalization") {
    LayerNormMatch ln;
    if (MatchLayerNorm(t, &ln)) return EmitLayerNorm(node, t, ln, id);
  }
  if (op == "Mul") {
    fb::GeluForm form;
    std::string x;
    if (MatchGelu(t, &form, &x)) return EmitGelu(node, t, x, form, id);
  }
  if (op == "Div") {
    std::string x;
    if (MatchSoftmaxExpanded(node, &x)) return EmitSoftmaxOf(node, t, x, id);
  }
  if (op == "LayerNormalization") {
    return Unsupported(node,
                       "its scale or bias does not broadcast along "
                       "the normalized axes");
  }
  if (op == "Add") return EmitAdd(node, t, want, id);
  if (op == "MatMul" && IsPoolingAttention(node)) {
    return EmitPoolingAttention(node, t, id);
  }
  if (op == "MatMul") return EmitMatMul(node, t, id);
  if (op == "ReduceMean") return EmitTokenMean(node, t, id);
  if (op == "Gemm") return EmitGemm(node, t, id);
  if (op == "Softmax") return EmitSoftmax(node, t, id);
  if (op == "Cast" || op == "CastLike") return EmitCast(node, t, want, id);
  if (op == "Mul" || op == "Div") return EmitScale(node, t, want, id);
  if (op == "Transpose") return EmitTranspose(node, t, id);
  if (op == "Concat") return EmitConcat(node, t, id);
  if (op == "Gather" || op == "Slice") return EmitTokenPick(node, t, id);
  if (op == "Expand") return EmitExpand(node, t, id);
  if (ElementwiseFnOf(op)) return EmitElementwise(node, t, want, id);
  if (op == "Conv") {
    return Unsupported(node,
                       "a convolution maps onto tilec only as a patch "
                       "embedding: stride = kernel, no padding, "
                       "followed by flatten(2).transpose(1, 2)");
  }
  return Unsupported(node, "no tilec op or recognized pattern computes it");
}

std::string Importer::NodeName(const NodeProto& node) const {
  return node.name().empty() ? node.output(0) : node.name();
}

Status Importer::DTypeOf(const std::string& t, fb::DType* dtype) const {
  return TypeOf(t, dtype);
}

// A [w] row parameter: a constant's weight, or a graph input's value.
Status Importer::RowParam(const std::string& t, int64_t width, uint32_t* id) {
  return Value(t, {width}, id);
}

}  // namespace onnx_import

Status ParseOnnxDTypePolicy(std::string_view text, OnnxDTypePolicy* policy) {
  if (text == "f16") {
    *policy = OnnxDTypePolicy::kF16;
  } else if (text == "f32") {
    *policy = OnnxDTypePolicy::kF32;
  } else if (text == "keep") {
    *policy = OnnxDTypePolicy::kKeep;
  } else {
    return Status::BadInput("--dtype=" + std::string(text) +
                            ": expected f16, f32 or keep");
  }
  return Status::Ok();
}

Status ParseOnnxModel(std::string_view bytes, const std::string& name,
                      ::onnx::ModelProto* model) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status::BadInput(name +
                            ": larger than 2 GiB (protobuf's limit; "
                            "export with external data)");
  }
  if (!model->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::BadInput(name +
                            ": not a valid ONNX model (malformed or "
                            "truncated protobuf)");
  }
  if (!model->has_graph()) {
    return Status::BadInput(name + ": not an ONNX model (no graph)");
  }
  return Status::Ok();
}

Status ImportOnnx(const ::onnx::ModelProto& model,
                  const OnnxImportOptions& options, fb::ModuleT* module,
                  std::string* sidecar) {
  std::unique_ptr<OnnxGraph> graph;
  TILEC_RETURN_IF_ERROR(
      OnnxGraph::Build(model, options.model_name, options.model_dir,
                       options.batch, &graph));
  if (options.batch != 1 && !graph->batch_bound()) {
    return Status::BadInput(options.model_name + ": --batch=" +
                            std::to_string(options.batch) +
                            ", but no graph input has a symbolic first "
                            "dimension (the batch was fixed at export)");
  }
  fb::ModuleT result;
  std::string bytes;
  TILEC_RETURN_IF_ERROR(RunWithStack(onnx_import::kEmitStackBytes, [&] {
    return onnx_import::Importer(*graph, options).Run(&result, &bytes);
  }));
  module->values = std::move(result.values);
  module->ops = std::move(result.ops);
  module->model = std::move(result.model);
  *sidecar = std::move(bytes);
  return Status::Ok();
}

}  // namespace tilec::passes