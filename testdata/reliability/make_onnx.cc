// make_onnx: the hostile and careless ONNX models of reliability_test.sh
// (issue 28; not a user tool). Each is small and valid protobuf:
//
//   make_onnx KIND OUT.onnx [N]
//
// KIND: gemm-unknown (a Gemm whose input comes from a misspelled op, its
// output declared), add-chain N (a MatMul, then N Adds), identity-chain N
// (a MatMul, then N Identity nodes), huge-init (an unused [2^20, 2^20]
// initializer without data), zero-k (a [0, 4] weight), zero-input (a
// [0, 4] graph input), big-input (a [2^16, 2^16] graph input), gather-axis
// (axis 5 of a rank-2 tensor), gather-index (constant index 7 of 3),
// k-mismatch ([2, 4] times [5, 3]), negative-dim (an input [2, -4]),
// range-step0 (Range with delta 0), matmul-types (FLOAT times FLOAT16),
// gemm-vector (a Gemm of a [2, 10] matrix and a [3] vector, the output
// declared [2, 3]: found by the onnx fuzz target),
// value-info N (N Identity nodes, each declared in value_info), odd-names
// (a newline and an escape sequence in node and tensor names).

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "formats/ir.h"
#include "onnx/onnx_pb.h"

namespace {

using ::onnx::TensorProto;

struct Model {
  ::onnx::ModelProto proto;
  ::onnx::GraphProto* graph;

  Model() {
    proto.set_ir_version(8);
    proto.add_opset_import()->set_version(17);
    graph = proto.mutable_graph();
    graph->set_name("reliability");
  }

  static void Type(::onnx::ValueInfoProto* info, const std::string& name,
                   int type, const std::vector<int64_t>& dims) {
    info->set_name(name);
    auto* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(type);
    for (int64_t d : dims) tensor->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void Input(const std::string& name, const std::vector<int64_t>& dims,
             int type = TensorProto::FLOAT) {
    Type(graph->add_input(), name, type, dims);
  }
  void Output(const std::string& name, const std::vector<int64_t>& dims) {
    Type(graph->add_output(), name, TensorProto::FLOAT, dims);
  }
  // Values 0.5, 1.5, ... (not uniform, so a sidecar weight); no data when
  // `with_data` is false.
  void Init(const std::string& name, const std::vector<int64_t>& dims,
            int type = TensorProto::FLOAT, bool with_data = true) {
    TensorProto* t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(type);
    int64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    if (!with_data) return;
    for (int64_t i = 0; i < count; ++i) {
      if (type == TensorProto::INT64) {
        t->add_int64_data(i);
      } else if (type == TensorProto::FLOAT16) {
        t->add_int32_data(0x3c00 + static_cast<int32_t>(i));
      } else {
        t->add_float_data(0.5f + static_cast<float>(i));
      }
    }
  }
  void Ints(const std::string& name, const std::vector<int64_t>& values) {
    TensorProto* t = graph->add_initializer();
    t->set_name(name);
    t->set_data_type(TensorProto::INT64);
    if (values.size() != 1) t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
  }
  ::onnx::NodeProto* Node(const std::string& op,
                          const std::vector<std::string>& inputs,
                          const std::string& output, std::string name = "") {
    auto* n = graph->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? output : name);
    for (const std::string& i : inputs) n->add_input(i);
    n->add_output(output);
    return n;
  }
  static void IntAttr(::onnx::NodeProto* n, const std::string& name,
                      int64_t value) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(value);
  }
};

tilec::Status Make(const std::string& kind, int64_t n, Model* m) {
  if (kind == "gemm-unknown") {
    m->Input("x", {2, 4});
    m->Init("w", {4, 4});
    m->Node("Reluu", {"x"}, "h");
    m->Node("Gemm", {"h", "w"}, "y");
    m->Output("y", {2, 4});
  } else if (kind == "add-chain" || kind == "identity-chain" ||
             kind == "value-info") {
    m->Input("x", {2, 4});
    m->Init("w", {4, 4});
    m->Init("b", {4});
    m->Node("MatMul", {"x", "w"}, "t0");
    const std::string op = kind == "add-chain" ? "Add" : "Identity";
    for (int64_t i = 1; i <= n; ++i) {
      std::vector<std::string> in = {"t" + std::to_string(i - 1)};
      if (op == "Add") in.push_back("b");
      const std::string out = i == n ? "y" : "t" + std::to_string(i);
      m->Node(op, in, out);
      if (kind == "value-info") Model::Type(m->graph->add_value_info(), out,
                                            TensorProto::FLOAT, {2, 4});
    }
    m->Output("y", {2, 4});
  } else if (kind == "huge-init") {
    m->Input("x", {2, 4});
    m->Init("w", {4, 4});
    m->Init("unused", {int64_t{1} << 20, int64_t{1} << 20}, TensorProto::FLOAT,
            /*with_data=*/false);
    m->Node("MatMul", {"x", "w"}, "y");
    m->Output("y", {2, 4});
  } else if (kind == "zero-k") {
    m->Input("x", {2, 0});
    m->Init("w", {0, 4});
    m->Node("MatMul", {"x", "w"}, "y");
    m->Output("y", {2, 4});
  } else if (kind == "zero-input" || kind == "big-input") {
    const int64_t rows = kind == "zero-input" ? 0 : int64_t{1} << 16;
    const int64_t cols = kind == "zero-input" ? 4 : int64_t{1} << 16;
    m->Input("x", {rows, cols});
    m->Node("Add", {"x", "x"}, "y");
    m->Output("y", {rows, cols});
  } else if (kind == "gather-axis" || kind == "gather-index") {
    m->Input("x", {3, 4});
    m->Ints("idx", {kind == "gather-index" ? 7 : 1});
    auto* g = m->Node("Gather", {kind == "gather-index" ? "c" : "x", "idx"},
                      "g");
    Model::IntAttr(g, "axis", kind == "gather-axis" ? 5 : 0);
    if (kind == "gather-index") m->Init("c", {3, 4});
    m->Node("Add", {"g", "x"}, "y");
    m->Output("y", {3, 4});
  } else if (kind == "k-mismatch") {
    m->Input("x", {2, 4});
    m->Init("w", {5, 3});
    m->Node("MatMul", {"x", "w"}, "y");
    m->Output("y", {2, 3});
  } else if (kind == "negative-dim") {
    m->Input("x", {2, -4});
    m->Node("Add", {"x", "x"}, "y");
    m->Output("y", {2, 4});
  } else if (kind == "range-step0") {
    m->Input("x", {2, 4});
    m->Ints("start", {0});
    m->Ints("limit", {4});
    m->Ints("delta", {0});
    m->Node("Range", {"start", "limit", "delta"}, "r");
    m->Node("Reshape", {"x", "r"}, "y");
    m->Output("y", {2, 4});
  } else if (kind == "matmul-types") {
    m->Input("x", {2, 4});
    m->Init("w", {4, 4}, TensorProto::FLOAT16);
    m->Node("MatMul", {"x", "w"}, "y");
    m->Output("y", {2, 4});
  } else if (kind == "gemm-vector") {
    m->Input("x", {2, 10});
    m->Input("b", {3});
    m->Node("Gemm", {"x", "b"}, "y");
    m->Output("y", {2, 3});
  } else if (kind == "odd-names") {
    m->Input("x", {2, 4});
    m->Init("w\nop 99 = Evil", {4, 4});
    m->Node("MatMul", {"x", "w\nop 99 = Evil"}, "y", "mat\x1b[31mmul\nfake");
    m->Output("y", {2, 4});
  } else {
    return tilec::Status::BadInput("unknown kind " + kind);
  }
  return tilec::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: make_onnx KIND OUT.onnx [N]\n";
    return 2;
  }
  Model m;
  tilec::Status s = Make(argv[1], argc == 4 ? std::stoll(argv[3]) : 0, &m);
  if (s.ok()) {
    s = tilec::ir::WriteFileAtomically(argv[2], m.proto.SerializeAsString());
  }
  if (!s.ok()) {
    std::cerr << "make_onnx: " << s.message() << "\n";
    return s.exit_code();
  }
  return 0;
}
