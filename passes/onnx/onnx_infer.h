// Shape inference and constant folding of one ONNX node, as OnnxGraph
// (onnx_graph.h) visits it: the rules of each operator (onnx_infer_node.cc)
// and the arithmetic folding computes in (onnx_fold.cc). Private to
// passes/onnx.

#ifndef TILEC_PASSES_ONNX_ONNX_INFER_H_
#define TILEC_PASSES_ONNX_ONNX_INFER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/status.h"
#include "onnx/onnx_pb.h"
#include "passes/onnx/onnx_graph.h"
#include "passes/onnx/onnx_tensor.h"

namespace tilec::passes::onnx_infer {

using Shape = std::vector<int64_t>;

// onnx_infer_node.cc: the infos of node `index`'s outputs (shapes, types,
// folded values), as NodeVisitor::Run there describes.
Status InferNode(const OnnxGraph& graph, const ::onnx::NodeProto& node,
                 int index, std::vector<OnnxTensorInfo>* outputs);

// onnx_fold.cc
double RoundTo(int32_t type, double v);
std::optional<Shape> Broadcast(const std::vector<const Shape*>& shapes);
int64_t BroadcastIndex(const Shape& shape, const Shape& out, int64_t flat);
std::optional<double> Binary(const std::string& op, double a, double b,
                             int32_t type);
std::optional<double> Unary(const std::string& op, double x);
bool IsBinary(const std::string& op);
bool IsComparison(const std::string& op);
bool IsShapePreserving(const std::string& op);
std::vector<int64_t> AsInts(const OnnxConstant& c);

}  // namespace tilec::passes::onnx_infer

#endif  // TILEC_PASSES_ONNX_ONNX_INFER_H_
