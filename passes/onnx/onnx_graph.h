// The first step of import-onnx (import_onnx.h): every tensor of an ONNX
// graph with its shape, element type, producer, and — where every input is
// constant — its value, computed once in file order. Shape arithmetic that
// exporters write (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) folds
// to constants here, so the importer's patterns see plain constant shapes.
//
// Folding computes in double (integers stay exact below 2^53; float results
// are rounded to the node's output type, FLOAT to float, FLOAT16 to half).
// Only tensors of at most kMaxFoldedElements elements are folded (but a
// Slice or Transpose of a constant, a weight cut or transposed, whatever
// its size, as long as all such add up to no more elements than the
// initializers); larger constants are initializers, decoded when a weight
// needs them.

#ifndef TILEC_PASSES_ONNX_ONNX_GRAPH_H_
#define TILEC_PASSES_ONNX_ONNX_GRAPH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/status.h"
#include "onnx/onnx_pb.h"
#include "passes/onnx/onnx_tensor.h"

namespace tilec::passes {

inline constexpr int64_t kMaxFoldedElements = 1 << 16;

struct OnnxTensorInfo {
  std::string name;
  bool shape_known = false;
  std::vector<int64_t> shape;
  int32_t elem_type = 0;  // onnx::TensorProto::DataType, 0 if unknown
  int producer = -1;      // node index, -1 for inputs and initializers
  bool graph_input = false;
  const ::onnx::TensorProto* initializer = nullptr;
  std::shared_ptr<const OnnxConstant> value;  // folded or small initializer
  int consumers = 0;  // node inputs and graph outputs that read it
};

class OnnxGraph {
 public:
  // Visits every node of `model.graph()`. BadInput for a graph that breaks
  // ONNX's rules (a node input that nothing defines, a tensor defined
  // twice, no default-domain opset); Infeasible for an opset outside
  // [kMinOnnxOpset, kMaxOnnxOpset] (import_onnx.h). A symbolic first
  // dimension of a graph input (a dynamic batch) is bound to `batch`; any
  // other symbolic input dimension is Infeasible, named.
  static Status Build(const ::onnx::ModelProto& model,
                      const std::string& model_name,
                      const std::string& model_dir, int64_t batch,
                      std::unique_ptr<OnnxGraph>* graph);

  const ::onnx::GraphProto& proto() const { return model_.graph(); }
  int64_t opset() const { return opset_; }
  const std::string& model_name() const { return model_name_; }
  const std::string& model_dir() const { return model_dir_; }
  // Some graph input had a symbolic first dimension, bound to Build's batch.
  bool batch_bound() const { return batch_bound_; }

  // nullptr for "" (an omitted optional input) and unknown names.
  const OnnxTensorInfo* Find(const std::string& name) const;
  const ::onnx::NodeProto& node(int index) const {
    return model_.graph().node(index);
  }
  // "node 'name' (OpType, opset 17)"; an unnamed node is named by its first
  // output.
  std::string NodeLabel(int index) const;

  // The node that produces `name`, nullptr for inputs, initializers and
  // unknown names.
  const ::onnx::NodeProto* Producer(const std::string& name) const;

  // The constant value of `name` (folded, or any initializer decoded):
  // nullptr when it is not constant. Decode errors of an initializer are
  // returned as the Status.
  Status Constant(const std::string& name,
                  std::shared_ptr<const OnnxConstant>* value) const;
  // A constant of exactly one element, as a double.
  bool ScalarConstant(const std::string& name, double* value) const;

 private:
  OnnxGraph(const ::onnx::ModelProto& model, std::string model_name,
            std::string model_dir)
      : model_(model),
        model_name_(std::move(model_name)),
        model_dir_(std::move(model_dir)) {}

  Status Define(OnnxTensorInfo info);
  Status VisitNode(int index);

  const ::onnx::ModelProto& model_;
  std::string model_name_;
  std::string model_dir_;
  int64_t opset_ = 0;
  bool batch_bound_ = false;
  // Elements that folded Slices and Transposes beyond kMaxFoldedElements
  // may still hold: the initializers' own.
  int64_t large_folds_budget_ = 0;
  std::map<std::string, OnnxTensorInfo> tensors_;
  // value_info by name (a name declared twice keeps its first entry):
  // looked up for every node output, where a scan made import quadratic.
  std::map<std::string, const ::onnx::ValueInfoProto*> value_info_;
};

// An attribute of `node`, nullptr if absent.
const ::onnx::AttributeProto* FindAttribute(const ::onnx::NodeProto& node,
                                            const std::string& name);
int64_t IntAttribute(const ::onnx::NodeProto& node, const std::string& name,
                     int64_t fallback);
float FloatAttribute(const ::onnx::NodeProto& node, const std::string& name,
                     float fallback);
std::vector<int64_t> IntsAttribute(const ::onnx::NodeProto& node,
                                   const std::string& name);

// An axis in [-rank, rank) made non-negative; false when out of range.
bool NormalizeAxis(int64_t axis, int64_t rank, int64_t* out);

// Slice's window over an input of `shape` (ONNX's rules: negative indices
// from the end, clamping, INT64_MAX as "to the end"; absent axes and steps
// as ONNX defaults them): per axis the first index, the step and the
// count (`out`, the output shape). False when the inputs disagree.
bool SliceWindow(const std::vector<int64_t>& shape, const OnnxConstant& starts,
                 const OnnxConstant& ends, const OnnxConstant* axes,
                 const OnnxConstant* steps, std::vector<int64_t>* begin,
                 std::vector<int64_t>* step, std::vector<int64_t>* out);

// Product of dims[begin, end).
int64_t Product(const std::vector<int64_t>& dims, size_t begin, size_t end);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_ONNX_ONNX_GRAPH_H_
