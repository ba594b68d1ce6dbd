// The importer behind ImportOnnx (import_onnx.h) as its pattern families
// share it: the Importer class, its state (the values and ops built, the
// memo of tensors already emitted, the sidecar) and what its matches
// return. Private to passes/onnx: included only by import_onnx.cc (the
// driver: graph walk, values, dispatch) and the import_*.cc pattern
// families that define the rest of Importer's members.

#ifndef TILEC_PASSES_ONNX_IMPORTER_H_
#define TILEC_PASSES_ONNX_IMPORTER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/op_shapes.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "onnx/onnx_pb.h"
#include "passes/import/sidecar.h"
#include "passes/onnx/import_onnx.h"
#include "passes/onnx/onnx_graph.h"
#include "passes/onnx/onnx_tensor.h"

namespace tilec::passes::onnx_import {

using ::onnx::NodeProto;
using ::onnx::TensorProto;
using Shape = std::vector<int64_t>;
using ConstPtr = std::shared_ptr<const OnnxConstant>;

// Defined in import_onnx.cc.
int64_t Elements(const Shape& s);
Shape View2D(const Shape& s);
Shape StripOnes(const Shape& s);
bool Near(double a, double b, double rel = 1e-4);
bool IsView(const std::string& op);

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

// Polynomial in one tensor: degree -> coefficient.
using Poly = std::map<int, double>;

// Result rows [at, at + count) are rows [first, first + count) of operand
// number `operand` (fb::RowCopy).
using Segment = ir::RowSegment;

// Where an axis of a [..., D] tensor moves whole rows: any axis but the
// last. `outer` is the product of the dims before it, `inner` the rows
// one index of it spans (the product of the dims between it and D).
struct RowAxis {
  int64_t axis = 0, outer = 1, inner = 1;
};

// k or v: columns [first, first + count) of a projection of the tokens,
// viewed [T, B*H, D] and transposed by `perm`.
struct KeyValuePart {
  LinearMatch linear;
  int64_t first = 0, count = 0;
};

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

class Importer {
 public:
  Importer(const OnnxGraph& graph, const OnnxImportOptions& options)
      : g_(graph), options_(options), sidecar_(options.sidecar_path) {}

  Status Run(fb::ModuleT* module, std::string* sidecar);

 private:
  // import_onnx.cc: errors, dtypes, building values, the graph walk,
  // values of tensors and the dispatch to the patterns.
  Status Unsupported(const NodeProto& node, const std::string& why) const;
  std::string Label(const NodeProto& node) const;
  Status Unknown(std::string tensor, const std::string& what) const;
  Status CheckExtents(const std::string& tensor, const Shape& shape,
                      const NodeProto* node) const;
  Status MapType(int32_t elem_type, const std::string& tensor,
                 fb::DType* dtype) const;
  Status TypeOf(const std::string& tensor, fb::DType* dtype) const;
  uint32_t NewValue(const std::string& name, Shape shape, fb::DType dtype,
                    fb::ValueRole role);
  uint32_t NewOp(fb::OpKind kind, const std::string& name,
                 std::vector<uint32_t> operands, const std::string& result,
                 Shape shape, fb::DType dtype,
                 fb::OperationT** op_out = nullptr);
  uint32_t NewWeight(const std::string& name, Shape shape,
                     const std::vector<float>& data, fb::DType dtype);
  Status ConstantData(const std::string& tensor, ConstPtr* c) const;
  static std::vector<float> ToFloats(const OnnxConstant& c);
  bool IsConstant(const std::string& tensor) const;
  Status ConstantWeight(const std::string& tensor, const Shape& shape,
                        uint32_t* id);
  const NodeProto* Node(const std::string& tensor) const;
  const Shape* ShapeOf(const std::string& tensor) const;
  bool IsFloatCast(const NodeProto& n) const;
  std::string PeelCasts(std::string t) const;
  bool KeepsRowOrder(const NodeProto& n) const;
  std::string PeelViews(std::string t) const;
  bool Same(const std::string& a, const std::string& b) const;
  const NodeProto* NodeIs(const std::string& t, const char* op) const;
  bool Scalar(const std::string& t, double* v) const;
  bool IsRowParam(const std::string& t, const Shape& trailing) const;
  Status Value(const std::string& tensor, const Shape& want, uint32_t* id,
               bool exact = true);
  Status CheckView(const std::string& t, uint32_t id, const Shape& want);
  Status Emit(const NodeProto& node, const std::string& t, const Shape& want,
              uint32_t* id);
  std::string NodeName(const NodeProto& node) const;
  Status DTypeOf(const std::string& t, fb::DType* dtype) const;
  Status RowParam(const std::string& t, int64_t width, uint32_t* id);

  // import_norm_gelu_softmax.cc
  bool MatchVariance(const std::string& var, const std::string& x,
                     const std::vector<int64_t>& axes) const;
  std::vector<int64_t> ReduceAxes(const NodeProto& n) const;
  bool MatchDeviation(const std::string& d, std::string* x,
                      std::vector<int64_t>* axes) const;
  bool MatchNormalized(const std::string& t, LayerNormMatch* m) const;
  Shape Trailing(const LayerNormMatch& m) const;
  bool MatchScaled(const std::string& t, LayerNormMatch* m) const;
  Shape TrailingDims(const LayerNormMatch& m) const;
  bool MatchLayerNorm(const std::string& t, LayerNormMatch* m) const;
  Status EmitLayerNorm(const NodeProto& node, const std::string& t,
                       const LayerNormMatch& m, uint32_t* id);
  bool MatchPoly(const std::string& t, const std::string& x, Poly* p,
                 int depth = 0) const;
  static Poly Multiply(const Poly& a, const Poly& b);
  static bool PolyIs(const Poly& p, const Poly& expected);
  void Factors(const std::string& t, double* c,
               std::vector<std::string>* rest) const;
  bool MatchGelu(const std::string& t, fb::GeluForm* form,
                 std::string* x) const;
  Status EmitGelu(const NodeProto& node, const std::string& t,
                  const std::string& x, fb::GeluForm form, uint32_t* id);
  static bool IsLastAxis(const std::vector<int64_t>& axes, size_t rank);
  std::vector<int64_t> AxesOf(const NodeProto& n) const;
  bool MatchSoftmaxExpanded(const NodeProto& div, std::string* x) const;
  Status EmitSoftmaxOf(const NodeProto& node, const std::string& t,
                       const std::string& x, uint32_t* id);
  Status EmitSoftmax(const NodeProto& node, const std::string& t, uint32_t* id);

  // import_gemm_elementwise.cc
  Status EmitAdd(const NodeProto& node, const std::string& t, const Shape& want,
                 uint32_t* id);
  Status EmitScale(const NodeProto& node, const std::string& t,
                   const Shape& want, uint32_t* id);
  Status EmitElementwise(const NodeProto& node, const std::string& t,
                         const Shape& want, uint32_t* id);
  Status EmitScaleOf(const std::string& name, const std::string& x,
                     const std::string& t, const Shape& want, double factor,
                     uint32_t* id);
  Status EmitCast(const NodeProto& node, const std::string& t,
                  const Shape& want, uint32_t* id);
  Status Matrix(const std::string& t, bool transpose, std::vector<float>* m,
                int64_t* rows, int64_t* cols) const;
  Status EmitMatMul(const NodeProto& node, const std::string& t, uint32_t* id);
  Status EmitGemm(const NodeProto& node, const std::string& t, uint32_t* id);
  Status EmitScaleValue(const std::string& name, uint32_t x,
                        const std::string& result, double factor,
                        fb::DType dtype, uint32_t* id);
  Status EmitGemmBias(const NodeProto& node, const std::string& t, uint32_t y,
                      double beta, int64_t m, int64_t n, fb::DType dtype,
                      uint32_t* id);

  // import_row_movement.cc
  Status EmitCopyRows(const NodeProto& node, const std::string& name,
                      std::vector<uint32_t> operands,
                      const std::vector<Segment>& segments,
                      const std::string& result, int64_t width, fb::DType dtype,
                      uint32_t* id);
  Status EmitPerImage(const NodeProto& node, uint32_t from, int64_t images,
                      const std::string& result, uint32_t* id);
  static bool LeadingBroadcast(const Shape& small, const Shape& big);
  std::string ExpandSource(const std::string& t, const Shape& shape) const;
  Status EmitExpand(const NodeProto& node, const std::string& t, uint32_t* id);
  static bool RowAxisOf(const Shape& s, int64_t attr, RowAxis* r);
  std::string NotRows(const std::string& op, int64_t attr,
                      const Shape& s) const;
  Status EmitConcat(const NodeProto& node, const std::string& t, uint32_t* id);
  Status EmitTokenPick(const NodeProto& node, const std::string& t,
                       uint32_t* id);
  Status GatherPicks(const NodeProto& node, const Shape& ds, RowAxis* r,
                     std::vector<int64_t>* picks);
  Status SlicePicks(const NodeProto& node, const Shape& ds, RowAxis* r,
                    std::vector<int64_t>* picks, bool* everything);
  static std::vector<Segment> PickSegments(const RowAxis& r, int64_t size,
                                           const std::vector<int64_t>& picks);

  // import_attention.cc
  bool PeelScalarFactor(std::string* t, double* factor) const;
  bool MatchLinear(std::string t, LinearMatch* m) const;
  bool MatchHeads(std::string t, const std::vector<int64_t>& expected,
                  HeadsMatch* h) const;
  Status EmitTranspose(const NodeProto& node, const std::string& t,
                       uint32_t* id);
  Status EmitAttention(const NodeProto& transpose, const NodeProto& pv,
                       const std::string& t, uint32_t* id);
  static std::string CommonPrefix(const std::vector<std::string>& names);

  // import_pooling_head.cc
  bool IsPoolingAttention(const NodeProto& pv) const;
  bool MatchKeyValuePart(const std::string& t, const std::vector<int64_t>& perm,
                         KeyValuePart* part) const;
  bool SequenceFirstSource(const std::string& t, std::string* tokens) const;
  bool ProbeSource(std::string t, int64_t width, std::string* probe) const;
  Status MatchPoolingAttention(const NodeProto& pv, PoolingMatch* m) const;
  Status EmitPoolingAttention(const NodeProto& pv, const std::string& t,
                              uint32_t* id);
  Status EmitProbeQuery(const PoolingMatch& m, fb::DType dtype, uint32_t* q);
  uint32_t ProbeRow(const std::string& probe, int64_t width, fb::DType dtype);
  uint32_t ScaledWeight(const LinearMatch& m, int64_t first, int64_t count,
                        fb::DType dtype);
  static std::vector<float> WeightColumns(const LinearMatch& m, int64_t first,
                                          int64_t count);
  static std::vector<float> ScaledBias(const LinearMatch& m, int64_t first,
                                       int64_t count);
  uint32_t EmitKeyValue(const KeyValuePart& k, const KeyValuePart& v,
                        int64_t rows, fb::DType dtype, uint32_t x);
  Status EmitTokenMean(const NodeProto& node, const std::string& t,
                       uint32_t* id);

  // import_patch_embedding.cc
  Status EmitPatchEmbedding(const NodeProto& transpose, const NodeProto& conv,
                            const std::string& t, uint32_t* id);

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

}  // namespace tilec::passes::onnx_import

#endif  // TILEC_PASSES_ONNX_IMPORTER_H_
