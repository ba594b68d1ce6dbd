#include "passes/onnx/import_onnx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "formats/ir.h"
#include "formats/large_stack.h"
#include "formats/op_shapes.h"
#include "passes/import/model_builder.h"
#include "passes/import/sidecar.h"
#include "passes/onnx/import_elementwise.h"
#include "passes/onnx/onnx_graph.h"

namespace tilec::passes {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;
using Shape = std::vector<int64_t>;
using ConstPtr = std::shared_ptr<const OnnxConstant>;

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

bool Near(double a, double b, double rel = 1e-4) {
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

bool IsView(const std::string& op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
         op == "Unsqueeze" || op == "Identity" || op == "Dropout";
}

// What a recognized LayerNorm reads.
struct LayerNormMatch {
  std::string x;  // the tensor normalized (as the reduction reads it)
  int64_t width = 0;
  double eps = 1e-5;
  std::string gamma, beta;  // "" when absent
};

// A projection x @ W + b with constant W and b, scaled by `factor`.
struct LinearMatch {
  std::string x;
  int64_t in = 0, out = 0;
  std::vector<float> weight;  // [in, out]
  std::vector<float> bias;    // [out], zeros when absent
  double factor = 1.0;
  std::string node_name;
};

// Where one of q, k, v comes from: a [rows, heads*head_dim] tensor viewed
// as [B, T, H, D] and transposed.
struct HeadsMatch {
  std::string source;
  int64_t batch = 0, tokens = 0, heads = 0, head_dim = 0;
  double factor = 1.0;
};

// Emission recurses once per op along a chain (Value -> Emit -> Value of an
// operand); the chain is bounded and the importer runs on a stack that holds
// the bound with room to spare (frames are a few KiB, more with sanitizers).
constexpr int kMaxEmitDepth = 20000;
constexpr size_t kEmitStackBytes = size_t{1} << 30;

// Polynomial in one tensor: degree -> coefficient.
using Poly = std::map<int, double>;

class Importer {
 public:
  Importer(const OnnxGraph& graph, const OnnxImportOptions& options)
      : g_(graph), options_(options), sidecar_(options.sidecar_path) {}

  Status Run(fb::ModuleT* module, std::string* sidecar) {
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

 private:
  // ------------------------------------------------------------ errors

  Status Unsupported(const NodeProto& node, const std::string& why) const {
    return Status::Infeasible(g_.model_name() + ": " + Label(node) + ": " +
                              why);
  }
  std::string Label(const NodeProto& node) const {
    const OnnxTensorInfo* info =
        node.output_size() > 0 ? g_.Find(node.output(0)) : nullptr;
    if (info != nullptr && info->producer >= 0) {
      return g_.NodeLabel(info->producer);
    }
    return "node '" + node.name() + "' (" + node.op_type() + ", opset " +
           std::to_string(g_.opset()) + ")";
  }
  Status Unknown(std::string tensor, const std::string& what) const {
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
  Status CheckExtents(const std::string& tensor, const Shape& shape,
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

  // ------------------------------------------------------------ dtypes

  Status MapType(int32_t elem_type, const std::string& tensor,
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

  Status TypeOf(const std::string& tensor, fb::DType* dtype) const {
    const OnnxTensorInfo* info = g_.Find(tensor);
    return MapType(info != nullptr ? info->elem_type : 0, tensor, dtype);
  }

  // ------------------------------------------------------------ building

  uint32_t NewValue(const std::string& name, Shape shape, fb::DType dtype,
                    fb::ValueRole role) {
    auto v = std::make_unique<fb::ValueT>();
    v->id = static_cast<uint32_t>(values_.size());
    v->name = name;
    v->shape = std::move(shape);
    v->dtype = dtype;
    v->role = role;
    values_.push_back(std::move(v));
    return values_.back()->id;
  }

  uint32_t NewOp(fb::OpKind kind, const std::string& name,
                 std::vector<uint32_t> operands, const std::string& result,
                 Shape shape, fb::DType dtype,
                 fb::OperationT** op_out = nullptr) {
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
  uint32_t NewWeight(const std::string& name, Shape shape,
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

  Status ConstantData(const std::string& tensor, ConstPtr* c) const {
    TILEC_RETURN_IF_ERROR(g_.Constant(tensor, c));
    if (*c == nullptr) {
      return Status::Internal("'" + tensor + "' is not a constant");
    }
    return Status::Ok();
  }

  static std::vector<float> ToFloats(const OnnxConstant& c) {
    return std::vector<float>(c.data.begin(), c.data.end());
  }

  bool IsConstant(const std::string& tensor) const {
    const OnnxTensorInfo* info = g_.Find(tensor);
    return info != nullptr &&
           (info->value != nullptr || info->initializer != nullptr);
  }

  // The weight of a constant tensor viewed as `shape` (same element count),
  // memoized per tensor and shape.
  Status ConstantWeight(const std::string& tensor, const Shape& shape,
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

  // ------------------------------------------------------------ graph walk

  const NodeProto* Node(const std::string& tensor) const {
    return g_.Producer(tensor);
  }
  const Shape* ShapeOf(const std::string& tensor) const {
    const OnnxTensorInfo* info = g_.Find(tensor);
    return info != nullptr && info->shape_known ? &info->shape : nullptr;
  }

  // A Cast between float types: precision changes inside a pattern (an
  // exporter computing statistics in F32) do not change what it computes.
  bool IsFloatCast(const NodeProto& n) const {
    if (n.op_type() != "Cast" && n.op_type() != "CastLike") return false;
    const OnnxTensorInfo* in = g_.Find(n.input(0));
    const OnnxTensorInfo* out = g_.Find(n.output(0));
    return in != nullptr && out != nullptr && IsOnnxFloatType(in->elem_type) &&
           IsOnnxFloatType(out->elem_type);
  }

  std::string PeelCasts(std::string t) const {
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
  bool KeepsRowOrder(const NodeProto& n) const {
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
  std::string PeelViews(std::string t) const {
    for (const NodeProto* n = Node(t);
         n != nullptr && (IsFloatCast(*n) || IsView(n->op_type()) ||
                          KeepsRowOrder(*n));
         n = Node(t)) {
      t = n->input(0);
    }
    return t;
  }

  bool Same(const std::string& a, const std::string& b) const {
    return PeelViews(a) == PeelViews(b);
  }

  // The producer of `t` (through casts) if it has op type `op`.
  const NodeProto* NodeIs(const std::string& t, const char* op) const {
    const NodeProto* n = Node(PeelCasts(t));
    return n != nullptr && n->op_type() == op ? n : nullptr;
  }

  bool Scalar(const std::string& t, double* v) const {
    return g_.ScalarConstant(PeelCasts(t), v);
  }

  // A constant or graph input of `width` elements that broadcasts along
  // the last dims only (a LayerNorm gamma or beta, a bias).
  bool IsRowParam(const std::string& t, const Shape& trailing) const {
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

  // ------------------------------------------------------------ values

  // The tilec value holding tensor `t` as `want` (a shape with t's element
  // count): views pass through, graph inputs and constants take that shape,
  // everything else is emitted once by the patterns below.
  Status Value(const std::string& tensor, const Shape& want, uint32_t* id,
               bool exact = true) {
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

  Status CheckView(const std::string& t, uint32_t id, const Shape& want) {
    if (values_[id]->shape == want) return Status::Ok();
    const NodeProto* node = Node(t);
    const std::string why =
        "tilec holds '" + t + "' as " + ir::ShapeToString(values_[id]->shape) +
        " and a consumer needs it as " + ir::ShapeToString(want) +
        ", a reshape that moves data between rows";
    if (node != nullptr) return Unsupported(*node, why);
    return Status::Infeasible(g_.model_name() + ": " + why);
  }

  // ------------------------------------------------------------ emission

  Status Emit(const NodeProto& node, const std::string& t, const Shape& want,
              uint32_t* id) {
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

  std::string NodeName(const NodeProto& node) const {
    return node.name().empty() ? node.output(0) : node.name();
  }

  Status DTypeOf(const std::string& t, fb::DType* dtype) const {
    return TypeOf(t, dtype);
  }

  // A [w] row parameter: a constant's weight, or a graph input's value.
  Status RowParam(const std::string& t, int64_t width, uint32_t* id) {
    return Value(t, {width}, id);
  }

  // -------------------------------------------------- LayerNorm

  // var(x) over `axes` as exporters write it: mean((x - mean)^2) with Pow
  // or Mul, or mean(x*x) - mean(x)^2 (ONNX's LayerNormalization function).
  bool MatchVariance(const std::string& var, const std::string& x,
                     const std::vector<int64_t>& axes) const {
    auto is_square_of = [&](const std::string& t, auto&& base_ok) {
      const NodeProto* n = Node(PeelCasts(t));
      if (n == nullptr) return false;
      double e = 0;
      if (n->op_type() == "Pow") {
        return Scalar(n->input(1), &e) && e == 2.0 && base_ok(n->input(0));
      }
      if (n->op_type() == "Mul") {
        return Same(n->input(0), n->input(1)) && base_ok(n->input(0));
      }
      return false;
    };
    auto is_deviation = [&](const std::string& d) {
      std::string dx;
      std::vector<int64_t> daxes;
      return MatchDeviation(d, &dx, &daxes) && Same(dx, x) && daxes == axes;
    };
    auto is_mean_of = [&](const std::string& t, auto&& inner_ok) {
      const NodeProto* n = NodeIs(t, "ReduceMean");
      return n != nullptr && ReduceAxes(*n) == axes && inner_ok(n->input(0));
    };
    if (is_mean_of(var, [&](const std::string& sq) {
          return is_square_of(sq, is_deviation);
        })) {
      return true;
    }
    const NodeProto* sub = NodeIs(var, "Sub");
    if (sub == nullptr) return false;
    auto is_x = [&](const std::string& t) { return Same(t, x); };
    return is_mean_of(
               sub->input(0),
               [&](const std::string& sq) { return is_square_of(sq, is_x); }) &&
           is_square_of(sub->input(1), [&](const std::string& m) {
             return is_mean_of(m, is_x);
           });
  }

  // The reduced axes of a ReduceMean with keepdims, normalized, sorted;
  // empty when they are not given as constants.
  std::vector<int64_t> ReduceAxes(const NodeProto& n) const {
    if (IntAttribute(n, "keepdims", 1) == 0) return {};
    std::vector<int64_t> axes = IntsAttribute(n, "axes");
    const Shape* s = ShapeOf(n.input(0));
    if (s == nullptr || axes.empty()) return {};
    for (int64_t& a : axes) {
      if (!NormalizeAxis(a, static_cast<int64_t>(s->size()), &a)) return {};
    }
    std::sort(axes.begin(), axes.end());
    return axes;
  }

  // d = x - ReduceMean(x) over trailing axes.
  bool MatchDeviation(const std::string& d, std::string* x,
                      std::vector<int64_t>* axes) const {
    const NodeProto* sub = NodeIs(d, "Sub");
    if (sub == nullptr) return false;
    const NodeProto* mean = NodeIs(sub->input(1), "ReduceMean");
    if (mean == nullptr || !Same(mean->input(0), sub->input(0))) return false;
    *axes = ReduceAxes(*mean);
    const Shape* s = ShapeOf(mean->input(0));
    if (axes->empty() || s == nullptr) return false;
    for (size_t i = 0; i < axes->size(); ++i) {
      if ((*axes)[axes->size() - 1 - i] !=
          static_cast<int64_t>(s->size() - 1 - i)) {
        return false;  // not the trailing axes
      }
    }
    *x = mean->input(0);
    return true;
  }

  // (x - mean) / sqrt(var + eps), also as a product with 1/sqrt or
  // Reciprocal(Sqrt(...)).
  bool MatchNormalized(const std::string& t, LayerNormMatch* m) const {
    const NodeProto* n = Node(PeelCasts(t));
    if (n == nullptr) return false;
    auto match_std = [&](const std::string& s, bool inverse, std::string* dev) {
      std::string sq = s;
      if (inverse) {
        const NodeProto* r = NodeIs(s, "Reciprocal");
        if (r == nullptr) return false;
        sq = r->input(0);
      }
      const NodeProto* sqrt = NodeIs(sq, "Sqrt");
      if (sqrt == nullptr) return false;
      const NodeProto* add = NodeIs(sqrt->input(0), "Add");
      if (add == nullptr) return false;
      for (int side = 0; side < 2; ++side) {
        double eps = 0;
        if (!Scalar(add->input(side), &eps)) continue;
        std::string x;
        std::vector<int64_t> axes;
        if (!MatchDeviation(*dev, &x, &axes)) return false;
        if (!MatchVariance(add->input(1 - side), x, axes)) return false;
        const Shape& xs = *ShapeOf(x);
        m->x = x;
        m->width = Product(xs, axes.front(), xs.size());
        m->eps = eps;
        return true;
      }
      return false;
    };
    if (n->op_type() == "Div") {
      std::string dev = n->input(0);
      return match_std(n->input(1), false, &dev);
    }
    if (n->op_type() == "Mul") {
      for (int side = 0; side < 2; ++side) {
        std::string dev = n->input(side);
        if (match_std(n->input(1 - side), true, &dev)) return true;
      }
    }
    return false;
  }

  Shape Trailing(const LayerNormMatch& m) const { return {m.width}; }

  bool MatchScaled(const std::string& t, LayerNormMatch* m) const {
    if (MatchNormalized(t, m)) return true;
    const NodeProto* mul = NodeIs(t, "Mul");
    if (mul == nullptr) return false;
    for (int side = 0; side < 2; ++side) {
      if (MatchNormalized(mul->input(1 - side), m) &&
          IsRowParam(mul->input(side), TrailingDims(*m))) {
        m->gamma = mul->input(side);
        return true;
      }
    }
    return false;
  }

  // The normalized dims of x, for comparing gamma and beta shapes.
  Shape TrailingDims(const LayerNormMatch& m) const {
    const Shape& xs = *ShapeOf(m.x);
    int64_t acc = 1;
    size_t i = xs.size();
    while (i > 0 && acc < m.width) acc *= xs[--i];
    return Shape(xs.begin() + i, xs.end());
  }

  bool MatchLayerNorm(const std::string& t, LayerNormMatch* m) const {
    const NodeProto* n = Node(PeelCasts(t));
    if (n == nullptr) return false;
    if (n->op_type() == "LayerNormalization") {
      const Shape* xs = ShapeOf(n->input(0));
      int64_t axis = 0;
      if (xs == nullptr ||
          !NormalizeAxis(IntAttribute(*n, "axis", -1),
                         static_cast<int64_t>(xs->size()), &axis)) {
        return false;
      }
      m->x = n->input(0);
      m->width = Product(*xs, axis, xs->size());
      m->eps = FloatAttribute(*n, "epsilon", 1e-5f);
      const Shape trailing(xs->begin() + axis, xs->end());
      if (!IsRowParam(n->input(1), trailing)) return false;
      m->gamma = n->input(1);
      if (n->input_size() > 2 && !n->input(2).empty()) {
        if (!IsRowParam(n->input(2), trailing)) return false;
        m->beta = n->input(2);
      }
      return true;
    }
    if (n->op_type() == "Add") {
      for (int side = 0; side < 2; ++side) {
        LayerNormMatch inner;
        if (MatchScaled(n->input(1 - side), &inner) &&
            IsRowParam(n->input(side), TrailingDims(inner))) {
          *m = inner;
          m->beta = n->input(side);
          return true;
        }
      }
      return false;
    }
    return MatchScaled(t, m);
  }

  Status EmitLayerNorm(const NodeProto& node, const std::string& t,
                       const LayerNormMatch& m, uint32_t* id) {
    const Shape& xs = *ShapeOf(m.x);
    const int64_t rows = Elements(xs) / m.width;
    uint32_t x, gamma, beta;
    TILEC_RETURN_IF_ERROR(Value(m.x, {rows, m.width}, &x));
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    if (m.gamma.empty()) {
      gamma = NewWeight(NodeName(node) + ".gamma", {m.width},
                        std::vector<float>(m.width, 1.0f), dtype);
    } else {
      TILEC_RETURN_IF_ERROR(RowParam(m.gamma, m.width, &gamma));
    }
    if (m.beta.empty()) {
      beta = NewWeight(NodeName(node) + ".beta", {m.width},
                       std::vector<float>(m.width, 0.0f), dtype);
    } else {
      TILEC_RETURN_IF_ERROR(RowParam(m.beta, m.width, &beta));
    }
    fb::OperationT* op = nullptr;
    *id = NewOp(fb::OpKind::LayerNorm, NodeName(node), {x, gamma, beta}, t,
                {rows, m.width}, dtype, &op);
    op->eps = static_cast<float>(m.eps);
    return Status::Ok();
  }

  // -------------------------------------------------- GELU

  // A polynomial in x of small degree built from Add, Sub, Mul, Div by a
  // constant and Pow with a constant integer exponent.
  bool MatchPoly(const std::string& t, const std::string& x, Poly* p,
                 int depth = 0) const {
    if (depth > 12) return false;
    if (Same(t, x)) {
      *p = {{1, 1.0}};
      return true;
    }
    double c = 0;
    if (Scalar(t, &c)) {
      *p = {{0, c}};
      return true;
    }
    const NodeProto* n = Node(PeelCasts(t));
    if (n == nullptr || n->input_size() < 2) return false;
    const std::string& op = n->op_type();
    Poly a, b;
    if (op == "Pow") {
      double e = 0;
      if (!Scalar(n->input(1), &e) || e != std::floor(e) || e < 1 || e > 4 ||
          !MatchPoly(n->input(0), x, &a, depth + 1)) {
        return false;
      }
      Poly r = {{0, 1.0}};
      for (int i = 0; i < static_cast<int>(e); ++i) r = Multiply(r, a);
      *p = r;
      return true;
    }
    if (!MatchPoly(n->input(0), x, &a, depth + 1)) return false;
    if (op == "Div") {
      if (!Scalar(n->input(1), &c) || c == 0) return false;
      for (auto& [deg, coef] : a) coef /= c;
      *p = a;
      return true;
    }
    if (!MatchPoly(n->input(1), x, &b, depth + 1)) return false;
    if (op == "Mul") {
      *p = Multiply(a, b);
      return true;
    }
    if (op == "Add" || op == "Sub") {
      for (const auto& [deg, coef] : b) a[deg] += op == "Add" ? coef : -coef;
      *p = a;
      return true;
    }
    return false;
  }

  static Poly Multiply(const Poly& a, const Poly& b) {
    Poly r;
    for (const auto& [da, ca] : a) {
      for (const auto& [db, cb] : b) r[da + db] += ca * cb;
    }
    return r;
  }

  static bool PolyIs(const Poly& p, const Poly& expected) {
    for (const auto& [deg, coef] : p) {
      auto it = expected.find(deg);
      if (it == expected.end() ? coef != 0 : !Near(coef, it->second)) {
        return false;
      }
    }
    for (const auto& [deg, coef] : expected) {
      if (!p.count(deg)) return false;
    }
    return true;
  }

  // The factors of a product tree (Mul, Div by a constant): constants
  // multiplied into *c, the rest listed.
  void Factors(const std::string& t, double* c,
               std::vector<std::string>* rest) const {
    double v = 0;
    if (Scalar(t, &v)) {
      *c *= v;
      return;
    }
    const NodeProto* n = Node(PeelCasts(t));
    if (n != nullptr && n->op_type() == "Mul") {
      Factors(n->input(0), c, rest);
      Factors(n->input(1), c, rest);
      return;
    }
    if (n != nullptr && n->op_type() == "Div" && Scalar(n->input(1), &v) &&
        v != 0) {
      *c /= v;
      Factors(n->input(0), c, rest);
      return;
    }
    rest->push_back(t);
  }

  // 0.5 * x * (1 + erf(x / sqrt(2))), 0.5 * x * (1 + tanh(sqrt(2/pi) *
  // (x + 0.044715 x^3))), x * sigmoid(1.702 x); factors in any order.
  bool MatchGelu(const std::string& t, fb::GeluForm* form,
                 std::string* x) const {
    double c = 1.0;
    std::vector<std::string> f;
    Factors(t, &c, &f);
    if (f.size() != 2) return false;
    for (int side = 0; side < 2; ++side) {
      const std::string& cand = f[side];
      const std::string& other = f[1 - side];
      if (const NodeProto* sig = NodeIs(other, "Sigmoid")) {
        Poly p;
        if (Near(c, 1.0) && MatchPoly(sig->input(0), cand, &p) &&
            PolyIs(p, {{1, 1.702}})) {
          *form = fb::GeluForm::Quick;
          *x = cand;
          return true;
        }
        continue;
      }
      const NodeProto* add = NodeIs(other, "Add");
      if (add == nullptr || !Near(c, 0.5)) continue;
      for (int s = 0; s < 2; ++s) {
        double one = 0;
        if (!Scalar(add->input(s), &one) || one != 1.0) continue;
        const std::string inner = add->input(1 - s);
        Poly p;
        if (const NodeProto* erf = NodeIs(inner, "Erf")) {
          if (MatchPoly(erf->input(0), cand, &p) &&
              PolyIs(p, {{1, 1.0 / std::sqrt(2.0)}})) {
            *form = fb::GeluForm::Erf;
            *x = cand;
            return true;
          }
        } else if (const NodeProto* tanh = NodeIs(inner, "Tanh")) {
          const double k = std::sqrt(2.0 / M_PI);
          if (MatchPoly(tanh->input(0), cand, &p) &&
              PolyIs(p, {{1, k}, {3, k * 0.044715}})) {
            *form = fb::GeluForm::Tanh;
            *x = cand;
            return true;
          }
        }
      }
    }
    return false;
  }

  Status EmitGelu(const NodeProto& node, const std::string& t,
                  const std::string& x, fb::GeluForm form, uint32_t* id) {
    const Shape view = View2D(*ShapeOf(t));
    uint32_t in;
    TILEC_RETURN_IF_ERROR(Value(x, view, &in));
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    fb::OperationT* op = nullptr;
    *id = NewOp(fb::OpKind::Gelu, NodeName(node), {in}, t, view, dtype, &op);
    op->gelu = form;
    mlp_width_ = view[1];
    return Status::Ok();
  }

  // -------------------------------------------------- Softmax

  static bool IsLastAxis(const std::vector<int64_t>& axes, size_t rank) {
    return axes.size() == 1 && axes[0] == static_cast<int64_t>(rank) - 1;
  }

  std::vector<int64_t> AxesOf(const NodeProto& n) const {
    std::vector<int64_t> axes = IntsAttribute(n, "axes");
    if (n.input_size() > 1 && !n.input(1).empty()) {
      ConstPtr c;
      if (!g_.Constant(n.input(1), &c).ok() || c == nullptr) return {};
      axes.clear();
      for (double d : c->data) axes.push_back(static_cast<int64_t>(d));
    }
    const Shape* s = ShapeOf(n.input(0));
    if (s == nullptr) return {};
    for (int64_t& a : axes) {
      if (!NormalizeAxis(a, static_cast<int64_t>(s->size()), &a)) return {};
    }
    return axes;
  }

  // exp(x - max(x)) / sum(exp(x - max(x))) over the last axis (the max may
  // be missing).
  bool MatchSoftmaxExpanded(const NodeProto& div, std::string* x) const {
    const NodeProto* exp = NodeIs(div.input(0), "Exp");
    const NodeProto* sum = NodeIs(div.input(1), "ReduceSum");
    if (exp == nullptr || sum == nullptr ||
        !Same(sum->input(0), div.input(0)) ||
        IntAttribute(*sum, "keepdims", 1) == 0) {
      return false;
    }
    const Shape* s = ShapeOf(exp->input(0));
    if (s == nullptr || !IsLastAxis(AxesOf(*sum), s->size())) return false;
    *x = exp->input(0);
    if (const NodeProto* sub = NodeIs(exp->input(0), "Sub")) {
      const NodeProto* max = NodeIs(sub->input(1), "ReduceMax");
      if (max != nullptr && Same(max->input(0), sub->input(0)) &&
          IntAttribute(*max, "keepdims", 1) != 0 &&
          IsLastAxis(AxesOf(*max), s->size())) {
        *x = sub->input(0);
      }
    }
    return true;
  }

  Status EmitSoftmaxOf(const NodeProto& node, const std::string& t,
                       const std::string& x, uint32_t* id) {
    const Shape view = View2D(*ShapeOf(t));
    uint32_t in;
    TILEC_RETURN_IF_ERROR(Value(x, view, &in));
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    *id = NewOp(fb::OpKind::Softmax, NodeName(node), {in}, t, view, dtype);
    return Status::Ok();
  }

  Status EmitSoftmax(const NodeProto& node, const std::string& t,
                     uint32_t* id) {
    const Shape& s = *ShapeOf(t);
    int64_t axis = 0;
    if (!NormalizeAxis(IntAttribute(node, "axis", -1),
                       static_cast<int64_t>(s.size()), &axis) ||
        axis != static_cast<int64_t>(s.size()) - 1) {
      return Unsupported(node,
                         "softmax over axis " +
                             std::to_string(IntAttribute(node, "axis", -1)) +
                             " of a rank-" + std::to_string(s.size()) +
                             " tensor: tilec's Softmax is over the last "
                             "axis");
    }
    return EmitSoftmaxOf(node, t, node.input(0), id);
  }

  // -------------------------------------------------- elementwise

  Status EmitAdd(const NodeProto& node, const std::string& t, const Shape& want,
                 uint32_t* id) {
    const Shape& out = *ShapeOf(t);
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    const Shape view = View2D(out);
    const Shape last = {out.empty() ? 1 : out.back()};
    for (int side = 0; side < 2; ++side) {
      const std::string& bias = node.input(side);
      const std::string& x = node.input(1 - side);
      const Shape* bs = ShapeOf(bias);
      const Shape* xs = ShapeOf(x);
      if (bs == nullptr || xs == nullptr || Elements(*xs) != Elements(out)) {
        continue;
      }
      // A row broadcast over the rows; with one row, a parameter of lower
      // rank than the output (a Linear's bias at batch 1) is still a bias.
      const bool row = IsRowParam(bias, last) && Elements(*bs) == last[0] &&
                       (Elements(*bs) != Elements(out) ||
                        bs->size() < out.size());
      double scalar = 0;
      const bool constant_scalar = Scalar(bias, &scalar) && Elements(out) > 1;
      if (!row && !constant_scalar) continue;
      uint32_t a, b;
      TILEC_RETURN_IF_ERROR(Value(x, view, &a));
      if (row) {
        TILEC_RETURN_IF_ERROR(RowParam(bias, view[1], &b));
      } else {
        b = NewWeight(bias, {view[1]},
                      std::vector<float>(view[1], static_cast<float>(scalar)),
                      dtype);
      }
      *id = NewOp(fb::OpKind::BiasAdd, NodeName(node), {a, b}, t, view, dtype);
      return Status::Ok();
    }
    // One image's table added to every image (a [1, T, D] position
    // embedding at batch B > 1): the table's rows copied per image, then a
    // same-shape Add, as import-model builds it.
    for (int side = 0; side < 2; ++side) {
      const Shape* ts = ShapeOf(node.input(side));
      const Shape* xs = ShapeOf(node.input(1 - side));
      if (ts == nullptr || xs == nullptr || out.empty() ||
          Elements(*xs) != Elements(out) || ts->empty() ||
          ts->back() != out.back() || !LeadingBroadcast(*ts, out)) {
        continue;
      }
      uint32_t a, table, b;
      TILEC_RETURN_IF_ERROR(Value(node.input(1 - side), view, &a));
      TILEC_RETURN_IF_ERROR(Value(node.input(side), View2D(*ts), &table));
      TILEC_RETURN_IF_ERROR(EmitPerImage(node, table,
                                         Elements(out) / Elements(*ts),
                                         node.input(side) + ".rows", &b));
      *id = NewOp(
          fb::OpKind::Add, NodeName(node),
          side == 0 ? std::vector<uint32_t>{b, a} : std::vector<uint32_t>{a, b},
          t, view, dtype);
      return Status::Ok();
    }
    const Shape* as = ShapeOf(node.input(0));
    const Shape* bs = ShapeOf(node.input(1));
    if (as == nullptr || bs == nullptr || Elements(*as) != Elements(out) ||
        Elements(*bs) != Elements(out)) {
      // No form above holds it; the general step names what it refuses.
      return EmitElementwise(node, t, want, id);
    }
    uint32_t a, b;
    TILEC_RETURN_IF_ERROR(Value(node.input(0), want, &a));
    TILEC_RETURN_IF_ERROR(Value(node.input(1), want, &b));
    *id = NewOp(fb::OpKind::Add, NodeName(node), {a, b}, t, want, dtype);
    return Status::Ok();
  }

  // -------------------------------------------------- row movement
  //
  // A [..., T, D] tensor is tilec's [rows, D], row-major: each image's T
  // tokens are consecutive rows. Concatenating, picking or broadcasting
  // along any axis but the last (the tokens, the images) therefore moves
  // whole rows: one CopyRows.

  // Result rows [at, at + count) are rows [first, first + count) of operand
  // number `operand` (fb::RowCopy).
  using Segment = ir::RowSegment;

  // Segments sorted by `at` and covering the result once, as the IR
  // requires: the callers build them image by image.
  Status EmitCopyRows(const NodeProto& node, const std::string& name,
                      std::vector<uint32_t> operands,
                      const std::vector<Segment>& segments,
                      const std::string& result, int64_t width, fb::DType dtype,
                      uint32_t* id) {
    for (uint32_t v : operands) {
      if (values_[v]->dtype != dtype) {
        return Unsupported(
            node, "it moves rows of '" + values_[v]->name + "' (" +
                      fb::EnumNameDType(values_[v]->dtype) + ") into a " +
                      fb::EnumNameDType(dtype) +
                      " tensor; tilec's CopyRows keeps the dtype");
      }
    }
    fb::OperationT* op = nullptr;
    const Segment& last = segments.back();
    *id = NewOp(fb::OpKind::CopyRows, name, std::move(operands), result,
                {last.at + last.count, width}, dtype, &op);
    for (const Segment& s : segments) ir::AppendRowSegment(s, op);
    return Status::Ok();
  }

  // The rows of `from` ([rows, D]) repeated `images` times, as one image's
  // rows broadcast over the batch.
  Status EmitPerImage(const NodeProto& node, uint32_t from, int64_t images,
                      const std::string& result, uint32_t* id) {
    const fb::ValueT& v = *values_[from];
    const int64_t rows = v.shape[0];
    std::vector<Segment> segments;
    for (int64_t b = 0; b < images; ++b)
      segments.push_back({0, 0, rows, b * rows});
    return EmitCopyRows(node, NodeName(node) + ".rows", {from}, segments,
                        result, v.shape[1], v.dtype, id);
  }

  // `small` broadcasts to `big` over leading dims only (aligned from the
  // right: every dim of `small` beyond `big`'s trailing dims is 1), so its
  // data is one image's rows and `big` repeats them.
  static bool LeadingBroadcast(const Shape& small, const Shape& big) {
    const Shape core = StripOnes(small);
    if (core.size() > big.size() || Elements(small) >= Elements(big)) {
      return false;
    }
    return std::equal(core.begin(), core.end(), big.end() - core.size());
  }

  // The tensor an Expand (through casts) broadcasts over leading dims to
  // `shape`, or "" when `t` is not such an Expand.
  std::string ExpandSource(const std::string& t, const Shape& shape) const {
    const NodeProto* n = NodeIs(t, "Expand");
    if (n == nullptr) return "";
    const Shape* in = ShapeOf(n->input(0));
    // The width must be the input's own: a broadcast width is not rows.
    if (in == nullptr || in->empty() || in->back() != shape.back() ||
        !LeadingBroadcast(*in, shape)) {
      return "";
    }
    return n->input(0);
  }

  // Expand over leading dims: the input's rows once per image.
  Status EmitExpand(const NodeProto& node, const std::string& t, uint32_t* id) {
    const Shape& out = *ShapeOf(t);
    const std::string src = out.empty() ? "" : ExpandSource(t, out);
    if (src.empty()) {
      return Unsupported(node,
                         "an Expand that broadcasts other than over "
                         "leading (image) axes: tilec repeats whole rows "
                         "only");
    }
    const Shape in = View2D(*ShapeOf(src));
    uint32_t rows;
    TILEC_RETURN_IF_ERROR(Value(src, in, &rows));
    return EmitPerImage(node, rows, Elements(out) / Elements(in), t, id);
  }

  // Where an axis of a [..., D] tensor moves whole rows: any axis but the
  // last. `outer` is the product of the dims before it, `inner` the rows
  // one index of it spans (the product of the dims between it and D).
  struct RowAxis {
    int64_t axis = 0, outer = 1, inner = 1;
  };
  static bool RowAxisOf(const Shape& s, int64_t attr, RowAxis* r) {
    const int64_t rank = static_cast<int64_t>(s.size());
    if (rank < 2 || !NormalizeAxis(attr, rank, &r->axis) ||
        r->axis == rank - 1) {
      return false;
    }
    r->outer = Product(s, 0, r->axis);
    r->inner = Product(s, r->axis + 1, rank - 1);
    return true;
  }
  std::string NotRows(const std::string& op, int64_t attr,
                      const Shape& s) const {
    return "a " + op + " on axis " + std::to_string(attr) + " of a rank-" +
           std::to_string(s.size()) +
           " tensor, the last (width) axis; tilec moves whole rows only "
           "(any axis but the last)";
  }

  // Concat on an axis but the last: for each index of the dims before it,
  // each input's block of rows in turn (a class token's row, then an
  // image's patch rows). An input that is an Expand over leading dims (a
  // class token [1, 1, D] expanded to [B, 1, D]) is read from its source,
  // whose blocks repeat.
  Status EmitConcat(const NodeProto& node, const std::string& t, uint32_t* id) {
    const Shape& out = *ShapeOf(t);
    const int64_t attr = IntAttribute(node, "axis", 0);
    RowAxis r;
    if (!RowAxisOf(out, attr, &r)) {
      return Unsupported(node, NotRows("Concat", attr, out));
    }
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    std::vector<uint32_t> operands;
    std::vector<int64_t> blocks, copies;  // rows per outer index; repeats
    for (const std::string& in : node.input()) {
      if (ShapeOf(in) == nullptr) return Unknown(in, "tensor");
      const Shape& s = *ShapeOf(in);
      if (s.size() != out.size()) {
        return Unsupported(node, "its inputs' ranks differ from its output's");
      }
      const int64_t block = s[r.axis] * r.inner;
      std::string src = ExpandSource(in, s);
      if (!src.empty() &&
          (View2D(*ShapeOf(src))[0] % std::max<int64_t>(block, 1)) != 0) {
        src.clear();  // broadcast within a block: materialize the Expand
      }
      const Shape data = View2D(src.empty() ? s : *ShapeOf(src));
      uint32_t v;
      TILEC_RETURN_IF_ERROR(Value(src.empty() ? in : src, data, &v));
      operands.push_back(v);
      blocks.push_back(block);
      copies.push_back(block == 0 ? 1 : data[0] / block);
    }
    std::vector<Segment> segments;
    int64_t at = 0;
    for (int64_t o = 0; o < r.outer; ++o) {
      for (size_t i = 0; i < operands.size(); ++i) {
        if (blocks[i] == 0) continue;
        segments.push_back({static_cast<uint32_t>(i),
                            (o % copies[i]) * blocks[i], blocks[i], at});
        at += blocks[i];
      }
    }
    return EmitCopyRows(node, NodeName(node), std::move(operands), segments, t,
                        out.back(), dtype, id);
  }

  // Gather with constant indices, or a Slice with step 1 of one axis, on an
  // axis but the last: for each index of the dims before it, the picked
  // blocks of rows (token 0 of each image for a class-token head).
  Status EmitTokenPick(const NodeProto& node, const std::string& t,
                       uint32_t* id) {
    const std::string& data = node.input(0);
    if (ShapeOf(data) == nullptr) return Unknown(data, "tensor");
    const Shape& ds = *ShapeOf(data);
    RowAxis r;
    std::vector<int64_t> picks;  // indices along r.axis, in output order
    bool everything = false;
    TILEC_RETURN_IF_ERROR(node.op_type() == "Gather"
                              ? GatherPicks(node, ds, &r, &picks)
                              : SlicePicks(node, ds, &r, &picks, &everything));
    // x[:, :] (exporters write one Slice per indexed axis): no data moves.
    if (everything) return Value(data, View2D(ds), id);
    if (picks.empty() || r.inner == 0) {
      return Unsupported(node, "it picks nothing (an empty result)");
    }
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    uint32_t x;
    TILEC_RETURN_IF_ERROR(Value(data, View2D(ds), &x));
    const std::vector<Segment> segments = PickSegments(r, ds[r.axis], picks);
    // Every row in order (CLIP's position table gathered at 0..T-1): the
    // input itself.
    if (segments.size() == 1 && segments[0].first == 0 &&
        segments[0].count == values_[x]->shape[0]) {
      *id = x;
      return Status::Ok();
    }
    return EmitCopyRows(node, NodeName(node), {x}, segments, t, ds.back(),
                        dtype, id);
  }

  // A Gather's constant indices along its (row-moving) axis.
  Status GatherPicks(const NodeProto& node, const Shape& ds, RowAxis* r,
                     std::vector<int64_t>* picks) {
    const int64_t attr = IntAttribute(node, "axis", 0);
    if (!RowAxisOf(ds, attr, r)) {
      return Unsupported(node, NotRows("Gather", attr, ds));
    }
    if (!IsConstant(node.input(1))) {
      return Unsupported(node,
                         "a Gather with a computed index; tilec picks "
                         "rows only at constant positions");
    }
    ConstPtr idx;
    TILEC_RETURN_IF_ERROR(ConstantData(node.input(1), &idx));
    const int64_t d = ds[r->axis];
    for (double i : idx->data) {
      const int64_t k = static_cast<int64_t>(i) + (i < 0 ? d : 0);
      if (k < 0 || k >= d) {
        return Unsupported(
            node, "index " + std::to_string(static_cast<int64_t>(i)) +
                      " is outside axis " + std::to_string(r->axis) +
                      " of size " + std::to_string(d));
      }
      picks->push_back(k);
    }
    return Status::Ok();
  }

  // A Slice's contiguous window along the one axis it narrows;
  // *everything when it narrows none.
  Status SlicePicks(const NodeProto& node, const Shape& ds, RowAxis* r,
                    std::vector<int64_t>* picks, bool* everything) {
    for (int i = 1; i < node.input_size(); ++i) {
      if (!node.input(i).empty() && !IsConstant(node.input(i))) {
        return Unsupported(node,
                           "a Slice with computed bounds; tilec picks "
                           "rows only at constant positions");
      }
    }
    ConstPtr bounds[5];  // starts, ends, axes, steps
    for (int i = 1; i < std::min(node.input_size(), 5); ++i) {
      if (node.input(i).empty()) continue;
      TILEC_RETURN_IF_ERROR(ConstantData(node.input(i), &bounds[i]));
    }
    std::vector<int64_t> begin, step;
    Shape out;
    if (bounds[1] == nullptr || bounds[2] == nullptr ||
        !SliceWindow(ds, *bounds[1], *bounds[2], bounds[3].get(),
                     bounds[4].get(), &begin, &step, &out)) {
      return Unsupported(node, "a Slice whose window import-onnx cannot read");
    }
    int64_t axis = -1;
    for (int64_t a = 0; a < static_cast<int64_t>(ds.size()); ++a) {
      if (out[a] == ds[a] && step[a] == 1) continue;
      if (axis >= 0) {
        return Unsupported(node,
                           "a Slice of more than one axis; tilec picks "
                           "rows along one axis");
      }
      axis = a;
    }
    *everything = axis < 0;
    if (*everything) return Status::Ok();
    if (!RowAxisOf(ds, axis, r)) {
      return Unsupported(node, NotRows("Slice", axis, ds));
    }
    if (step[r->axis] != 1) {
      return Unsupported(node, "a Slice with step " +
                                   std::to_string(step[r->axis]) +
                                   "; tilec picks contiguous rows");
    }
    for (int64_t k = 0; k < out[r->axis]; ++k) {
      picks->push_back(begin[r->axis] + k);
    }
    return Status::Ok();
  }

  // For each index of the dims before the axis, the picked blocks of rows
  // in order; consecutive rows make one segment.
  static std::vector<Segment> PickSegments(const RowAxis& r, int64_t size,
                                           const std::vector<int64_t>& picks) {
    std::vector<Segment> segments;
    int64_t at = 0;
    for (int64_t o = 0; o < r.outer; ++o) {
      for (int64_t k : picks) {
        const int64_t first = (o * size + k) * r.inner;
        Segment* prev = segments.empty() ? nullptr : &segments.back();
        if (prev != nullptr && prev->first + prev->count == first) {
          prev->count += r.inner;
        } else {
          segments.push_back({0, first, r.inner, at});
        }
        at += r.inner;
      }
    }
    return segments;
  }

  // x * c or x / c for a scalar constant c: a Fused op of one Scale step.
  Status EmitScale(const NodeProto& node, const std::string& t,
                   const Shape& want, uint32_t* id) {
    const bool div = node.op_type() == "Div";
    for (int side = 0; side < (div ? 1 : 2); ++side) {
      double c = 0;
      if (!Scalar(node.input(1 - side), &c) || (div && c == 0)) continue;
      return EmitScaleOf(NodeName(node), node.input(side), t, want,
                         div ? 1.0 / c : c, id);
    }
    return EmitElementwise(node, t, want, id);
  }

  // Any other Add, Sub, Mul, Div, Pow, Sqrt, Tanh, Erf, Sigmoid or Relu:
  // a Fused op of one Unary or Binary step (import_elementwise.h).
  Status EmitElementwise(const NodeProto& node, const std::string& t,
                         const Shape& want, uint32_t* id) {
    const Shape* out = ShapeOf(t);
    if (out == nullptr) return Unknown(t, "tensor");
    std::vector<ElementwiseInput> inputs;
    for (const std::string& in : node.input()) {
      const Shape* shape = ShapeOf(in);
      if (shape == nullptr) return Unknown(in, "tensor");
      ElementwiseInput input;
      input.shape = *shape;
      if (double c = 0; Scalar(in, &c)) input.scalar = c;
      // A graph input or constant (or a view of one), whatever its shape.
      input.parameter = IsRowParam(in, *shape);
      inputs.push_back(std::move(input));
    }
    StatusOr<ElementwiseMatch> match =
        MatchElementwise(node.op_type(), *out, inputs);
    if (!match.ok()) return Unsupported(node, match.status().message());
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    const bool row = match->broadcast == fb::Broadcast::Row;
    const bool column = match->broadcast == fb::Broadcast::Column;
    // A row or column operand needs the [rows, w] view; otherwise the
    // consumer's.
    const Shape shape = row || column ? View2D(*out) : want;
    std::vector<uint32_t> operands(1);
    TILEC_RETURN_IF_ERROR(
        Value(node.input(match->running), shape, &operands[0]));
    if (match->other >= 0) {
      const std::string& other = node.input(match->other);
      uint32_t b;
      if (match->scalar) {
        b = NewWeight(other, {shape[1]},
                      std::vector<float>(shape[1],
                                         static_cast<float>(*match->scalar)),
                      dtype);
      } else if (row) {
        TILEC_RETURN_IF_ERROR(RowParam(other, shape[1], &b));
      } else if (column) {
        TILEC_RETURN_IF_ERROR(Value(other, {shape[0], 1}, &b));
      } else {
        TILEC_RETURN_IF_ERROR(Value(other, shape, &b));
      }
      operands.push_back(b);
    }
    fb::OperationT* op = nullptr;
    *id = NewOp(fb::OpKind::Fused, NodeName(node), operands, t, shape, dtype,
                &op);
    auto step = std::make_unique<fb::FusedStepT>();
    step->kind = match->other >= 0 ? fb::FusedStepKind::Binary
                                   : fb::FusedStepKind::Unary;
    step->fn = match->fn;
    step->operand = match->other >= 0 ? 1 : -1;
    step->broadcast = match->broadcast;
    step->operand_first = match->operand_first;
    op->body.push_back(std::move(step));
    return Status::Ok();
  }

  Status EmitScaleOf(const std::string& name, const std::string& x,
                     const std::string& t, const Shape& want, double factor,
                     uint32_t* id) {
    uint32_t in;
    TILEC_RETURN_IF_ERROR(Value(x, want, &in));
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    return EmitScaleValue(name, in, t, factor, dtype, id);
  }

  Status EmitCast(const NodeProto& node, const std::string& t,
                  const Shape& want, uint32_t* id) {
    if (!IsFloatCast(node)) {
      return Unsupported(node, "a cast to or from a non-float type");
    }
    uint32_t in;
    TILEC_RETURN_IF_ERROR(Value(node.input(0), want, &in));
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    *id = NewOp(fb::OpKind::Cast, NodeName(node), {in}, t, want, dtype);
    return Status::Ok();
  }

  // -------------------------------------------------- GEMMs

  // A constant matrix as [rows, cols] floats, transposed if asked.
  Status Matrix(const std::string& t, bool transpose, std::vector<float>* m,
                int64_t* rows, int64_t* cols) const {
    ConstPtr c;
    TILEC_RETURN_IF_ERROR(ConstantData(t, &c));
    if (c->shape.size() != 2) {
      return Status::Internal("'" + t + "' is not a matrix");
    }
    const int64_t r = c->shape[0], k = c->shape[1];
    m->resize(static_cast<size_t>(r * k));
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < k; ++j) {
        (*m)[transpose ? j * r + i : i * k + j] =
            static_cast<float>(c->data[i * k + j]);
      }
    }
    *rows = transpose ? k : r;
    *cols = transpose ? r : k;
    return Status::Ok();
  }

  Status EmitMatMul(const NodeProto& node, const std::string& t, uint32_t* id) {
    const Shape* as = ShapeOf(node.input(0));
    const Shape* bs = ShapeOf(node.input(1));
    if (as == nullptr || bs == nullptr || as->size() < 2 || bs->size() != 2) {
      return Unsupported(
          node, "a MatMul of " + ir::ShapeToString(as ? *as : Shape{}) +
                    " and " + ir::ShapeToString(bs ? *bs : Shape{}) +
                    ": tilec multiplies [rows, K] by a [K, N] matrix (a "
                    "batched product only inside the attention pattern)");
    }
    const int64_t k = bs->at(0), n = bs->at(1);
    if (as->back() != k) {
      return Status::BadInput(g_.model_name() + ": " + Label(node) +
                              ": inner dimensions differ: " +
                              ir::ShapeToString(*as) + " times " +
                              ir::ShapeToString(*bs));
    }
    TILEC_RETURN_IF_ERROR(CheckExtents(node.input(0), *as, &node));
    TILEC_RETURN_IF_ERROR(CheckExtents(node.input(1), *bs, &node));
    const int64_t rows = Elements(*as) / k;
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    uint32_t a, b;
    TILEC_RETURN_IF_ERROR(Value(node.input(0), {rows, k}, &a));
    TILEC_RETURN_IF_ERROR(Value(node.input(1), {k, n}, &b));
    *id =
        NewOp(fb::OpKind::MatMul, NodeName(node), {a, b}, t, {rows, n}, dtype);
    return Status::Ok();
  }

  // alpha * A' B' + beta * C with A an activation.
  Status EmitGemm(const NodeProto& node, const std::string& t, uint32_t* id) {
    const bool ta = IntAttribute(node, "transA", 0) != 0;
    const bool tb = IntAttribute(node, "transB", 0) != 0;
    const double alpha = FloatAttribute(node, "alpha", 1.0f);
    const double beta = FloatAttribute(node, "beta", 1.0f);
    // Gemm's inputs are matrices; shape inference knows the output only
    // when it knows them, but a declared output (value_info) need not.
    const Shape* as_known = ShapeOf(node.input(0));
    const Shape* out_known = ShapeOf(t);
    if (as_known == nullptr) return Unknown(node.input(0), "Gemm input");
    if (as_known->size() != 2 || out_known == nullptr ||
        out_known->size() != 2) {
      return Unsupported(node, "a Gemm of " + ir::ShapeToString(*as_known) +
                                   ": tilec multiplies matrices");
    }
    const Shape& out = *out_known;
    const int64_t m = out[0], n = out[1];
    const Shape& as = *as_known;
    const int64_t k = ta ? as[0] : as[1];
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    if (ta) {
      return Unsupported(node,
                         "transA=1 on an activation: tilec has no "
                         "transpose of a computed value");
    }
    const std::string name = NodeName(node);
    uint32_t a, b;
    TILEC_RETURN_IF_ERROR(Value(node.input(0), {m, k}, &a));
    bool alpha_done = alpha == 1.0;
    if (IsConstant(node.input(1))) {
      std::vector<float> w;
      int64_t rows = 0, cols = 0;
      TILEC_RETURN_IF_ERROR(Matrix(node.input(1), tb, &w, &rows, &cols));
      for (float& f : w) f = static_cast<float>(f * alpha);
      fb::DType wtype;
      TILEC_RETURN_IF_ERROR(DTypeOf(node.input(1), &wtype));
      b = NewWeight(node.input(1), {k, n}, w, wtype);
      alpha_done = true;
    } else if (tb) {
      return Unsupported(node,
                         "transB=1 on an activation: tilec has no "
                         "transpose of a computed value");
    } else {
      TILEC_RETURN_IF_ERROR(Value(node.input(1), {k, n}, &b));
    }
    const bool has_c =
        node.input_size() > 2 && !node.input(2).empty() && beta != 0.0;
    const std::string product = has_c || !alpha_done ? name + ".product" : t;
    uint32_t y =
        NewOp(fb::OpKind::MatMul, name, {a, b}, product, {m, n}, dtype);
    if (!alpha_done) {
      if (!has_c) {
        return EmitScaleValue(name + ".alpha", y, t, alpha, dtype, id);
      }
      TILEC_RETURN_IF_ERROR(EmitScaleValue(name + ".alpha", y, name + ".scaled",
                                           alpha, dtype, &y));
    }
    if (!has_c) {
      *id = y;
      return Status::Ok();
    }
    return EmitGemmBias(node, t, y, beta, m, n, dtype, id);
  }

  Status EmitScaleValue(const std::string& name, uint32_t x,
                        const std::string& result, double factor,
                        fb::DType dtype, uint32_t* id) {
    fb::OperationT* op = nullptr;
    *id = NewOp(fb::OpKind::Fused, name, {x}, result, values_[x]->shape, dtype,
                &op);
    auto step = std::make_unique<fb::FusedStepT>();
    step->kind = fb::FusedStepKind::Scale;
    step->scale = static_cast<float>(factor);
    step->dtype = dtype;
    op->body.push_back(std::move(step));
    return Status::Ok();
  }

  // + beta * C, C broadcast to [m, n]: a bias row, a full matrix, or a
  // constant of any broadcastable shape expanded at import.
  Status EmitGemmBias(const NodeProto& node, const std::string& t, uint32_t y,
                      double beta, int64_t m, int64_t n, fb::DType dtype,
                      uint32_t* id) {
    const std::string& c_name = node.input(2);
    if (ShapeOf(c_name) == nullptr) return Unknown(c_name, "tensor");
    const Shape& cs = *ShapeOf(c_name);
    const std::string name = NodeName(node);
    const bool row = StripOnes(cs) == Shape{n} || (n == 1 && Elements(cs) == 1);
    uint32_t c;
    if (IsConstant(c_name)) {
      ConstPtr cv;
      TILEC_RETURN_IF_ERROR(ConstantData(c_name, &cv));
      const Shape target = row ? Shape{n} : Shape{m, n};
      const Shape full = {m, n};
      std::vector<float> data(static_cast<size_t>(Elements(target)));
      // Broadcast C (rank <= 2) to the target by its right-aligned dims.
      Shape c2 = cs;
      while (c2.size() < 2) c2.insert(c2.begin(), 1);
      for (int64_t i = 0; i < Elements(target); ++i) {
        const int64_t r = row ? 0 : i / n, col = i % n;
        const int64_t src =
            (c2[0] == 1 ? 0 : r) * c2[1] + (c2[1] == 1 ? 0 : col);
        data[i] = static_cast<float>(cv->data[src] * beta);
      }
      fb::DType ctype;
      TILEC_RETURN_IF_ERROR(DTypeOf(c_name, &ctype));
      c = NewWeight(c_name, target, data, ctype);
      *id = NewOp(row ? fb::OpKind::BiasAdd : fb::OpKind::Add, name + ".bias",
                  {y, c}, t, full, dtype);
      return Status::Ok();
    }
    if (!row && Elements(cs) != m * n) {
      return Unsupported(node, "C of shape " + ir::ShapeToString(cs) +
                                   " is a graph input broadcast to [" +
                                   std::to_string(m) + "," + std::to_string(n) +
                                   "]: tilec adds a computed value only as a "
                                   "[n] row (BiasAdd) or the whole [m, n] "
                                   "matrix (Add)");
    }
    TILEC_RETURN_IF_ERROR(Value(c_name, row ? Shape{n} : Shape{m, n}, &c));
    if (beta != 1.0) {
      TILEC_RETURN_IF_ERROR(EmitScaleValue(
          name + ".beta", c, name + ".c_scaled", beta, dtype, &c));
    }
    *id = NewOp(row ? fb::OpKind::BiasAdd : fb::OpKind::Add, name + ".bias",
                {y, c}, t, {m, n}, dtype);
    return Status::Ok();
  }

  // -------------------------------------------------- attention

  // If *t is x * c, c * x or x / c for a scalar constant c (through casts):
  // *t becomes x and *factor is multiplied by c (or 1/c).
  bool PeelScalarFactor(std::string* t, double* factor) const {
    const NodeProto* n = Node(PeelCasts(*t));
    if (n == nullptr || (n->op_type() != "Mul" && n->op_type() != "Div")) {
      return false;
    }
    const bool div = n->op_type() == "Div";
    for (int side = 0; side < (div ? 1 : 2); ++side) {
      double c = 0;
      if (Scalar(n->input(1 - side), &c) && c != 0) {
        *factor *= div ? 1.0 / c : c;
        *t = n->input(side);
        return true;
      }
    }
    return false;
  }

  // x @ W (+ b) with constant W [in, out] and b [out] (MatMul + Add, or a
  // Gemm), through casts and scalar factors.
  bool MatchLinear(std::string t, LinearMatch* m) const {
    m->factor = 1.0;
    while (PeelScalarFactor(&t, &m->factor)) {
    }
    const NodeProto* n = Node(PeelCasts(t));
    if (n == nullptr) return false;
    std::string matmul = t, bias;
    if (n->op_type() == "Add") {
      for (int side = 0; side < 2; ++side) {
        if (IsConstant(PeelCasts(n->input(side))) &&
            NodeIs(n->input(1 - side), "MatMul") != nullptr) {
          bias = PeelCasts(n->input(side));
          matmul = n->input(1 - side);
        }
      }
      if (bias.empty()) return false;
      n = NodeIs(matmul, "MatMul");
    }
    bool transpose = false;
    std::string gemm_bias;
    if (n->op_type() == "Gemm") {
      if (IntAttribute(*n, "transA", 0) != 0 ||
          FloatAttribute(*n, "alpha", 1.0f) != 1.0f ||
          FloatAttribute(*n, "beta", 1.0f) != 1.0f) {
        return false;
      }
      transpose = IntAttribute(*n, "transB", 0) != 0;
      if (n->input_size() > 2) gemm_bias = n->input(2);
      if (!bias.empty() || !gemm_bias.empty()) {
        if (!bias.empty() && !gemm_bias.empty()) return false;
        if (bias.empty()) bias = gemm_bias;
      }
    } else if (n->op_type() != "MatMul") {
      return false;
    }
    if (!IsConstant(n->input(1))) return false;
    const Shape* ws = ShapeOf(n->input(1));
    if (ws == nullptr || ws->size() != 2) return false;
    int64_t rows = 0, cols = 0;
    if (!Matrix(n->input(1), transpose, &m->weight, &rows, &cols).ok()) {
      return false;
    }
    m->in = rows;
    m->out = cols;
    m->bias.assign(cols, 0.0f);
    if (!bias.empty()) {
      ConstPtr b;
      if (!g_.Constant(bias, &b).ok() || b == nullptr ||
          StripOnes(b->shape) != Shape{cols}) {
        return false;
      }
      m->bias = ToFloats(*b);
    }
    m->x = n->input(0);
    m->node_name = NodeName(*n);
    return true;
  }

  // q, k or v: Transpose(Reshape(src, [B, T, H, D])) with the composed
  // permutation `expected`, through casts and scalar factors.
  bool MatchHeads(std::string t, const std::vector<int64_t>& expected,
                  HeadsMatch* h) const {
    std::vector<int64_t> perm = {0, 1, 2, 3};
    h->factor = 1.0;
    for (int guard = 0; guard < 16; ++guard) {
      const NodeProto* n = Node(PeelCasts(t));
      if (n == nullptr) return false;
      const std::string& op = n->op_type();
      if (PeelScalarFactor(&t, &h->factor)) continue;
      if (op == "Transpose") {
        std::vector<int64_t> p = IntsAttribute(*n, "perm");
        if (p.size() != 4) return false;
        for (int64_t& q : perm) q = p[q];
        t = n->input(0);
        continue;
      }
      if (op == "Reshape") {
        const Shape* out = ShapeOf(t);
        const Shape* in = ShapeOf(n->input(0));
        if (out == nullptr || in == nullptr || out->size() != 4 ||
            in->empty() || in->back() != (*out)[2] * (*out)[3] ||
            perm != expected) {
          return false;
        }
        h->source = n->input(0);
        h->batch = (*out)[0];
        h->tokens = (*out)[1];
        h->heads = (*out)[2];
        h->head_dim = (*out)[3];
        return true;
      }
      return false;
    }
    return false;
  }

  Status EmitTranspose(const NodeProto& node, const std::string& t,
                       uint32_t* id) {
    const std::vector<int64_t> perm = IntsAttribute(node, "perm");
    if (perm == std::vector<int64_t>{0, 2, 1, 3}) {
      if (const NodeProto* pv = NodeIs(node.input(0), "MatMul")) {
        return EmitAttention(node, *pv, t, id);
      }
    }
    if (perm == std::vector<int64_t>{0, 2, 1}) {
      const std::string flat = PeelCasts(node.input(0));
      const NodeProto* view = Node(flat);
      if (view != nullptr &&
          (view->op_type() == "Reshape" || view->op_type() == "Flatten")) {
        if (const NodeProto* conv = NodeIs(view->input(0), "Conv")) {
          return EmitPatchEmbedding(node, *conv, t, id);
        }
      }
    }
    return Unsupported(node,
                       "a Transpose outside the attention and patch "
                       "embedding patterns: tilec has no transpose "
                       "of a computed value");
  }

  // Transpose(MatMul(Softmax(scale * Q K^T), V), [0, 2, 1, 3]).
  Status EmitAttention(const NodeProto& transpose, const NodeProto& pv,
                       const std::string& t, uint32_t* id) {
    auto fail = [&](const std::string& why) {
      return Unsupported(pv, "attention: " + why);
    };
    std::string probs_tensor = PeelCasts(pv.input(0));
    const NodeProto* softmax = Node(probs_tensor);
    std::string scores_tensor;
    if (softmax != nullptr && softmax->op_type() == "Softmax") {
      const Shape* s = ShapeOf(probs_tensor);
      int64_t axis = 0;
      if (s == nullptr ||
          !NormalizeAxis(IntAttribute(*softmax, "axis", -1),
                         static_cast<int64_t>(s->size()), &axis) ||
          axis != static_cast<int64_t>(s->size()) - 1) {
        return fail("the softmax is not over the last axis");
      }
      scores_tensor = softmax->input(0);
    } else if (softmax == nullptr || softmax->op_type() != "Div" ||
               !MatchSoftmaxExpanded(*softmax, &scores_tensor)) {
      return fail("the probabilities '" + probs_tensor +
                  "' are not a softmax of the scores");
    }
    double scale = 1.0;
    std::string qk_tensor = scores_tensor;
    while (PeelScalarFactor(&qk_tensor, &scale)) {
    }
    const NodeProto* qk = NodeIs(qk_tensor, "MatMul");
    if (qk == nullptr) {
      return fail("the scores '" + scores_tensor +
                  "' are not Q K^T (a mask "
                  "or bias added to them is not supported)");
    }
    HeadsMatch q, k, v;
    if (!MatchHeads(qk->input(0), {0, 2, 1, 3}, &q) ||
        !MatchHeads(qk->input(1), {0, 2, 3, 1}, &k) ||
        !MatchHeads(pv.input(1), {0, 2, 1, 3}, &v)) {
      return fail(
          "q, k and v are not [B, T, H, D] views (Reshape then "
          "Transpose) of [B*T, H*D] tensors");
    }
    if (q.batch != k.batch || q.batch != v.batch || q.tokens != k.tokens ||
        q.tokens != v.tokens || q.heads != k.heads || q.heads != v.heads ||
        q.head_dim != k.head_dim || q.head_dim != v.head_dim) {
      return fail("q, k and v have different head shapes");
    }
    scale *= q.factor * k.factor;
    LinearMatch lq, lk, lv;
    const bool linear = MatchLinear(q.source, &lq) &&
                        MatchLinear(k.source, &lk) &&
                        MatchLinear(v.source, &lv);
    if (!linear || !Same(lq.x, lk.x) || !Same(lq.x, lv.x)) {
      return fail(
          "q, k and v are not projections (constant weights) of one "
          "tensor; tilec's attention reads one fused qkv value");
    }
    if (!options_.fuse_qkv) {
      return fail(
          "--no-fuse-qkv: keeping q, k and v apart needs "
          "AttentionScores(q, k) and AttentionContext(probs, v) "
          "forms that tilec's op set does not have (its attention "
          "ops read one fused [rows, 3*H*D] qkv value)");
    }
    scale *= lq.factor * lk.factor;
    const int64_t hd = q.heads * q.head_dim, rows = q.batch * q.tokens;
    if (lq.out != hd || lk.out != hd || lv.out != hd || lq.in != lk.in ||
        lq.in != lv.in) {
      return fail("the q, k and v projections have different sizes");
    }
    const int64_t in = lq.in;
    std::vector<float> w(static_cast<size_t>(in * 3 * hd)), b(3 * hd);
    const LinearMatch* parts[] = {&lq, &lk, &lv};
    for (int p = 0; p < 3; ++p) {
      const float f = p == 2 ? static_cast<float>(lv.factor) : 1.0f;
      for (int64_t r = 0; r < in; ++r) {
        for (int64_t c = 0; c < hd; ++c) {
          w[r * 3 * hd + p * hd + c] = parts[p]->weight[r * hd + c] * f;
        }
      }
      for (int64_t c = 0; c < hd; ++c) b[p * hd + c] = parts[p]->bias[c] * f;
    }
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    const std::string prefix =
        CommonPrefix({lq.node_name, lk.node_name, lv.node_name});
    uint32_t x;
    TILEC_RETURN_IF_ERROR(Value(lq.x, {rows, in}, &x));
    const uint32_t wv = NewWeight(prefix + "qkv.w", {in, 3 * hd}, w, dtype);
    const uint32_t bv = NewWeight(prefix + "qkv.b", {3 * hd}, b, dtype);
    const uint32_t qkv = NewOp(fb::OpKind::MatMul, prefix + "qkv", {x, wv},
                               prefix + "qkv.out", {rows, 3 * hd}, dtype);
    const uint32_t qkv_b =
        NewOp(fb::OpKind::BiasAdd, prefix + "qkv_bias", {qkv, bv},
              prefix + "qkv_bias.out", {rows, 3 * hd}, dtype);
    const Shape scores_shape = {q.batch, q.heads, q.tokens, q.tokens};
    fb::OperationT* op = nullptr;
    const uint32_t scores =
        NewOp(fb::OpKind::AttentionScores, NodeName(*qk), {qkv_b},
              scores_tensor, scores_shape, dtype, &op);
    op->heads = static_cast<int32_t>(q.heads);
    op->head_dim = static_cast<int32_t>(q.head_dim);
    op->scale = static_cast<float>(scale);
    const uint32_t probs = NewOp(fb::OpKind::Softmax, NodeName(*softmax),
                                 {scores}, probs_tensor, scores_shape, dtype);
    *id = NewOp(fb::OpKind::AttentionContext, NodeName(pv), {probs, qkv_b}, t,
                {rows, hd}, dtype, &op);
    op->heads = static_cast<int32_t>(q.heads);
    op->head_dim = static_cast<int32_t>(q.head_dim);
    ++attention_layers_;
    batch_ = q.batch;
    tokens_ = q.tokens;
    width_ = hd;
    heads_ = q.heads;
    (void)transpose;
    return Status::Ok();
  }

  // -------------------------------------------------- pooling heads
  //
  // nn.MultiheadAttention(batch_first=True) over one learned probe per
  // image (SigLIP's MAP head) as torch.onnx.export writes it: the tokens
  // transposed to sequence-first [T, B, w], q from the probe and k, v from
  // the tokens by MatMul with slices of in_proj_weight (k and v by one
  // MatMul, then Slice, when key is value), each reshaped to [T, B*H, D],
  // q divided by sqrt(D), bmm, Softmax, bmm with v; with one query the
  // transposes around q and the context move no data (KeepsRowOrder).
  // It becomes import-model's head: the probe's q projection, copied per
  // image, a kv projection [w, 2w] of the tokens, the cross form of
  // AttentionScores, Softmax, AttentionContext.

  // The batched probs @ v of attention with one query: a softmax's
  // [B*H, 1, T] times [B*H, T, D].
  bool IsPoolingAttention(const NodeProto& pv) const {
    const Shape* ps = ShapeOf(pv.input(0));
    const Shape* vs = ShapeOf(pv.input(1));
    return ps != nullptr && vs != nullptr && ps->size() == 3 &&
           vs->size() == 3 && (*ps)[1] == 1 &&
           NodeIs(pv.input(0), "Softmax") != nullptr;
  }

  // k or v: columns [first, first + count) of a projection of the tokens,
  // viewed [T, B*H, D] and transposed by `perm`.
  struct KeyValuePart {
    LinearMatch linear;
    int64_t first = 0, count = 0;
  };

  bool MatchKeyValuePart(const std::string& t,
                         const std::vector<int64_t>& perm,
                         KeyValuePart* part) const {
    const NodeProto* transpose = NodeIs(t, "Transpose");
    if (transpose == nullptr || IntsAttribute(*transpose, "perm") != perm) {
      return false;
    }
    const NodeProto* reshape = NodeIs(transpose->input(0), "Reshape");
    if (reshape == nullptr) return false;
    std::string projected = reshape->input(0);
    const Shape* ps = ShapeOf(projected);
    if (ps == nullptr || ps->size() != 3) return false;
    part->first = 0;
    part->count = ps->back();
    if (const NodeProto* slice = NodeIs(projected, "Slice")) {
      const Shape* whole = ShapeOf(slice->input(0));
      std::vector<int64_t> begin, step;
      Shape out;
      ConstPtr bounds[5];
      for (int i = 1; i < std::min(slice->input_size(), 5); ++i) {
        if (!slice->input(i).empty() &&
            (!g_.Constant(slice->input(i), &bounds[i]).ok() ||
             bounds[i] == nullptr)) {
          return false;
        }
      }
      if (whole == nullptr || bounds[1] == nullptr || bounds[2] == nullptr ||
          !SliceWindow(*whole, *bounds[1], *bounds[2], bounds[3].get(),
                       bounds[4].get(), &begin, &step, &out) ||
          step.back() != 1 || Shape(out.begin(), out.end() - 1) !=
                                  Shape(whole->begin(), whole->end() - 1)) {
        return false;
      }
      part->first = begin.back();
      projected = slice->input(0);
    }
    return MatchLinear(projected, &part->linear);
  }

  // Transpose(x, [1, 0, 2]) of the [B, T, w] tokens: batch_first's
  // sequence-first view; the tokens themselves.
  bool SequenceFirstSource(const std::string& t, std::string* tokens) const {
    const NodeProto* n = NodeIs(t, "Transpose");
    if (n == nullptr || IntsAttribute(*n, "perm") != Shape{1, 0, 2}) {
      return false;
    }
    *tokens = n->input(0);
    return true;
  }

  // Through views, Expand and Tile: the constant [.., 1, w] probe a query
  // repeats for every image.
  bool ProbeSource(std::string t, int64_t width, std::string* probe) const {
    for (int guard = 0; guard < 16; ++guard) {
      t = PeelViews(t);
      const NodeProto* n = Node(t);
      if (n != nullptr &&
          (n->op_type() == "Expand" || n->op_type() == "Tile") &&
          IsConstant(n->input(1))) {
        t = n->input(0);
        continue;
      }
      const Shape* s = ShapeOf(t);
      if (n != nullptr || !IsConstant(t) || s == nullptr ||
          Elements(*s) != width) {
        return false;
      }
      *probe = t;
      return true;
    }
    return false;
  }

  // What attention pooling reads: the probe's query projection, the
  // tokens' key and value projections, the head split and the scores'
  // constant factors.
  struct PoolingMatch {
    const NodeProto* softmax = nullptr;
    const NodeProto* qk = nullptr;
    const NodeProto* q_node = nullptr;  // the query's projection
    double scale = 1.0;
    LinearMatch q;
    KeyValuePart k, v;
    std::string probe, tokens;
    int64_t batch = 0, keys = 0, width = 0, heads = 0, head_dim = 0;
  };

  // The pattern above from the context MatMul `pv` up; an Infeasible status
  // naming `pv` and what it expected where the graph differs.
  Status MatchPoolingAttention(const NodeProto& pv, PoolingMatch* m) const {
    auto fail = [&](const std::string& why) {
      return Unsupported(pv, "attention pooling (one query): " + why);
    };
    const std::string probs = PeelCasts(pv.input(0));
    m->softmax = NodeIs(probs, "Softmax");
    const int64_t axis =
        m->softmax == nullptr ? 0 : IntAttribute(*m->softmax, "axis", -1);
    if (m->softmax == nullptr || (axis != -1 && axis != 2)) {
      return fail("expected a Softmax over the keys as the probabilities '" +
                  probs + "'");
    }
    std::string qk = m->softmax->input(0);
    while (PeelScalarFactor(&qk, &m->scale)) {
    }
    m->qk = NodeIs(qk, "MatMul");
    if (m->qk == nullptr) {
      return fail("expected the scores '" + m->softmax->input(0) +
                  "' to be q k^T scaled by constants (a mask or a bias added "
                  "to them is not supported)");
    }
    std::string q = m->qk->input(0);
    while (PeelScalarFactor(&q, &m->scale)) {
    }
    m->q_node = Node(PeelViews(q));
    if (!MatchLinear(PeelViews(q), &m->q) ||
        !ProbeSource(m->q.x, m->q.in, &m->probe)) {
      return fail("expected q to be a projection (constant weights) of a "
                  "constant probe repeated for each image");
    }
    std::string v_tokens;
    if (!MatchKeyValuePart(m->qk->input(1), {1, 2, 0}, &m->k) ||
        !MatchKeyValuePart(pv.input(1), {1, 0, 2}, &m->v) ||
        !SequenceFirstSource(m->k.linear.x, &m->tokens) ||
        !SequenceFirstSource(m->v.linear.x, &v_tokens) ||
        !Same(m->tokens, v_tokens)) {
      return fail("expected k and v to be projections (constant weights) of "
                  "one [B, T, w] tensor transposed to [T, B, w] "
                  "(batch_first=True), viewed [T, B*H, D] and transposed");
    }
    const Shape* ts = ShapeOf(m->tokens);
    const Shape* ks = ShapeOf(m->qk->input(1));  // [B*H, D, T]
    if (ts == nullptr || ts->size() != 3 || ks == nullptr || ks->size() != 3) {
      return fail("expected [B, T, w] tokens");
    }
    m->batch = (*ts)[0];
    m->keys = (*ts)[1];
    m->width = (*ts)[2];
    m->head_dim = (*ks)[1];
    m->heads = (*ks)[0] / m->batch;
    const int64_t w = m->q.out;
    if (m->heads * m->batch != (*ks)[0] || m->heads * m->head_dim != w ||
        m->k.count != w || m->v.count != w || (*ks)[2] != m->keys ||
        m->k.linear.in != m->width) {
      return fail("q, k and v do not split into the same heads");
    }
    return Status::Ok();
  }

  Status EmitPoolingAttention(const NodeProto& pv, const std::string& t,
                              uint32_t* id) {
    PoolingMatch m;
    TILEC_RETURN_IF_ERROR(MatchPoolingAttention(pv, &m));
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    uint32_t x;
    TILEC_RETURN_IF_ERROR(Value(m.tokens, {m.batch * m.keys, m.width}, &x));
    uint32_t q;
    TILEC_RETURN_IF_ERROR(EmitProbeQuery(m, dtype, &q));
    const uint32_t kv = EmitKeyValue(m.k, m.v, m.batch * m.keys, dtype, x);
    const Shape scores_shape = {m.batch, m.heads, 1, m.keys};
    fb::OperationT* op = nullptr;
    const uint32_t scores =
        NewOp(fb::OpKind::AttentionScores, NodeName(*m.qk), {q, kv},
              m.softmax->input(0), scores_shape, dtype, &op);
    op->heads = static_cast<int32_t>(m.heads);
    op->head_dim = static_cast<int32_t>(m.head_dim);
    op->scale = static_cast<float>(m.scale);
    const uint32_t probs =
        NewOp(fb::OpKind::Softmax, NodeName(*m.softmax), {scores},
              m.softmax->output(0), scores_shape, dtype);
    *id = NewOp(fb::OpKind::AttentionContext, NodeName(pv), {probs, kv}, t,
                {m.batch, m.q.out}, dtype, &op);
    op->heads = static_cast<int32_t>(m.heads);
    op->head_dim = static_cast<int32_t>(m.head_dim);
    return Status::Ok();
  }

  // The probe row's query (a one-row GEMM and its bias, as import-model
  // builds it), copied for each image.
  Status EmitProbeQuery(const PoolingMatch& m, fb::DType dtype, uint32_t* q) {
    const LinearMatch& lq = m.q;
    *q = NewOp(fb::OpKind::MatMul, lq.node_name,
               {ProbeRow(m.probe, lq.in, dtype),
                ScaledWeight(lq, 0, lq.out, dtype)},
               lq.node_name + ".out", {1, lq.out}, dtype);
    *q = NewOp(fb::OpKind::BiasAdd, lq.node_name + ".bias",
               {*q, NewWeight(lq.node_name + ".b", {lq.out},
                              ScaledBias(lq, 0, lq.out), dtype)},
               lq.node_name + ".bias.out", {1, lq.out}, dtype);
    if (m.batch == 1) return Status::Ok();
    return EmitPerImage(*m.q_node, *q, m.batch, lq.node_name + ".rows.out", q);
  }

  // The probe as one [1, w] row.
  uint32_t ProbeRow(const std::string& probe, int64_t width, fb::DType dtype) {
    ConstPtr c;
    (void)g_.Constant(probe, &c);  // ProbeSource saw it constant
    return NewWeight(probe, {1, width}, ToFloats(*c), dtype);
  }

  // Columns [first, first + count) of a projection's weight [in, out] (its
  // scalar factor folded in).
  uint32_t ScaledWeight(const LinearMatch& m, int64_t first, int64_t count,
                        fb::DType dtype) {
    return NewWeight(m.node_name + ".w", {m.in, count},
                     WeightColumns(m, first, count), dtype);
  }
  static std::vector<float> WeightColumns(const LinearMatch& m, int64_t first,
                                          int64_t count) {
    std::vector<float> w;
    for (int64_t r = 0; r < m.in; ++r) {
      for (int64_t c = first; c < first + count; ++c) {
        w.push_back(static_cast<float>(m.weight[r * m.out + c] * m.factor));
      }
    }
    return w;
  }
  static std::vector<float> ScaledBias(const LinearMatch& m, int64_t first,
                                       int64_t count) {
    std::vector<float> b;
    for (int64_t c = first; c < first + count; ++c) {
      b.push_back(static_cast<float>(m.bias[c] * m.factor));
    }
    return b;
  }

  // The tokens' [rows, 2w] keys and values, columns [k heads | v heads]:
  // one MatMul over [Wk | Wv] and its bias, as import-model's head.
  uint32_t EmitKeyValue(const KeyValuePart& k, const KeyValuePart& v,
                        int64_t rows, fb::DType dtype, uint32_t x) {
    const int64_t in = k.linear.in, n = k.count + v.count;
    const std::vector<float> wk = WeightColumns(k.linear, k.first, k.count);
    const std::vector<float> wv = WeightColumns(v.linear, v.first, v.count);
    std::vector<float> w;
    for (int64_t r = 0; r < in; ++r) {
      w.insert(w.end(), wk.begin() + r * k.count, wk.begin() + (r + 1) * k.count);
      w.insert(w.end(), wv.begin() + r * v.count, wv.begin() + (r + 1) * v.count);
    }
    std::vector<float> b = ScaledBias(k.linear, k.first, k.count);
    const std::vector<float> bv = ScaledBias(v.linear, v.first, v.count);
    b.insert(b.end(), bv.begin(), bv.end());
    const std::string name =
        CommonPrefix({k.linear.node_name, v.linear.node_name}) + "kv";
    const uint32_t product =
        NewOp(fb::OpKind::MatMul, name, {x, NewWeight(name + ".w", {in, n}, w, dtype)},
              name + ".out", {rows, n}, dtype);
    return NewOp(fb::OpKind::BiasAdd, name + "_bias",
                 {product, NewWeight(name + ".b", {n}, b, dtype)},
                 name + "_bias.out", {rows, n}, dtype);
  }

  // ReduceMean over the tokens (the axis before the last) of [B, T, w]:
  // the mean of each image's rows is a product with a constant [B, B*T]
  // averaging matrix (1/T on image b's T columns of row b), one MatMul
  // that the planner prices like any other (docs/import-onnx.md).
  Status EmitTokenMean(const NodeProto& node, const std::string& t,
                       uint32_t* id) {
    const Shape* xs = ShapeOf(node.input(0));
    const std::vector<int64_t> axes = AxesOf(node);
    if (xs == nullptr || xs->size() < 2 ||
        axes != std::vector<int64_t>{static_cast<int64_t>(xs->size()) - 2}) {
      return Unsupported(node,
                         "a ReduceMean over axes other than the tokens (the "
                         "axis before the last, e.g. x.mean(dim=1) of [B, T, "
                         "w]): tilec averages whole rows only");
    }
    const int64_t tokens = (*xs)[xs->size() - 2], width = xs->back();
    const int64_t images = Elements(*xs) / (tokens * width);
    uint32_t x;
    TILEC_RETURN_IF_ERROR(Value(node.input(0), {images * tokens, width}, &x));
    std::vector<float> average(static_cast<size_t>(images * images * tokens));
    for (int64_t b = 0; b < images; ++b) {
      std::fill_n(average.begin() + b * images * tokens + b * tokens, tokens,
                  static_cast<float>(1.0 / static_cast<double>(tokens)));
    }
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    const std::string name = NodeName(node);
    const uint32_t a =
        NewWeight(name + ".average", {images, images * tokens}, average, dtype);
    *id = NewOp(fb::OpKind::MatMul, name, {a, x}, t, {images, width}, dtype);
    return Status::Ok();
  }

  static std::string CommonPrefix(const std::vector<std::string>& names) {
    std::string p = names[0];
    for (const std::string& n : names) {
      size_t i = 0;
      while (i < p.size() && i < n.size() && p[i] == n[i]) ++i;
      p.resize(i);
    }
    // Cut back to a separator so the prefix is a scope ("/l0/attn/").
    const size_t cut = p.find_last_of("/.");
    return cut == std::string::npos ? "" : p.substr(0, cut + 1);
  }

  // Transpose(Flatten(Conv(x, W, b), 2), [0, 2, 1]) with stride = kernel.
  Status EmitPatchEmbedding(const NodeProto& transpose, const NodeProto& conv,
                            const std::string& t, uint32_t* id) {
    const Shape* xs = ShapeOf(conv.input(0));
    const Shape* ws = ShapeOf(conv.input(1));
    std::vector<int64_t> kernel = IntsAttribute(conv, "kernel_shape");
    std::vector<int64_t> strides = IntsAttribute(conv, "strides");
    std::vector<int64_t> pads = IntsAttribute(conv, "pads");
    std::vector<int64_t> dilations = IntsAttribute(conv, "dilations");
    if (xs == nullptr || ws == nullptr || xs->size() != 4 || ws->size() != 4) {
      return Unsupported(conv,
                         "a patch embedding needs a 4-D image and "
                         "weight");
    }
    if (kernel.empty()) kernel = {(*ws)[2], (*ws)[3]};
    const int64_t p = kernel[0];
    const bool patch =
        kernel.size() == 2 && kernel[1] == p && strides == kernel &&
        std::all_of(pads.begin(), pads.end(),
                    [](int64_t v) { return v == 0; }) &&
        std::all_of(dilations.begin(), dilations.end(),
                    [](int64_t v) { return v == 1; }) &&
        IntAttribute(conv, "group", 1) == 1 && (*xs)[2] >= p && (*xs)[3] >= p;
    if (!patch) {
      return Unsupported(conv,
                         "a convolution that is not a patch embedding "
                         "(square kernel = stride, no padding, no "
                         "dilation, one group)");
    }
    if (!IsConstant(conv.input(1))) {
      return Unsupported(conv, "the patch embedding's weight is not constant");
    }
    const int64_t b = (*xs)[0], c = (*xs)[1], o = (*ws)[0];
    const int64_t tokens = ((*xs)[2] / p) * ((*xs)[3] / p);
    ConstPtr wc;
    TILEC_RETURN_IF_ERROR(ConstantData(conv.input(1), &wc));
    // [O, C*p*p] -> [C*p*p, O]: the columns of Patchify are (c, ky, kx).
    const int64_t k = c * p * p;
    std::vector<float> w(static_cast<size_t>(k * o));
    for (int64_t r = 0; r < o; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        w[j * o + r] = static_cast<float>(wc->data[r * k + j]);
      }
    }
    fb::DType dtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
    const std::string name = NodeName(conv);
    uint32_t image;
    TILEC_RETURN_IF_ERROR(Value(conv.input(0), *xs, &image));
    fb::OperationT* op = nullptr;
    const uint32_t patches =
        NewOp(fb::OpKind::Patchify, name + ".patchify", {image},
              name + ".patches", {b * tokens, k}, dtype, &op);
    op->patch = static_cast<int32_t>(p);
    fb::DType wtype;
    TILEC_RETURN_IF_ERROR(DTypeOf(conv.input(1), &wtype));
    const uint32_t weight = NewWeight(conv.input(1), {k, o}, w, wtype);
    const bool bias = conv.input_size() > 2 && !conv.input(2).empty();
    uint32_t y = NewOp(fb::OpKind::MatMul, name, {patches, weight},
                       bias ? name + ".product" : t, {b * tokens, o}, dtype);
    if (bias) {
      uint32_t bv;
      TILEC_RETURN_IF_ERROR(RowParam(conv.input(2), o, &bv));
      y = NewOp(fb::OpKind::BiasAdd, name + ".bias", {y, bv}, t,
                {b * tokens, o}, dtype);
    }
    (void)transpose;
    *id = y;
    return Status::Ok();
  }

  const OnnxGraph& g_;
  int depth_ = 0;  // nested Emit calls (Value)
  const OnnxImportOptions& options_;
  std::vector<std::unique_ptr<fb::ValueT>> values_;
  std::vector<std::unique_ptr<fb::OperationT>> ops_;
  std::map<std::string, uint32_t> memo_;     // tensor -> value
  std::map<std::string, uint32_t> weights_;  // tensor + shape -> weight
  SidecarBuilder sidecar_;
  int32_t attention_layers_ = 0;
  int64_t batch_ = 0, tokens_ = 0, width_ = 0, heads_ = 0, mlp_width_ = 0;
};

}  // namespace

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
  TILEC_RETURN_IF_ERROR(RunWithStack(kEmitStackBytes, [&] {
    return Importer(*graph, options).Run(&result, &bytes);
  }));
  module->values = std::move(result.values);
  module->ops = std::move(result.ops);
  module->model = std::move(result.model);
  *sidecar = std::move(bytes);
  return Status::Ok();
}

}  // namespace tilec::passes
