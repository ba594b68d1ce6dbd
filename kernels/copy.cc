// Local copy of bytes within a tile (re-layouts, seeding reductions).

#include <cstring>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {

Status Copy(const Operand& src, const Operand& dst, int64_t bytes) {
  if (bytes < 0) {
    return Status::BadInput("copy: negative byte count " + std::to_string(bytes));
  }
  const size_t n = static_cast<size_t>(bytes);
  for (const auto& [role, op] :
       {std::pair<const char*, const Operand*>{"src", &src}, {"dst", &dst}}) {
    if (n > op->bytes) {
      return Status::BadInput(std::string("copy: operand ") + role + " needs " +
                           std::to_string(n) + " bytes but holds " +
                           std::to_string(op->bytes));
    }
    if (n > 0 && op->data == nullptr) {
      return Status::BadInput(std::string("copy: operand ") + role +
                           " has no data");
    }
  }
  // memmove: source and destination may overlap within one buffer.
  if (n > 0) std::memmove(dst.data, src.data, n);
  return Status::Ok();
}

StatusOr<int64_t> CopyCycles(const CostModel& model, int64_t bytes) {
  return model.Cycles(formula::kCopy, {{"B", bytes}});
}

}  // namespace tilec::kernels
