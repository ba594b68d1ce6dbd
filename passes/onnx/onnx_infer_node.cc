// Shape inference and constant folding of one ONNX node (onnx_infer.h):
// for each operator import-onnx knows, its outputs' shapes and types from
// its inputs', and their values when every input is constant.

#include "passes/onnx/onnx_infer.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "formats/op_shapes.h"

namespace tilec::passes::onnx_infer {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ConstPtr = std::shared_ptr<const OnnxConstant>;

// One node's outputs: shapes, types and (when folded) values.
struct NodeResult {
  std::vector<OnnxTensorInfo> outputs;
};

class NodeVisitor {
 public:
  NodeVisitor(const OnnxGraph& graph, const NodeProto& node, int index)
      : graph_(graph), node_(node), index_(index), op_(node.op_type()) {}

  // Fills out the outputs' infos; unknown shapes stay unknown. BadInput
  // when the node breaks its operator's rules (Invalid).
  Status Run(std::vector<OnnxTensorInfo>* outputs) {
    outputs_ = outputs;
    const int required = RequiredInputs();
    for (int i = 0; i < required; ++i) {
      if (In(i) == nullptr) {
        return Status::BadInput(graph_.model_name() + ": " +
                                graph_.NodeLabel(index_) + ": needs " +
                                std::to_string(required) + " inputs");
      }
    }
    for (const OnnxTensorInfo* in : Inputs()) {
      if (in != nullptr && in->shape_known) continue;
      if (in == nullptr) continue;    // omitted optional input
      if (op_ != "Constant") return Status::Ok();  // unknown downstream
    }
    Infer();
    return invalid_;
  }

 private:
  // The node breaks a rule of its operator's ONNX spec (an axis or index
  // out of range, a zero step, operands that do not fit): the model is
  // invalid, not merely beyond tilec. The first problem is reported.
  void Invalid(const std::string& why) {
    if (!invalid_.ok()) return;
    invalid_ = Status::BadInput(graph_.model_name() + ": " +
                                graph_.NodeLabel(index_) + ": " + why);
  }
  // The inputs Infer reads without checking (a MatMul of one input would
  // read a missing second).
  int RequiredInputs() const {
    if (op_ == "Constant") return 0;
    if (op_ == "Range" || op_ == "Where") return 3;
    if (op_ == "MatMul" || op_ == "Gemm" || op_ == "Gather" ||
        op_ == "Reshape" || op_ == "Expand" || op_ == "Tile" ||
        op_ == "Conv" ||
        (IsBinary(op_) && op_ != "Max" && op_ != "Min")) {  // variadic
      return 2;
    }
    return 1;
  }
  // NormalizeAxis; an axis out of range is Invalid.
  bool Axis(int64_t axis, int64_t rank, int64_t* out) {
    if (NormalizeAxis(axis, rank, out)) return true;
    Invalid("axis " + std::to_string(axis) + " is out of range for rank " +
            std::to_string(rank));
    return false;
  }

  std::vector<const OnnxTensorInfo*> Inputs() const {
    std::vector<const OnnxTensorInfo*> in;
    for (const std::string& name : node_.input())
      in.push_back(graph_.Find(name));
    return in;
  }
  const OnnxTensorInfo* In(int i) const {
    return i < node_.input_size() ? graph_.Find(node_.input(i)) : nullptr;
  }
  ConstPtr ConstIn(int i) const {
    if (i >= node_.input_size()) return nullptr;
    ConstPtr value;
    if (!graph_.Constant(node_.input(i), &value).ok()) return nullptr;
    return value;
  }
  bool AllConstant() const {
    for (int i = 0; i < node_.input_size(); ++i) {
      if (node_.input(i).empty()) continue;
      if (ConstIn(i) == nullptr) return false;
    }
    return true;
  }

  void SetShape(int i, Shape shape, int32_t type) {
    if (i >= static_cast<int>(outputs_->size())) return;
    (*outputs_)[i].shape_known = true;
    (*outputs_)[i].shape = std::move(shape);
    (*outputs_)[i].elem_type = type;
  }
  void SetValue(int i, OnnxConstant value) {
    // A weight cut or transposed (nn.MultiheadAttention's in_proj_weight,
    // sliced with bounds a dynamic batch keeps the exporter from folding)
    // is kept whatever its size: it is no larger than what it reads.
    const bool rearranged_weight = op_ == "Slice" || op_ == "Transpose";
    if (value.elements() > kMaxFoldedElements && !rearranged_weight) {
      SetShape(i, value.shape, value.elem_type);
      return;
    }
    SetShape(i, value.shape, value.elem_type);
    (*outputs_)[i].value = std::make_shared<OnnxConstant>(std::move(value));
  }

  void Infer() {
    if (op_ == "Constant") return InferConstant();
    if (op_ == "Shape") return InferShapeOp();
    if (op_ == "Size") {
      OnnxConstant c;
      c.elem_type = TensorProto::INT64;
      c.data = {
          static_cast<double>(Product(In(0)->shape, 0, In(0)->shape.size()))};
      return SetValue(0, std::move(c));
    }
    if (op_ == "Cast") return InferCast();
    if (IsShapePreserving(op_)) return InferUnary();
    if (IsBinary(op_)) return InferElementwise();
    if (op_ == "Where") return InferElementwise();
    if (op_ == "Reshape") return InferReshape();
    if (op_ == "Flatten") return InferFlatten();
    if (op_ == "Unsqueeze" || op_ == "Squeeze") return InferSqueeze();
    if (op_ == "Transpose") return InferTranspose();
    if (op_ == "Concat") return InferConcat();
    if (op_ == "Gather") return InferGather();
    if (op_ == "Slice") return InferSlice();
    if (op_ == "ConstantOfShape") return InferConstantOfShape();
    if (op_ == "Range") return InferRange();
    if (op_ == "Expand") return InferExpand();
    if (op_ == "Tile") return InferTile();
    if (op_ == "MatMul") return InferMatMul();
    if (op_ == "Gemm") return InferGemm();
    if (op_ == "LayerNormalization") return InferLayerNorm();
    if (op_ == "ReduceMean" || op_ == "ReduceMax" || op_ == "ReduceSum" ||
        op_ == "ReduceMin" || op_ == "ReduceProd") {
      return InferReduce();
    }
    if (op_ == "Conv") return InferConv();
  }

  void InferConstant() {
    OnnxConstant c;
    if (const auto* a = FindAttribute(node_, "value")) {
      if (!DecodeOnnxTensor(a->t(), graph_.model_dir(), graph_.NodeLabel(0), &c)
               .ok()) {
        return;
      }
    } else if (const auto* a = FindAttribute(node_, "value_float")) {
      c.elem_type = TensorProto::FLOAT;
      c.data = {a->f()};
    } else if (const auto* a = FindAttribute(node_, "value_floats")) {
      c.elem_type = TensorProto::FLOAT;
      c.shape = {a->floats_size()};
      c.data.assign(a->floats().begin(), a->floats().end());
    } else if (const auto* a = FindAttribute(node_, "value_int")) {
      c.elem_type = TensorProto::INT64;
      c.data = {static_cast<double>(a->i())};
    } else if (const auto* a = FindAttribute(node_, "value_ints")) {
      c.elem_type = TensorProto::INT64;
      c.shape = {a->ints_size()};
      for (int64_t v : a->ints()) c.data.push_back(static_cast<double>(v));
    } else {
      return;
    }
    SetValue(0, std::move(c));
  }

  void InferShapeOp() {
    const Shape& s = In(0)->shape;
    const int64_t rank = static_cast<int64_t>(s.size());
    int64_t start = IntAttribute(node_, "start", 0);
    int64_t end = IntAttribute(node_, "end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    OnnxConstant c;
    c.elem_type = TensorProto::INT64;
    c.shape = {end - start};
    for (int64_t i = start; i < end; ++i) c.data.push_back(s[i]);
    SetValue(0, std::move(c));
  }

  void InferCast() {
    const int32_t to = static_cast<int32_t>(IntAttribute(node_, "to", 0));
    if (ConstPtr c = ConstIn(0)) {
      OnnxConstant out = *c;
      out.elem_type = to;
      for (double& v : out.data) v = RoundTo(to, v);
      return SetValue(0, std::move(out));
    }
    SetShape(0, In(0)->shape, to);
  }

  void InferUnary() {
    if (ConstPtr c = ConstIn(0); c != nullptr && op_ != "Softmax" &&
                                 op_ != "Dropout" && op_ != "LogSoftmax") {
      OnnxConstant out = *c;
      for (double& v : out.data) {
        std::optional<double> r = Unary(op_, v);
        if (!r) return SetShape(0, c->shape, c->elem_type);
        v = RoundTo(out.elem_type, *r);
      }
      return SetValue(0, std::move(out));
    }
    SetShape(0, In(0)->shape, In(0)->elem_type);
  }

  void InferElementwise() {
    std::vector<const Shape*> shapes;
    for (int i = 0; i < node_.input_size(); ++i) {
      const OnnxTensorInfo* in = In(i);
      if (in == nullptr) return;
      shapes.push_back(&in->shape);
    }
    std::optional<Shape> out = Broadcast(shapes);
    if (!out) return;
    const bool where = op_ == "Where";
    const int32_t type = IsComparison(op_) ? TensorProto::BOOL
                         : where           ? In(1)->elem_type
                                           : In(0)->elem_type;
    if (!AllConstant()) return SetShape(0, *out, type);
    int64_t count = Product(*out, 0, out->size());
    if (count > kMaxFoldedElements) return SetShape(0, *out, type);
    std::vector<ConstPtr> in;
    for (int i = 0; i < node_.input_size(); ++i) in.push_back(ConstIn(i));
    OnnxConstant c;
    c.shape = *out;
    c.elem_type = type;
    c.data.resize(count);
    for (int64_t i = 0; i < count; ++i) {
      auto at = [&](int k) {
        return in[k]->data[BroadcastIndex(in[k]->shape, *out, i)];
      };
      if (where) {
        c.data[i] = at(0) != 0 ? at(1) : at(2);
        continue;
      }
      std::optional<double> r = Binary(op_, at(0), at(1), In(0)->elem_type);
      if (!r) return SetShape(0, *out, type);
      c.data[i] = RoundTo(type, *r);
    }
    SetValue(0, std::move(c));
  }

  // The shape a Reshape produces: 0 copies the input's dimension (unless
  // allowzero), one -1 is inferred.
  std::optional<Shape> ReshapeTarget(const Shape& in, const Shape& spec) {
    const bool allowzero = IntAttribute(node_, "allowzero", 0) != 0;
    Shape out = spec;
    int infer = -1;
    int64_t known = 1;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] == 0 && !allowzero) {
        if (i >= in.size()) return std::nullopt;
        out[i] = in[i];
      }
      if (out[i] == -1) {
        if (infer >= 0) return std::nullopt;
        infer = static_cast<int>(i);
        continue;
      }
      if (out[i] < 0) return std::nullopt;
      // A target whose product overflows names no tensor of this input.
      if (__builtin_mul_overflow(known, out[i], &known)) return std::nullopt;
    }
    const int64_t total = Product(in, 0, in.size());
    if (infer >= 0) {
      if (known == 0 || total % known != 0) return std::nullopt;
      out[infer] = total / known;
    } else if (known != total) {
      return std::nullopt;
    }
    return out;
  }

  void SetReshaped(const Shape& out) {
    if (ConstPtr c = ConstIn(0)) {
      OnnxConstant r = *c;
      r.shape = out;
      return SetValue(0, std::move(r));
    }
    SetShape(0, out, In(0)->elem_type);
  }

  void InferReshape() {
    ConstPtr spec = ConstIn(1);
    if (spec == nullptr) return;
    std::optional<Shape> out = ReshapeTarget(In(0)->shape, AsInts(*spec));
    if (out) SetReshaped(*out);
  }

  void InferFlatten() {
    const Shape& s = In(0)->shape;
    // Flatten's axis is in [-rank, rank], a negative one counted from rank.
    const int64_t rank = static_cast<int64_t>(s.size());
    int64_t axis = IntAttribute(node_, "axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return;
    SetReshaped({Product(s, 0, axis), Product(s, axis, s.size())});
  }

  void InferSqueeze() {
    const Shape& s = In(0)->shape;
    std::vector<int64_t> axes;
    if (node_.input_size() > 1 && !node_.input(1).empty()) {
      ConstPtr a = ConstIn(1);
      if (a == nullptr) return;
      axes = AsInts(*a);
    } else {
      axes = IntsAttribute(node_, "axes");  // before opset 13
    }
    Shape out;
    if (op_ == "Squeeze") {
      const int64_t rank = static_cast<int64_t>(s.size());
      std::vector<bool> drop(rank, axes.empty());
      for (int64_t a : axes) {
        int64_t n = 0;
        if (!Axis(a, rank, &n)) return;
        if (s[n] != 1) {
          return Invalid("squeezes axis " + std::to_string(a) + " of extent " +
                         std::to_string(s[n]) + ", not 1");
        }
        drop[n] = true;
      }
      for (int64_t i = 0; i < rank; ++i) {
        if (!(drop[i] && s[i] == 1)) out.push_back(s[i]);
      }
    } else {
      const int64_t rank = static_cast<int64_t>(s.size() + axes.size());
      std::vector<bool> inserted(rank, false);
      for (int64_t a : axes) {
        int64_t n = 0;
        if (!Axis(a, rank, &n)) return;
        if (inserted[n]) return Invalid("axis " + std::to_string(a) + " twice");
        inserted[n] = true;
      }
      size_t next = 0;
      for (int64_t i = 0; i < rank; ++i) {
        out.push_back(inserted[i] ? 1 : s[next++]);
      }
    }
    SetReshaped(out);
  }

  void InferTranspose() {
    const Shape& s = In(0)->shape;
    std::vector<int64_t> perm = IntsAttribute(node_, "perm");
    if (perm.empty()) {
      for (size_t i = s.size(); i-- > 0;)
        perm.push_back(static_cast<int64_t>(i));
    }
    if (perm.size() != s.size()) return;
    Shape out;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(s.size())) return;
      out.push_back(s[p]);
    }
    ConstPtr c = ConstIn(0);
    if (c == nullptr) return SetShape(0, out, In(0)->elem_type);
    OnnxConstant t;
    t.shape = out;
    t.elem_type = c->elem_type;
    t.data.resize(c->data.size());
    const size_t rank = s.size();
    std::vector<int64_t> in_strides(rank, 1);
    for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * s[i];
    for (int64_t flat = 0; flat < c->elements(); ++flat) {
      int64_t rest = flat, src = 0;
      for (size_t i = rank; i-- > 0;) {
        src += (rest % out[i]) * in_strides[perm[i]];
        rest /= out[i];
      }
      t.data[flat] = c->data[src];
    }
    SetValue(0, std::move(t));
  }

  void InferConcat() {
    const OnnxTensorInfo* first = In(0);
    const int64_t rank = static_cast<int64_t>(first->shape.size());
    int64_t axis = 0;
    if (!Axis(IntAttribute(node_, "axis", 0), rank, &axis)) return;
    Shape out = first->shape;
    out[axis] = 0;
    for (int i = 0; i < node_.input_size(); ++i) {
      const Shape& s = In(i)->shape;
      if (static_cast<int64_t>(s.size()) != rank) return;
      out[axis] += s[axis];
    }
    if (!AllConstant()) return SetShape(0, out, first->elem_type);
    // Row-major: the blocks below `axis` interleave.
    const int64_t outer = Product(out, 0, axis);
    OnnxConstant c;
    c.shape = out;
    c.elem_type = first->elem_type;
    for (int64_t o = 0; o < outer; ++o) {
      for (int i = 0; i < node_.input_size(); ++i) {
        ConstPtr in = ConstIn(i);
        const int64_t block = Product(in->shape, axis, in->shape.size());
        c.data.insert(c.data.end(), in->data.begin() + o * block,
                      in->data.begin() + (o + 1) * block);
      }
    }
    SetValue(0, std::move(c));
  }

  void InferGather() {
    const Shape& data = In(0)->shape;
    const OnnxTensorInfo* indices = In(1);
    int64_t axis = 0;
    if (!Axis(IntAttribute(node_, "axis", 0),
              static_cast<int64_t>(data.size()), &axis)) {
      return;
    }
    Shape out(data.begin(), data.begin() + axis);
    out.insert(out.end(), indices->shape.begin(), indices->shape.end());
    out.insert(out.end(), data.begin() + axis + 1, data.end());
    ConstPtr d = ConstIn(0), idx = ConstIn(1);
    if (d == nullptr || idx == nullptr) {
      return SetShape(0, out, In(0)->elem_type);
    }
    const int64_t outer = Product(data, 0, axis);
    const int64_t inner = Product(data, axis + 1, data.size());
    OnnxConstant c;
    c.shape = out;
    c.elem_type = d->elem_type;
    for (int64_t o = 0; o < outer; ++o) {
      for (double i : idx->data) {
        int64_t k = static_cast<int64_t>(i);
        if (k < 0) k += data[axis];
        if (k < 0 || k >= data[axis]) {
          return Invalid("index " + std::to_string(static_cast<int64_t>(i)) +
                         " is out of range for axis " + std::to_string(axis) +
                         " of extent " + std::to_string(data[axis]));
        }
        const int64_t base = (o * data[axis] + k) * inner;
        c.data.insert(c.data.end(), d->data.begin() + base,
                      d->data.begin() + base + inner);
      }
    }
    SetValue(0, std::move(c));
  }

  void InferSlice() {
    const Shape& s = In(0)->shape;
    ConstPtr starts = ConstIn(1), ends = ConstIn(2);
    if (starts == nullptr || ends == nullptr) return;
    const int64_t rank = static_cast<int64_t>(s.size());
    std::vector<int64_t> begin, step;
    Shape out;
    if (!SliceWindow(s, *starts, *ends, ConstIn(3).get(), ConstIn(4).get(),
                     &begin, &step, &out)) {
      return;
    }
    ConstPtr c = ConstIn(0);
    if (c == nullptr) return SetShape(0, out, In(0)->elem_type);
    OnnxConstant r;
    r.shape = out;
    r.elem_type = c->elem_type;
    const int64_t count = Product(out, 0, out.size());
    for (int64_t flat = 0; flat < count; ++flat) {
      int64_t rest = flat, src = 0, stride = 1;
      for (int64_t i = rank; i-- > 0;) {
        const int64_t coord = begin[i] + (rest % out[i]) * step[i];
        rest /= out[i];
        src += coord * stride;
        stride *= s[i];
      }
      r.data.push_back(c->data[src]);
    }
    SetValue(0, std::move(r));
  }

  void InferConstantOfShape() {
    ConstPtr shape = ConstIn(0);
    if (shape == nullptr) return;
    OnnxConstant c;
    c.shape = AsInts(*shape);
    c.elem_type = TensorProto::FLOAT;
    double fill = 0;
    if (const auto* a = FindAttribute(node_, "value")) {
      OnnxConstant v;
      if (!DecodeOnnxTensor(a->t(), graph_.model_dir(), "value", &v).ok() ||
          v.elements() != 1) {
        return;
      }
      c.elem_type = v.elem_type;
      fill = v.data[0];
    }
    int64_t count = 0;
    if (!OnnxElements(c.shape, "ConstantOfShape", &count).ok()) return;
    if (count > kMaxFoldedElements) return SetShape(0, c.shape, c.elem_type);
    c.data.assign(count, fill);
    SetValue(0, std::move(c));
  }

  void InferRange() {
    ConstPtr start = ConstIn(0), limit = ConstIn(1), delta = ConstIn(2);
    if (!start || !limit || !delta || !start->scalar() || !limit->scalar() ||
        !delta->scalar()) {
      return;
    }
    if (delta->data[0] == 0) return Invalid("Range with a step (delta) of 0");
    const double n =
        std::ceil((limit->data[0] - start->data[0]) / delta->data[0]);
    OnnxConstant c;
    c.elem_type = start->elem_type;
    const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(n));
    if (count > kMaxFoldedElements) return;
    c.shape = {count};
    for (int64_t i = 0; i < count; ++i) {
      c.data.push_back(start->data[0] + i * delta->data[0]);
    }
    SetValue(0, std::move(c));
  }

  void InferExpand() {
    ConstPtr shape = ConstIn(1);
    if (shape == nullptr) return;
    const Shape target = AsInts(*shape);
    std::optional<Shape> out = Broadcast({&In(0)->shape, &target});
    if (!out) return;
    ConstPtr c = ConstIn(0);
    const int64_t count = Product(*out, 0, out->size());
    if (c == nullptr || count > kMaxFoldedElements) {
      return SetShape(0, *out, In(0)->elem_type);
    }
    OnnxConstant r;
    r.shape = *out;
    r.elem_type = c->elem_type;
    for (int64_t i = 0; i < count; ++i) {
      r.data.push_back(c->data[BroadcastIndex(c->shape, *out, i)]);
    }
    SetValue(0, std::move(r));
  }

  // Tile repeats the whole input along each axis (torch's Tensor.repeat,
  // as a MAP head's probe is repeated per image).
  void InferTile() {
    ConstPtr repeats = ConstIn(1);
    const Shape& s = In(0)->shape;
    if (repeats == nullptr) return;
    const Shape r = AsInts(*repeats);
    if (r.size() != s.size()) {
      return Invalid("repeats of " + std::to_string(r.size()) +
                     " elements for a rank-" + std::to_string(s.size()) +
                     " input");
    }
    Shape out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (r[i] < 0) return Invalid("a negative repeat");
      out.push_back(s[i] * r[i]);
    }
    ConstPtr c = ConstIn(0);
    const int64_t count = Product(out, 0, out.size());
    if (c == nullptr || count > kMaxFoldedElements) {
      return SetShape(0, out, In(0)->elem_type);
    }
    OnnxConstant t;
    t.shape = out;
    t.elem_type = c->elem_type;
    for (int64_t flat = 0; flat < count; ++flat) {
      int64_t rest = flat, src = 0, stride = 1;
      for (size_t i = out.size(); i-- > 0;) {
        src += (rest % out[i]) % s[i] * stride;
        rest /= out[i];
        stride *= s[i];
      }
      t.data.push_back(c->data[src]);
    }
    SetValue(0, std::move(t));
  }

  void InferMatMul() {
    Shape a = In(0)->shape, b = In(1)->shape;
    if (a.empty() || b.empty()) return;
    const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
    if (a_vector) a.insert(a.begin(), 1);
    if (b_vector) b.push_back(1);
    if (In(0)->elem_type != In(1)->elem_type) {
      return Invalid("operands of different types, " +
                     OnnxTypeName(In(0)->elem_type) + " and " +
                     OnnxTypeName(In(1)->elem_type));
    }
    if (a.back() != b[b.size() - 2]) {
      return Invalid("inner dimensions differ: " + ir::ShapeToString(In(0)->shape) +
                     " times " + ir::ShapeToString(In(1)->shape));
    }
    Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    std::optional<Shape> batch = Broadcast({&a_batch, &b_batch});
    if (!batch) return;
    Shape out = *batch;
    if (!a_vector) out.push_back(a[a.size() - 2]);
    if (!b_vector) out.push_back(b.back());
    SetShape(0, out, In(0)->elem_type);
  }

  void InferGemm() {
    const Shape& a = In(0)->shape;
    const Shape& b = In(1)->shape;
    if (a.size() != 2 || b.size() != 2) {
      return Invalid("Gemm of " + ir::ShapeToString(a) + " and " +
                     ir::ShapeToString(b) + ": its operands are matrices");
    }
    const bool ta = IntAttribute(node_, "transA", 0) != 0;
    const bool tb = IntAttribute(node_, "transB", 0) != 0;
    if ((ta ? a[0] : a[1]) != (tb ? b[1] : b[0])) {
      return Invalid("inner dimensions differ: " + ir::ShapeToString(a) +
                     (ta ? "^T" : "") + " times " + ir::ShapeToString(b) +
                     (tb ? "^T" : ""));
    }
    SetShape(0, {ta ? a[1] : a[0], tb ? b[0] : b[1]}, In(0)->elem_type);
  }

  void InferLayerNorm() {
    const Shape& x = In(0)->shape;
    int64_t axis = 0;
    if (!Axis(IntAttribute(node_, "axis", -1), static_cast<int64_t>(x.size()),
              &axis)) {
      return;
    }
    SetShape(0, x, In(0)->elem_type);
    Shape stats(x.begin(), x.begin() + axis);
    stats.resize(x.size(), 1);
    const int32_t stash = static_cast<int32_t>(
        IntAttribute(node_, "stash_type", TensorProto::FLOAT));
    SetShape(1, stats, stash);
    SetShape(2, stats, stash);
  }

  void InferReduce() {
    const Shape& x = In(0)->shape;
    const int64_t rank = static_cast<int64_t>(x.size());
    std::vector<int64_t> axes = IntsAttribute(node_, "axes");
    if (node_.input_size() > 1 && !node_.input(1).empty()) {
      ConstPtr a = ConstIn(1);
      if (a == nullptr) return;
      axes = AsInts(*a);
    }
    const bool keep = IntAttribute(node_, "keepdims", 1) != 0;
    std::vector<bool> reduced(rank, axes.empty());
    if (axes.empty() && IntAttribute(node_, "noop_with_empty_axes", 0) != 0) {
      reduced.assign(rank, false);
    }
    for (int64_t a : axes) {
      int64_t n = 0;
      if (!Axis(a, rank, &n)) return;
      reduced[n] = true;
    }
    Shape out;
    for (int64_t i = 0; i < rank; ++i) {
      if (!reduced[i]) {
        out.push_back(x[i]);
      } else if (keep) {
        out.push_back(1);
      }
    }
    SetShape(0, out, In(0)->elem_type);
  }

  void InferConv() {
    const Shape& x = In(0)->shape;
    const Shape& w = In(1)->shape;
    if (x.size() != 4 || w.size() != 4) return;
    std::vector<int64_t> strides = IntsAttribute(node_, "strides");
    std::vector<int64_t> pads = IntsAttribute(node_, "pads");
    std::vector<int64_t> dilations = IntsAttribute(node_, "dilations");
    strides.resize(2, 1);
    pads.resize(4, 0);
    dilations.resize(2, 1);
    Shape out = {x[0], w[0]};
    for (int i = 0; i < 2; ++i) {
      const int64_t span = dilations[i] * (w[2 + i] - 1) + 1;
      const int64_t padded = x[2 + i] + pads[i] + pads[i + 2];
      if (strides[i] <= 0 || padded < span) return;
      out.push_back((padded - span) / strides[i] + 1);
    }
    SetShape(0, out, In(0)->elem_type);
  }

  const OnnxGraph& graph_;
  const NodeProto& node_;
  const int index_;
  const std::string& op_;
  std::vector<OnnxTensorInfo>* outputs_ = nullptr;
  Status invalid_;
};

}  // namespace

Status InferNode(const OnnxGraph& graph, const NodeProto& node, int index,
                 std::vector<OnnxTensorInfo>* outputs) {
  return NodeVisitor(graph, node, index).Run(outputs);
}

}  // namespace tilec::passes::onnx_infer
