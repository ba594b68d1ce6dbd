#include "sim/inputs.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <span>

#include "formats/basics.h"
#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "sim/npy.h"
#include "sim/reference.h"
#include "sim/tensor_data.h"

namespace tilec::kernels {
namespace {

// Which values a directory holds one file for, as messages name them.
struct FileSet {
  fb::ValueRole role;
  const char* what;  // "input", "output"
  const char* flag;  // the flag that names the directory
};

using Decoder = Status (*)(const fb::ValueT& value, const NpyArray& array,
                           const std::string& path, std::vector<float>* data);

// "f16[12,5]", with " (declared [3,4,5])" when the model declares another
// shape for the value.
std::string TypeText(const fb::ValueT& value) {
  std::string text = std::string(DTypeName(KernelDType(value.dtype))) +
                     ir::ShapeToString(value.shape);
  if (!value.declared_shape.empty()) {
    text += " (declared " + ir::ShapeToString(value.declared_shape) + ")";
  }
  return text;
}

// The sorted names of the directory's entries; a missing directory or one
// that cannot be listed is BadInput naming it.
Status ListDirectory(const std::string& dir, const FileSet& set,
                     std::vector<std::string>* names) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return Status::BadInput(dir + ": " + set.flag +
                            " expects a directory of .npy files");
  }
  for (std::filesystem::directory_iterator it(dir, error), end;
       !error && it != end; it.increment(error)) {
    names->push_back(it->path().filename().string());
  }
  if (error) {
    return Status::BadInput(dir + ": cannot list: " + error.message());
  }
  std::sort(names->begin(), names->end());
  return Status::Ok();
}

// The array's shape is the value's (tilec's rows) or the model's own.
Status CheckShape(const fb::ValueT& value, const NpyArray& array,
                  const FileSet& set, const std::string& path) {
  if (array.shape == value.shape || array.shape == ir::DeclaredShape(value)) {
    return Status::Ok();
  }
  return Status::BadInput(path + ": shape " + ir::ShapeToString(array.shape) +
                          ", the " + set.what + " " + DescribeValue(value) +
                          " is " + TypeText(value));
}

// float32 rounded to the value's dtype as a device store rounds, or the
// value's own codes taken exactly.
Status DecodeInput(const fb::ValueT& value, const NpyArray& array,
                   const std::string& path, std::vector<float>* data) {
  const std::string_view own = NpyDescrForStored(value.dtype);
  if (array.descr == kNpyFloat32) {
    *data = NpyFloat32Values(array);
    RoundToStored(value.dtype, value.fp8_scale_exp, *data);
    return Status::Ok();
  }
  if (array.descr == own) {
    const std::span<const uint8_t> bytes(
        reinterpret_cast<const uint8_t*>(array.data.data()),
        array.data.size());
    const DType kd = KernelDType(value.dtype);
    data->resize(bytes.size() / DTypeBytes(kd));
    LoadArrayAs(kd, bytes,
                ir::StorageScaleExp(value.dtype, value.fp8_scale_exp), *data);
    return Status::Ok();
  }
  return Status::BadInput(path + ": dtype '" + array.descr + "', the input " +
                          DescribeValue(value) + " is " + TypeText(value) +
                          ": expected float32 '<f4' or its own codes '" +
                          std::string(own) + "'");
}

// Expected results are the truth they were computed in (e.g. PyTorch's
// F32): float32, taken as they are.
Status DecodeExpected(const fb::ValueT& value, const NpyArray& array,
                     const std::string& path, std::vector<float>* data) {
  if (array.descr != kNpyFloat32) {
    return Status::BadInput(path + ": dtype '" + array.descr +
                            "', expected float32 '<f4' for the output " +
                            DescribeValue(value));
  }
  *data = NpyFloat32Values(array);
  return Status::Ok();
}

// One file per value of `set.role`, each checked and decoded by `decode`;
// `*values` is replaced only when every file loads.
Status LoadValueFiles(const fb::ModuleT& module, const std::string& dir,
                      const FileSet& set, Decoder decode,
                      std::map<uint32_t, std::vector<float>>* values) {
  std::vector<std::string> entries;
  TILEC_RETURN_IF_ERROR(ListDirectory(dir, set, &entries));
  std::map<std::string, const fb::ValueT*> expected;
  for (const auto& value : module.values) {
    if (value == nullptr || value->role != set.role) continue;
    const std::string file = InputFileName(*value);
    auto [it, inserted] = expected.emplace(file, value.get());
    if (!inserted) {
      return Status::BadInput(dir + "/" + file + ": names two " + set.what +
                              "s, " + DescribeValue(*it->second) + " and " +
                              DescribeValue(*value));
    }
  }
  for (const std::string& entry : entries) {
    if (expected.count(entry) == 0) {
      std::string known;
      for (const auto& [file, value] : expected) {
        known += (known.empty() ? "" : ", ") + file;
      }
      return Status::BadInput(dir + "/" + entry + ": names no " + set.what +
                              " of the module (expected " +
                              (known.empty() ? "no files" : known) + ")");
    }
  }
  std::map<uint32_t, std::vector<float>> loaded;
  for (const auto& [file, value] : expected) {
    const std::string path = dir + "/" + file;
    if (!std::binary_search(entries.begin(), entries.end(), file)) {
      return Status::BadInput(path + ": missing: the " + set.what + " " +
                              DescribeValue(*value) + " " + TypeText(*value) +
                              " has no file");
    }
    // A FIFO or device would block the read forever, or never end.
    TILEC_RETURN_IF_ERROR(ir::RequireRegularFile(path));
    std::string bytes;
    TILEC_RETURN_IF_ERROR(ir::ReadFile(path, &bytes));
    NpyArray array;
    TILEC_RETURN_IF_ERROR(ParseNpy(bytes, path, &array));
    TILEC_RETURN_IF_ERROR(CheckShape(*value, array, set, path));
    TILEC_RETURN_IF_ERROR(decode(*value, array, path, &loaded[value->id]));
  }
  *values = std::move(loaded);
  return Status::Ok();
}

}  // namespace

std::string InputFileName(const fb::ValueT& value) {
  const std::string base = value.name.empty()
                               ? "value" + std::to_string(value.id)
                               : SafeFileName(value.name);
  return base + ".npy";
}

Status LoadInputs(const fb::ModuleT& module, const std::string& dir,
                  std::map<uint32_t, std::vector<float>>* inputs) {
  return LoadValueFiles(module, dir, {fb::ValueRole::Input, "input", "--inputs"},
                        DecodeInput, inputs);
}

Status LoadExpectedOutputs(const fb::ModuleT& module, const std::string& dir,
                           std::map<uint32_t, std::vector<float>>* outputs) {
  return LoadValueFiles(module, dir,
                        {fb::ValueRole::Output, "output", "--expect"},
                        DecodeExpected, outputs);
}

}  // namespace tilec::kernels
