#include "kernels/inputs.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <span>

#include "formats/basics.h"
#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "kernels/npy.h"
#include "kernels/reference.h"
#include "kernels/tensor_data.h"

namespace tilec::kernels {
namespace {

std::string TypeText(const fb::ValueT& value) {
  return std::string(DTypeName(KernelDType(value.dtype))) +
         ir::ShapeToString(value.shape);
}

// The sorted names of the directory's entries; a missing directory or one
// that cannot be listed is BadInput naming it.
Status ListDirectory(const std::string& dir, std::vector<std::string>* names) {
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return Status::BadInput(dir +
                            ": --inputs expects a directory of .npy "
                            "files");
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

Status DecodeInput(const fb::ValueT& value, const NpyArray& array,
                   const std::string& name, std::vector<float>* data) {
  if (array.shape != value.shape) {
    return Status::BadInput(name + ": shape " + ir::ShapeToString(array.shape) +
                            ", the input " + DescribeValue(value) + " is " +
                            TypeText(value));
  }
  const std::string_view own = NpyDescrForStored(value.dtype);
  const std::span<const uint8_t> bytes(
      reinterpret_cast<const uint8_t*>(array.data.data()), array.data.size());
  if (array.descr == kNpyFloat32) {
    data->resize(bytes.size() / sizeof(float));
    LoadArrayAs(DType::kF32, bytes, 0, *data);
    RoundToStored(value.dtype, value.fp8_scale_exp, *data);
    return Status::Ok();
  }
  if (array.descr == own) {
    const DType kd = KernelDType(value.dtype);
    data->resize(bytes.size() / DTypeBytes(kd));
    LoadArrayAs(kd, bytes,
                ir::StorageScaleExp(value.dtype, value.fp8_scale_exp), *data);
    return Status::Ok();
  }
  return Status::BadInput(name + ": dtype '" + array.descr + "', the input " +
                          DescribeValue(value) + " is " + TypeText(value) +
                          ": expected float32 '<f4' or its own codes '" +
                          std::string(own) + "'");
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
  std::vector<std::string> entries;
  TILEC_RETURN_IF_ERROR(ListDirectory(dir, &entries));
  std::map<std::string, const fb::ValueT*> expected;
  for (const auto& value : module.values) {
    if (value == nullptr || value->role != fb::ValueRole::Input) continue;
    const std::string file = InputFileName(*value);
    auto [it, inserted] = expected.emplace(file, value.get());
    if (!inserted) {
      return Status::BadInput(dir + "/" + file + ": names two inputs, " +
                              DescribeValue(*it->second) + " and " +
                              DescribeValue(*value));
    }
  }
  for (const std::string& entry : entries) {
    if (expected.count(entry) == 0) {
      std::string known;
      for (const auto& [file, value] : expected) {
        known += (known.empty() ? "" : ", ") + file;
      }
      return Status::BadInput(dir + "/" + entry +
                              ": names no input of the module (expected " +
                              (known.empty() ? "no files" : known) + ")");
    }
  }
  std::map<uint32_t, std::vector<float>> loaded;
  for (const auto& [file, value] : expected) {
    const std::string path = dir + "/" + file;
    if (!std::binary_search(entries.begin(), entries.end(), file)) {
      return Status::BadInput(path + ": missing: the input " +
                              DescribeValue(*value) + " " + TypeText(*value) +
                              " has no file");
    }
    // A FIFO or device would block the read forever, or never end.
    TILEC_RETURN_IF_ERROR(ir::RequireRegularFile(path));
    std::string bytes;
    TILEC_RETURN_IF_ERROR(ir::ReadFile(path, &bytes));
    NpyArray array;
    TILEC_RETURN_IF_ERROR(ParseNpy(bytes, path, &array));
    TILEC_RETURN_IF_ERROR(DecodeInput(*value, array, path, &loaded[value->id]));
  }
  *inputs = std::move(loaded);
  return Status::Ok();
}

}  // namespace tilec::kernels
