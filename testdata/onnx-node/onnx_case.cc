// The glue between ONNX's backend node tests and tilec's tools (not a user
// tool: node_tests.sh runs it).
//
//   onnx_case inputs MODULE DATASET OUT_DIR
//     Each DATASET/input_*.pb (a TensorProto) whose name is an input of
//     MODULE becomes OUT_DIR/<name>.npy (float32, in the test data's own
//     shape, which --inputs accepts as the graph's declared shape), ready
//     for `--inputs=OUT_DIR`.
//   onnx_case compare MODULE DATASET RESULT_DIR [RTOL ATOL]
//     Each DATASET/output_*.pb whose name is an output of MODULE is compared
//     with RESULT_DIR/<name>.npy (run-reference --out_dir), which must
//     have the expected tensor's shape (outputs are written in the graph's
//     declared shapes), element by element as numpy.testing.assert_allclose
//     does, ONNX's runner's test:
//     |actual - expected| <= ATOL + RTOL * |expected| (default 1e-3, 1e-7),
//     NaN equal to NaN. Prints one line per output; outputs the module does
//     not have are listed as not compared.
// Exit 0 when everything written or compared passed, 1 otherwise.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "sim/inputs.h"
#include "sim/npy.h"
#include "kernels/numerics.h"
#include "sim/reference.h"
#include "passes/onnx/onnx_tensor.h"

namespace tilec {
namespace {

namespace fs = std::filesystem;

// The dataset's files with `prefix` (input_ / output_), in index order.
std::vector<fs::path> Files(const std::string& dataset,
                            const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> numbered;
  for (const auto& entry : fs::directory_iterator(dataset)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && entry.path().extension() == ".pb") {
      numbered.emplace_back(std::stoi(name.substr(prefix.size())),
                            entry.path());
    }
  }
  std::sort(numbered.begin(), numbered.end());
  std::vector<fs::path> files;
  for (auto& [index, path] : numbered) files.push_back(path);
  return files;
}

// ONNX's generator stores BFLOAT16 test tensors as UINT16 bit patterns: for
// a BF16 value of the module they are decoded as bfloat16.
void DecodeBf16Bits(const fb::ValueT& v, passes::OnnxConstant* tensor) {
  if (v.dtype != fb::DType::BF16 ||
      tensor->elem_type != ::onnx::TensorProto::UINT16) {
    return;
  }
  for (double& d : tensor->data) {
    d = kernels::Bf16Decode(static_cast<uint16_t>(d));
  }
}

Status ReadTensor(const fs::path& path, passes::OnnxConstant* tensor,
                  std::string* name) {
  std::string bytes;
  TILEC_RETURN_IF_ERROR(ir::ReadFile(path.string(), &bytes));
  ::onnx::TensorProto proto;
  TILEC_RETURN_IF_ERROR(
      passes::ParseOnnxTensorFile(bytes, path.string(), &proto));
  *name = proto.name();
  return passes::DecodeOnnxTensor(proto, path.parent_path().string(),
                                  path.string(), tensor);
}

const fb::ValueT* FindValue(const fb::ModuleT& module, const std::string& name,
                            fb::ValueRole role) {
  for (const auto& v : module.values) {
    if (v->name == name && v->role == role) return v.get();
  }
  return nullptr;
}

Status WriteInputs(const fb::ModuleT& module, const std::string& dataset,
                   const std::string& out_dir) {
  fs::create_directories(out_dir);
  for (const fs::path& file : Files(dataset, "input_")) {
    passes::OnnxConstant tensor;
    std::string name;
    TILEC_RETURN_IF_ERROR(ReadTensor(file, &tensor, &name));
    const fb::ValueT* v = FindValue(module, name, fb::ValueRole::Input);
    if (v == nullptr)
      continue;  // only an output tilec does not import reads it
    DecodeBf16Bits(*v, &tensor);
    std::vector<float> data(tensor.data.begin(), tensor.data.end());
    TILEC_RETURN_IF_ERROR(kernels::WriteNpyF32(
        out_dir + "/" + kernels::InputFileName(*v), tensor.shape, data));
  }
  return Status::Ok();
}

Status Compare(const fb::ModuleT& module, const std::string& dataset,
               const std::string& result_dir, double rtol, double atol,
               bool* pass) {
  *pass = true;
  for (const fs::path& file : Files(dataset, "output_")) {
    passes::OnnxConstant expected;
    std::string name;
    TILEC_RETURN_IF_ERROR(ReadTensor(file, &expected, &name));
    const fb::ValueT* v = FindValue(module, name, fb::ValueRole::Output);
    if (v == nullptr) {
      std::cout << "  output " << name << ": not compared (not imported)\n";
      continue;
    }
    DecodeBf16Bits(*v, &expected);
    std::vector<int64_t> shape;
    std::vector<float> actual;
    TILEC_RETURN_IF_ERROR(kernels::ReadNpyF32(
        result_dir + "/" + kernels::SafeFileName(name) + ".npy", &shape,
        &actual));
    if (shape != expected.shape) {
      std::cout << "  output " << name << ": FAIL shape "
                << ir::ShapeToString(shape) << ", expected "
                << ir::ShapeToString(expected.shape) << "\n";
      *pass = false;
      continue;
    }
    double max_abs = 0;
    size_t bad = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      const double a = actual[i], e = expected.data[i];
      if ((std::isnan(a) && std::isnan(e)) || a == e) continue;  // inf == inf
      const double err = std::abs(a - e);
      if (!(err <= atol + rtol * std::abs(e))) ++bad;
      if (std::isfinite(err)) max_abs = std::max(max_abs, err);
    }
    char line[256];
    std::snprintf(line, sizeof line,
                  "  output %s: %s max_abs_err %.3g, %zu of %zu elements "
                  "outside rtol %g atol %g\n",
                  name.c_str(), bad == 0 ? "PASS" : "FAIL", max_abs, bad,
                  actual.size(), rtol, atol);
    std::cout << line;
    if (bad > 0) *pass = false;
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: onnx_case inputs|compare MODULE DATASET DIR "
                 "[RTOL ATOL]\n";
    return 2;
  }
  const std::string command = argv[1];
  fb::ModuleT module;
  Status status = ir::ReadModule(argv[2], &module);
  bool pass = true;
  if (status.ok() && command == "inputs") {
    status = WriteInputs(module, argv[3], argv[4]);
  } else if (status.ok() && command == "compare") {
    const double rtol = argc > 5 ? std::stod(argv[5]) : 1e-3;
    const double atol = argc > 6 ? std::stod(argv[6]) : 1e-7;
    status = Compare(module, argv[3], argv[4], rtol, atol, &pass);
  } else if (status.ok()) {
    status = Status::BadInput("unknown command " + command);
  }
  if (!status.ok()) {
    std::cerr << "onnx_case: " << status.message() << "\n";
    return status.exit_code();
  }
  return pass ? 0 : 1;
}

}  // namespace
}  // namespace tilec

int main(int argc, char** argv) { return tilec::Main(argc, argv); }
