#include "sim/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "sim/npy.h"
#include "sim/reference_executor.h"
#include "sim/tensor_data.h"

namespace tilec::kernels {
namespace {

using executor::ShapeText;

std::string Format(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", v);
  return text;
}

}  // namespace

// ---------------------------------------------------------------- result

std::string ReferenceTensor::StoredBytes() const {
  return EncodeStored(dtype, fp8_scale_exp, data);
}

const ReferenceTensor* ReferenceResult::Find(uint32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &values_[it->second];
}

const ReferenceTensor* ReferenceResult::FindByName(
    std::string_view name) const {
  for (const ReferenceTensor& t : values_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<const ReferenceTensor*> ReferenceResult::Outputs() const {
  std::vector<const ReferenceTensor*> outputs;
  for (const ReferenceTensor& t : values_) {
    if (t.role == fb::ValueRole::Output) outputs.push_back(&t);
  }
  return outputs;
}

void ReferenceResult::Reset(std::vector<ReferenceTensor> values) {
  values_ = std::move(values);
  by_id_.clear();
  for (size_t i = 0; i < values_.size(); ++i) by_id_.emplace(values_[i].id, i);
}

ReferenceTensor* ReferenceResult::Mutable(uint32_t id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &values_[it->second];
}

Status MaterializeUnrounded(const fb::ValueT& value,
                            const std::string& sidecar_dir,
                            std::vector<float>* data) {
  // An F32 copy of the value's description: rounding to F32 changes nothing.
  fb::ValueT copy;
  copy.id = value.id;
  copy.name = value.name;
  copy.shape = value.shape;
  copy.dtype = fb::DType::F32;
  copy.role = value.role;
  if (value.init) copy.init = std::make_unique<fb::WeightInitT>(*value.init);
  if (value.sidecar) copy.sidecar = std::make_unique<fb::SidecarT>(*value.sidecar);
  return MaterializeValue(copy, sidecar_dir, data);
}

Status RunReference(const fb::ModuleT& module, const ReferenceOptions& options,
                    ReferenceResult* result) {
  return executor::Executor(module, options, result).Run();
}

Status RunReference(const fb::ModuleT& module, ReferenceResult* result) {
  return RunReference(module, ReferenceOptions(), result);
}

// ---------------------------------------------------------------- reports

TensorStats ComputeStats(std::span<const float> data) {
  TensorStats stats;
  stats.count = data.size();
  double sum = 0, sum_sq = 0;
  bool first = true;
  for (float f : data) {
    if (!std::isfinite(f)) {
      ++stats.nonfinite;
      continue;
    }
    const double v = f;
    if (first) {
      stats.min = stats.max = v;
      first = false;
    }
    stats.min = std::min(stats.min, v);
    stats.max = std::max(stats.max, v);
    sum += v;
    sum_sq += v * v;
  }
  const size_t finite = stats.count - stats.nonfinite;
  if (finite > 0) stats.mean = sum / static_cast<double>(finite);
  stats.l2 = std::sqrt(sum_sq);
  return stats;
}

std::string SummaryLine(const ReferenceTensor& tensor) {
  const TensorStats s = ComputeStats(tensor.data);
  std::string line = tensor.name + " " + ShapeText(tensor.shape) + " " +
                     std::string(DTypeName(KernelDType(tensor.dtype)));
  if (ir::StorageScaleExp(tensor.dtype, tensor.fp8_scale_exp) != 0) {
    line += "(scale_exp=" + std::to_string(tensor.fp8_scale_exp) + ")";
  }
  line += " min=" + Format(s.min) + " max=" + Format(s.max) +
          " mean=" + Format(s.mean) + " l2=" + Format(s.l2) +
          " nonfinite=" + std::to_string(s.nonfinite);
  return line;
}

std::string SafeFileName(std::string_view name) {
  std::string safe(name);
  for (char& c : safe) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                      c == '-';
    if (!keep) c = '_';
  }
  if (!safe.empty() && safe[0] == '.') safe[0] = '_';
  return safe;
}

Status WriteTensorFiles(std::span<const ReferenceTensor* const> tensors,
                        const std::string& out_dir,
                        std::vector<std::string>* paths) {
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return Status::BadInput(out_dir +
                            ": cannot create directory: " + error.message());
  }
  std::set<std::string> used;
  for (const ReferenceTensor* t : tensors) {
    const bool raw = t->dtype != fb::DType::F32;
    const std::string raw_suffix =
        "." + std::string(DTypeName(KernelDType(t->dtype))) + ".npy";
    std::string base = t->name.empty() ? "value" + std::to_string(t->id)
                                       : SafeFileName(t->name);
    auto clashes = [&](const std::string& b) {
      return used.count(b + ".npy") > 0 ||
             (raw && used.count(b + raw_suffix) > 0);
    };
    if (clashes(base)) base += "_v" + std::to_string(t->id);
    // Only a contrived set of names can clash again; refuse it rather than
    // overwrite a file written moments ago.
    if (clashes(base)) {
      return Status::BadInput(out_dir + ": value names collide on " + base +
                              ".npy");
    }
    const std::string f32_path = out_dir + "/" + base + ".npy";
    const std::vector<int64_t>& shape =
        t->file_shape.empty() ? t->shape : t->file_shape;
    TILEC_RETURN_IF_ERROR(WriteNpyF32(f32_path, shape, t->data));
    used.insert(base + ".npy");
    if (paths != nullptr) paths->push_back(f32_path);
    if (raw) {
      const std::string raw_path = out_dir + "/" + base + raw_suffix;
      TILEC_RETURN_IF_ERROR(WriteNpyStored(raw_path, shape, t->dtype,
                                           t->fp8_scale_exp, t->data));
      used.insert(base + raw_suffix);
      if (paths != nullptr) paths->push_back(raw_path);
    }
  }
  return Status::Ok();
}

}  // namespace tilec::kernels
