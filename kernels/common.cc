// Helpers shared by the kernel files: operand checks and F32 staging.

#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

// Far above any tile's memory, far below overflow of size_t byte counts.
constexpr int64_t kMaxElements = int64_t{1} << 40;

bool ValidDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return true;
  }
  return false;
}

}  // namespace

StatusOr<GeluForm> GeluFormFromInt(int64_t form) {
  switch (form) {
    case 0:
      return GeluForm::kTanh;
    case 1:
      return GeluForm::kErf;
    case 2:
      return GeluForm::kQuick;
  }
  return Status::BadInput("unknown GELU form " + std::to_string(form) +
                       " (0 tanh, 1 erf, 2 quick)");
}

StatusOr<size_t> ElementCount(std::string_view kernel,
                              std::initializer_list<int64_t> factors) {
  bool any_zero = false;
  for (int64_t f : factors) {
    if (f < 0) {
      return Status::BadInput(std::string(kernel) + ": negative size " +
                           std::to_string(f));
    }
    any_zero = any_zero || f == 0;
  }
  if (any_zero) return size_t{0};
  int64_t product = 1;
  for (int64_t f : factors) {
    if (product > kMaxElements / f) {
      std::string sizes;
      for (int64_t g : factors) {
        sizes += (sizes.empty() ? "" : " x ") + std::to_string(g);
      }
      return Status::BadInput(std::string(kernel) + ": shape " + sizes +
                           " is too large");
    }
    product *= f;
  }
  return static_cast<size_t>(product);
}

Status CheckOperand(std::string_view kernel, std::string_view role,
                    const Operand& op, size_t elements) {
  if (!ValidDType(op.dtype)) {
    return Status::BadInput(std::string(kernel) + ": operand " +
                         std::string(role) + " has invalid dtype " +
                         std::to_string(static_cast<int>(op.dtype)));
  }
  const size_t needed = elements * static_cast<size_t>(DTypeBytes(op.dtype));
  if (needed > op.bytes) {
    return Status::BadInput(
        std::string(kernel) + ": operand " + std::string(role) + " needs " +
        std::to_string(needed) + " bytes (" + std::to_string(elements) + " " +
        std::string(DTypeName(op.dtype)) + " elements) but holds " +
        std::to_string(op.bytes));
  }
  if (needed > 0 && op.data == nullptr) {
    return Status::BadInput(std::string(kernel) + ": operand " +
                         std::string(role) + " has no data");
  }
  return Status::Ok();
}

int64_t RoundUpToGroup(int64_t w, int64_t group) {
  if (group <= 1) return w;
  return (w + group - 1) / group * group;
}

std::vector<float> LoadElements(const Operand& op, size_t elements) {
  std::vector<float> values(elements);
  if (elements == 0) return values;
  const size_t bytes = elements * static_cast<size_t>(DTypeBytes(op.dtype));
  LoadArrayAs(op.dtype, std::span<const uint8_t>(op.data, bytes), op.scale_exp,
              values);
  return values;
}

void StoreElements(const Operand& op, std::span<const float> values) {
  if (values.empty()) return;
  const size_t bytes =
      values.size() * static_cast<size_t>(DTypeBytes(op.dtype));
  StoreArrayAs(op.dtype, values, op.scale_exp,
               std::span<uint8_t>(op.data, bytes));
}

}  // namespace tilec::kernels
