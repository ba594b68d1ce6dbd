// GEMM on one tile: C[M,N] (+)= A[M,K] * B[K,N] with F32 accumulation.
//
// The simulator runs billions of multiply-accumulates, so the operands are
// decoded to F32 arrays once and multiplied by a register-blocked loop that
// the compiler vectorizes: a 4 x 16 block of C stays in registers while k
// runs over the whole depth. Every C element is still summed in k order
// starting from its initial value, whichever loop computes it, so results do
// not depend on the blocking.

#include <algorithm>
#include <cstring>

#include "kernels/kernel_names.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

constexpr std::string_view kName = names::kGemm;

enum class DTypeClass { kFp8, kF16, kF32, kOther };

DTypeClass ClassOf(DType d) {
  switch (d) {
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return DTypeClass::kFp8;
    case DType::kF16:
      return DTypeClass::kF16;
    case DType::kF32:
      return DTypeClass::kF32;
    default:
      return DTypeClass::kOther;
  }
}

constexpr int64_t kBlockRows = 4;
constexpr int64_t kBlockCols = 16;

// C block [i0, i0+4) x [j0, j0+16): accumulators live in registers over k.
void FullBlock(const float* a, const float* b, float* c, int64_t k_depth,
               int64_t n, int64_t i0, int64_t j0) {
  float acc[kBlockRows][kBlockCols];
  for (int64_t r = 0; r < kBlockRows; ++r) {
    std::memcpy(acc[r], c + (i0 + r) * n + j0, sizeof(acc[r]));
  }
  const float* a0 = a + i0 * k_depth;
  for (int64_t k = 0; k < k_depth; ++k) {
    const float* brow = b + k * n + j0;
    for (int64_t r = 0; r < kBlockRows; ++r) {
      const float av = a0[r * k_depth + k];
      for (int64_t jj = 0; jj < kBlockCols; ++jj) acc[r][jj] += av * brow[jj];
    }
  }
  for (int64_t r = 0; r < kBlockRows; ++r) {
    std::memcpy(c + (i0 + r) * n + j0, acc[r], sizeof(acc[r]));
  }
}

// Any rectangle [i_begin, i_end) x [j_begin, j_end), in i-k-j order.
void EdgeBlock(const float* a, const float* b, float* c, int64_t k_depth,
               int64_t n, int64_t i_begin, int64_t i_end, int64_t j_begin,
               int64_t j_end) {
  for (int64_t i = i_begin; i < i_end; ++i) {
    float* crow = c + i * n;
    for (int64_t k = 0; k < k_depth; ++k) {
      const float av = a[i * k_depth + k];
      const float* brow = b + k * n;
      for (int64_t j = j_begin; j < j_end; ++j) crow[j] += av * brow[j];
    }
  }
}

void MultiplyF32(const float* a, const float* b, float* c, int64_t m,
                 int64_t k_depth, int64_t n) {
  const int64_t m_full = m / kBlockRows * kBlockRows;
  const int64_t n_full = n / kBlockCols * kBlockCols;
  for (int64_t i0 = 0; i0 < m_full; i0 += kBlockRows) {
    for (int64_t j0 = 0; j0 < n_full; j0 += kBlockCols) {
      FullBlock(a, b, c, k_depth, n, i0, j0);
    }
  }
  if (n_full < n) EdgeBlock(a, b, c, k_depth, n, 0, m_full, n_full, n);
  if (m_full < m) EdgeBlock(a, b, c, k_depth, n, m_full, m, 0, n);
}

}  // namespace

StatusOr<std::string_view> GemmKernelName(DType a_dtype) {
  switch (ClassOf(a_dtype)) {
    case DTypeClass::kFp8:
      return formula::kGemmFp8;
    case DTypeClass::kF16:
      return formula::kGemmF16;
    case DTypeClass::kF32:
      return formula::kGemmF32;
    case DTypeClass::kOther:
      break;
  }
  return Status::BadInput("gemm: no GEMM kernel for input dtype " +
                       std::string(DTypeName(a_dtype)) +
                       " (FP8, F16 or F32)");
}

Status Gemm(const Operand& a, const Operand& b, const Operand& c, int64_t m,
            int64_t k, int64_t n, bool accumulate) {
  StatusOr<size_t> a_elems = ElementCount(kName, {m, k});
  if (!a_elems.ok()) return a_elems.status();
  StatusOr<size_t> b_elems = ElementCount(kName, {k, n});
  if (!b_elems.ok()) return b_elems.status();
  StatusOr<size_t> c_elems = ElementCount(kName, {m, n});
  if (!c_elems.ok()) return c_elems.status();
  if (Status s = CheckOperand(kName, "A", a, *a_elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "B", b, *b_elems); !s.ok()) return s;
  if (Status s = CheckOperand(kName, "C", c, *c_elems); !s.ok()) return s;
  if (StatusOr<std::string_view> name = GemmKernelName(a.dtype); !name.ok()) {
    return name.status();
  }
  if (ClassOf(a.dtype) != ClassOf(b.dtype)) {
    return Status::BadInput("gemm: A is " + std::string(DTypeName(a.dtype)) +
                         " but B is " + std::string(DTypeName(b.dtype)) +
                         " (both FP8, both F16 or both F32)");
  }
  if (c.dtype != DType::kF32 && c.dtype != DType::kF16) {
    return Status::BadInput("gemm: output C is " +
                         std::string(DTypeName(c.dtype)) + " (F32 or F16)");
  }

  const std::vector<float> af = LoadElements(a, *a_elems);
  const std::vector<float> bf = LoadElements(b, *b_elems);
  std::vector<float> cf =
      accumulate ? LoadElements(c, *c_elems) : std::vector<float>(*c_elems);
  MultiplyF32(af.data(), bf.data(), cf.data(), m, k, n);
  StoreElements(c, cf);
  return Status::Ok();
}

Status GemmNt(const Operand& a, const Operand& b, const Operand& c, int64_t m,
              int64_t k, int64_t n, bool accumulate, float scale) {
  constexpr std::string_view kName = names::kGemmNt;
  // B holds [N, K]: its transpose, in F32, is the [K, N] operand of Gemm.
  StatusOr<size_t> b_elems = ElementCount(kName, {n, k});
  if (!b_elems.ok()) return b_elems.status();
  if (Status s = CheckOperand(kName, "B", b, *b_elems); !s.ok()) return s;
  const std::vector<float> rows = LoadElements(b, *b_elems);
  std::vector<float> transposed(rows.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) transposed[j * n + i] = rows[i * k + j];
  }
  StatusOr<size_t> c_elems = ElementCount(kName, {m, n});
  if (!c_elems.ok()) return c_elems.status();
  if (Status s = CheckOperand(kName, "C", c, *c_elems); !s.ok()) return s;
  StatusOr<size_t> a_elems = ElementCount(kName, {m, k});
  if (!a_elems.ok()) return a_elems.status();
  if (Status s = CheckOperand(kName, "A", a, *a_elems); !s.ok()) return s;
  if (StatusOr<std::string_view> name = GemmKernelName(a.dtype); !name.ok()) {
    return name.status();
  }
  if (ClassOf(a.dtype) != ClassOf(b.dtype)) {
    return Status::BadInput("gemm_nt: A is " + std::string(DTypeName(a.dtype)) +
                            " but B is " + std::string(DTypeName(b.dtype)));
  }
  if (c.dtype != DType::kF32 && c.dtype != DType::kF16) {
    return Status::BadInput("gemm_nt: output C is " +
                            std::string(DTypeName(c.dtype)) + " (F32 or F16)");
  }
  // The product in F32, scaled, then added or stored: one rounding, as the
  // reference scales attention scores.
  const std::vector<float> af = LoadElements(a, *a_elems);
  std::vector<float> product(*c_elems, 0.0f);
  MultiplyF32(af.data(), transposed.data(), product.data(), m, k, n);
  std::vector<float> cf =
      accumulate ? LoadElements(c, *c_elems) : std::vector<float>(*c_elems);
  for (size_t i = 0; i < cf.size(); ++i) cf[i] += product[i] * scale;
  StoreElements(c, cf);
  return Status::Ok();
}

StatusOr<int64_t> GemmCycles(const CostModel& model, DType a_dtype, int64_t m,
                             int64_t k, int64_t n) {
  StatusOr<std::string_view> name = GemmKernelName(a_dtype);
  if (!name.ok()) return name.status();
  return model.Cycles(*name, {{"M", m}, {"K", k}, {"N", n}});
}

}  // namespace tilec::kernels
