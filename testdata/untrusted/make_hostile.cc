// make_hostile: the hostile inputs of untrusted_test.sh and of
// testdata/reliability (not a user tool).
//
//   make_hostile onnx OUT.onnx LOCATION
//     A one-MatMul ONNX model (x [2, 4] times w [4, 4], FLOAT) whose
//     initializer w is external data: 64 bytes at offset 0 of LOCATION.
//   make_hostile sidecar IN.tilec OUT.tilec PATH
//     IN with every value's sidecar path replaced by PATH, written without
//     the verifier so that the readers' own checks are what refuse it.
//   make_hostile recipe IN.tilec OUT.tilec
//     IN (planned) with its first GEMM recipe's m split 5 more than its
//     grid layout has (testdata/reliability).

#include <iostream>
#include <string>

#include "formats/ir.h"
#include "onnx/onnx_pb.h"

namespace {

using tilec::Status;

::onnx::ValueInfoProto FloatInfo(const std::string& name, int rows, int cols) {
  ::onnx::ValueInfoProto info;
  info.set_name(name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(::onnx::TensorProto::FLOAT);
  tensor->mutable_shape()->add_dim()->set_dim_value(rows);
  tensor->mutable_shape()->add_dim()->set_dim_value(cols);
  return info;
}

Status WriteOnnx(const std::string& out, const std::string& location) {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* graph = model.mutable_graph();
  graph->set_name("hostile");
  *graph->add_input() = FloatInfo("x", 2, 4);
  *graph->add_output() = FloatInfo("y", 2, 4);
  auto* w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(4);
  w->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto entry = [&](const char* key, const std::string& value) {
    auto* e = w->add_external_data();
    e->set_key(key);
    e->set_value(value);
  };
  entry("location", location);
  entry("offset", "0");
  entry("length", "64");
  auto* matmul = graph->add_node();
  matmul->set_op_type("MatMul");
  matmul->set_name("matmul");
  matmul->add_input("x");
  matmul->add_input("w");
  matmul->add_output("y");
  return tilec::ir::WriteFileAtomically(out, model.SerializeAsString());
}

// IN changed by `damage`, written without the verifier.
template <typename Damage>
Status Rewrite(const std::string& in, const std::string& out, Damage damage) {
  tilec::fb::ModuleT module;
  TILEC_RETURN_IF_ERROR(tilec::ir::ReadModule(in, &module));
  damage(&module);
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(tilec::fb::Module::Pack(builder, &module),
                 tilec::ir::kFileIdentifier);
  return tilec::ir::WriteFileAtomically(
      out, std::string(reinterpret_cast<const char*>(builder.GetBufferPointer()),
                       builder.GetSize()));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string kind = argc > 1 ? argv[1] : "";
  Status s = Status::BadInput("usage: make_hostile onnx OUT.onnx LOCATION | "
                              "sidecar IN.tilec OUT.tilec PATH | "
                              "recipe IN.tilec OUT.tilec");
  if (kind == "onnx" && argc == 4) s = WriteOnnx(argv[2], argv[3]);
  if (kind == "sidecar" && argc == 5) {
    const std::string path = argv[4];
    s = Rewrite(argv[2], argv[3], [&](tilec::fb::ModuleT* module) {
      for (auto& value : module->values) {
        if (value->sidecar) value->sidecar->path = path;
      }
    });
  }
  if (kind == "recipe" && argc == 4) {
    s = Rewrite(argv[2], argv[3], [](tilec::fb::ModuleT* module) {
      for (auto& op : module->ops) {
        if (op->kind == tilec::fb::OpKind::MatMul && op->recipe) {
          op->recipe->m_split += 5;
          return;
        }
      }
    });
  }
  if (!s.ok()) {
    std::cerr << "make_hostile: " << s.message() << "\n";
    return s.exit_code();
  }
  return 0;
}
