#include "passes/onnx/onnx_graph.h"

#include <algorithm>
#include <limits>
#include <memory>

#include "formats/basics.h"
#include "passes/onnx/import_onnx.h"
#include "passes/onnx/onnx_infer.h"

namespace tilec::passes {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;
using Shape = std::vector<int64_t>;
using ConstPtr = std::shared_ptr<const OnnxConstant>;
using onnx_infer::AsInts;

// Declared types of graph inputs, outputs and value_info.
// A negative dimension is BadInput (ONNX has none; an unknown one is a
// dim_param or no value). With `batch` (graph inputs), a symbolic first
// dimension is bound to *batch and *bound set; a symbolic dimension
// elsewhere is Infeasible, named: tilec compiles one shape.
Status DeclaredType(const ::onnx::ValueInfoProto& vi,
                    const std::string& model_name, OnnxTensorInfo* info,
                    const int64_t* batch = nullptr, bool* bound = nullptr) {
  if (!vi.type().has_tensor_type()) return Status::Ok();
  const auto& tt = vi.type().tensor_type();
  info->elem_type = tt.elem_type();
  if (!tt.has_shape()) return Status::Ok();
  Shape shape;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() < 0) {
      return Status::BadInput(model_name + ": tensor '" + vi.name() +
                              "' is declared with a negative dimension " +
                              std::to_string(d.dim_value()));
    }
    if (batch != nullptr && d.has_dim_param()) {
      if (!shape.empty()) {
        return Status::Infeasible(
            model_name + ": input '" + vi.name() + "' dimension " +
            std::to_string(shape.size()) + " is symbolic ('" + d.dim_param() +
            "'); only the first (batch) dimension may be, bound by --batch");
      }
      shape.push_back(*batch);
      *bound = true;
      continue;
    }
    if (!d.has_dim_value()) return Status::Ok();
    shape.push_back(d.dim_value());
  }
  info->shape = std::move(shape);
  info->shape_known = true;
  return Status::Ok();
}

}  // namespace

const ::onnx::AttributeProto* FindAttribute(const NodeProto& node,
                                            const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t IntAttribute(const NodeProto& node, const std::string& name,
                     int64_t fallback) {
  const auto* a = FindAttribute(node, name);
  return a != nullptr ? a->i() : fallback;
}

float FloatAttribute(const NodeProto& node, const std::string& name,
                     float fallback) {
  const auto* a = FindAttribute(node, name);
  return a != nullptr ? a->f() : fallback;
}

std::vector<int64_t> IntsAttribute(const NodeProto& node,
                                   const std::string& name) {
  const auto* a = FindAttribute(node, name);
  if (a == nullptr) return {};
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

bool SliceWindow(const std::vector<int64_t>& shape, const OnnxConstant& starts,
                 const OnnxConstant& ends, const OnnxConstant* axes_in,
                 const OnnxConstant* steps_in, std::vector<int64_t>* begin,
                 std::vector<int64_t>* step, std::vector<int64_t>* out) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes, steps;
  if (axes_in != nullptr) {
    axes = AsInts(*axes_in);
  } else {
    for (int64_t i = 0; i < starts.elements(); ++i) axes.push_back(i);
  }
  if (steps_in != nullptr) {
    steps = AsInts(*steps_in);
  } else {
    steps.assign(axes.size(), 1);
  }
  if (axes.size() != static_cast<size_t>(starts.elements()) ||
      axes.size() != static_cast<size_t>(ends.elements()) ||
      steps.size() != axes.size()) {
    return false;
  }
  begin->assign(rank, 0);
  step->assign(rank, 1);
  *out = shape;
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t a = 0;
    if (!NormalizeAxis(axes[k], rank, &a) || steps[k] == 0) return false;
    const int64_t d = shape[a];
    // ONNX: INT64_MAX/MIN mean "to the end", negatives count from the end,
    // then clamped to [0, d] going forwards, [-1, d - 1] going backwards.
    auto clamp = [&](double v) {
      int64_t x = v >= 9.2e18    ? d
                  : v <= -9.2e18 ? -d - 1
                                 : static_cast<int64_t>(v);
      if (x < 0) x += d;
      if (steps[k] > 0) return std::clamp<int64_t>(x, 0, d);
      return std::clamp<int64_t>(x, -1, d - 1);
    };
    const int64_t b = clamp(starts.data[k]);
    const int64_t e = clamp(ends.data[k]);
    const int64_t n =
        steps[k] > 0 ? std::max<int64_t>(0, ir::CeilDiv(e - b, steps[k]))
                     : std::max<int64_t>(0, ir::CeilDiv(b - e, -steps[k]));
    (*begin)[a] = b;
    (*step)[a] = steps[k];
    (*out)[a] = n;
  }
  return true;
}

bool NormalizeAxis(int64_t axis, int64_t rank, int64_t* out) {
  if (axis < -rank || axis >= rank) return false;
  *out = axis < 0 ? axis + rank : axis;
  return true;
}

// Saturates at int64's largest value: a declared shape that large is refused
// by the extent checks, not overflowed here.
int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) {
    if (__builtin_mul_overflow(p, dims[i], &p)) {
      return std::numeric_limits<int64_t>::max();
    }
  }
  return p;
}

Status OnnxGraph::Build(const ::onnx::ModelProto& model,
                        const std::string& model_name,
                        const std::string& model_dir, int64_t batch,
                        std::unique_ptr<OnnxGraph>* graph) {
  std::unique_ptr<OnnxGraph> g(new OnnxGraph(model, model_name, model_dir));
  for (const auto& opset : model.opset_import()) {
    if (opset.domain().empty() || opset.domain() == "ai.onnx") {
      g->opset_ = opset.version();
    }
  }
  if (g->opset_ == 0) {
    return Status::BadInput(model_name +
                            ": the model imports no default-domain opset");
  }
  if (g->opset_ < kMinOnnxOpset || g->opset_ > kMaxOnnxOpset) {
    return Status::Infeasible(
        model_name + ": opset " + std::to_string(g->opset_) +
        " of the default domain; import-onnx reads opsets " +
        std::to_string(kMinOnnxOpset) + " to " + std::to_string(kMaxOnnxOpset) +
        " (re-export with opset_version in that range)");
  }
  const ::onnx::GraphProto& proto = model.graph();
  for (const auto& vi : proto.value_info()) g->value_info_.emplace(vi.name(), &vi);
  for (const auto& init : proto.initializer()) {
    OnnxTensorInfo info;
    info.name = init.name();
    info.initializer = &init;
    info.shape.assign(init.dims().begin(), init.dims().end());
    info.shape_known = true;
    info.elem_type = init.data_type();
    int64_t count = 0;
    TILEC_RETURN_IF_ERROR(OnnxElements(
        info.shape, model_name + ": initializer '" + init.name() + "'",
        &count));
    // What the initializer holds, not what its dims claim (a model may
    // declare huge dims without data); every element takes a byte or more.
    int64_t held = count;
    if (init.data_location() != TensorProto::EXTERNAL) {
      held = std::min<int64_t>(
          count, static_cast<int64_t>(init.raw_data().size()) +
                     init.float_data_size() + init.int32_data_size() +
                     init.int64_data_size() + init.double_data_size() +
                     init.uint64_data_size());
    }
    g->large_folds_budget_ = std::min(
        g->large_folds_budget_,
        std::numeric_limits<int64_t>::max() - held) + held;
    if (count <= kMaxFoldedElements) {
      OnnxConstant value;
      TILEC_RETURN_IF_ERROR(DecodeOnnxTensor(
          init, model_dir, model_name + ": initializer '" + init.name() + "'",
          &value));
      info.value = std::make_shared<OnnxConstant>(std::move(value));
    }
    TILEC_RETURN_IF_ERROR(g->Define(std::move(info)));
  }
  for (const auto& input : proto.input()) {
    // Before IR version 4 initializers were also listed as inputs.
    if (g->tensors_.count(input.name())) continue;
    OnnxTensorInfo info;
    info.name = input.name();
    info.graph_input = true;
    TILEC_RETURN_IF_ERROR(
        DeclaredType(input, model_name, &info, &batch, &g->batch_bound_));
    TILEC_RETURN_IF_ERROR(g->Define(std::move(info)));
  }
  for (int i = 0; i < proto.node_size(); ++i) {
    TILEC_RETURN_IF_ERROR(g->VisitNode(i));
  }
  for (const auto& output : proto.output()) {
    auto it = g->tensors_.find(output.name());
    if (it == g->tensors_.end()) {
      return Status::BadInput(model_name + ": graph output '" + output.name() +
                              "' is defined by no node, input or initializer");
    }
    ++it->second.consumers;
    if (!it->second.shape_known) {
      TILEC_RETURN_IF_ERROR(DeclaredType(output, model_name, &it->second));
    }
  }
  *graph = std::move(g);
  return Status::Ok();
}

Status OnnxGraph::Define(OnnxTensorInfo info) {
  if (tensors_.count(info.name)) {
    return Status::BadInput(model_name_ + ": tensor '" + info.name +
                            "' is defined twice");
  }
  std::string name = info.name;
  tensors_.emplace(std::move(name), std::move(info));
  return Status::Ok();
}

Status OnnxGraph::VisitNode(int index) {
  const NodeProto& node = model_.graph().node(index);
  for (const std::string& input : node.input()) {
    if (input.empty()) continue;
    auto it = tensors_.find(input);
    if (it == tensors_.end()) {
      return Status::BadInput(model_name_ + ": " + NodeLabel(index) +
                              " reads '" + input +
                              "', which no earlier node, input or "
                              "initializer defines");
    }
    ++it->second.consumers;
  }
  std::vector<OnnxTensorInfo> outputs(node.output_size());
  for (int i = 0; i < node.output_size(); ++i) {
    outputs[i].name = node.output(i);
    outputs[i].producer = index;
  }
  const bool default_domain =
      node.domain().empty() || node.domain() == "ai.onnx";
  if (default_domain) {
    TILEC_RETURN_IF_ERROR(onnx_infer::InferNode(*this, node, index, &outputs));
  }
  // Folded weights beyond the limit (cut or transposed) are kept while
  // they add up to no more than the initializers hold: a model that
  // transposes one weight a thousand times is not a thousand weights.
  for (OnnxTensorInfo& out : outputs) {
    if (out.value == nullptr || out.value->elements() <= kMaxFoldedElements) {
      continue;
    }
    if (out.value->elements() > large_folds_budget_) {
      out.value.reset();
    } else {
      large_folds_budget_ -= out.value->elements();
    }
  }
  // value_info may declare what the visitor could not infer.
  for (OnnxTensorInfo& out : outputs) {
    if (out.shape_known) continue;
    auto vi = value_info_.find(out.name);
    if (vi != value_info_.end()) {
      TILEC_RETURN_IF_ERROR(DeclaredType(*vi->second, model_name_, &out));
    }
  }
  for (OnnxTensorInfo& out : outputs) {
    if (out.name.empty()) continue;  // an omitted optional output
    TILEC_RETURN_IF_ERROR(Define(std::move(out)));
  }
  return Status::Ok();
}

const OnnxTensorInfo* OnnxGraph::Find(const std::string& name) const {
  if (name.empty()) return nullptr;
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string OnnxGraph::NodeLabel(int index) const {
  const NodeProto& node = model_.graph().node(index);
  std::string name = node.name();
  if (name.empty() && node.output_size() > 0) name = node.output(0);
  std::string domain;
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    domain = node.domain() + ".";
  }
  return "node '" + name + "' (" + domain + node.op_type() + ", opset " +
         std::to_string(opset_) + ")";
}

const NodeProto* OnnxGraph::Producer(const std::string& name) const {
  const OnnxTensorInfo* info = Find(name);
  if (info == nullptr || info->producer < 0) return nullptr;
  return &model_.graph().node(info->producer);
}

Status OnnxGraph::Constant(const std::string& name, ConstPtr* value) const {
  *value = nullptr;
  const OnnxTensorInfo* info = Find(name);
  if (info == nullptr) return Status::Ok();
  if (info->value != nullptr) {
    *value = info->value;
    return Status::Ok();
  }
  if (info->initializer == nullptr) return Status::Ok();
  OnnxConstant decoded;
  TILEC_RETURN_IF_ERROR(
      DecodeOnnxTensor(*info->initializer, model_dir_,
                       model_name_ + ": initializer '" + name + "'", &decoded));
  *value = std::make_shared<OnnxConstant>(std::move(decoded));
  return Status::Ok();
}

bool OnnxGraph::ScalarConstant(const std::string& name, double* value) const {
  ConstPtr c;
  if (!Constant(name, &c).ok() || c == nullptr || c->elements() != 1) {
    return false;
  }
  *value = c->data[0];
  return true;
}

}  // namespace tilec::passes