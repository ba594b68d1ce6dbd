// GEMM on one tile: C[M,N] (+)= A[M,K] * B[K,N] with F32 accumulation.
//
// The simulator and the reference run billions of multiply-accumulates, so
// the operands are decoded to F32 arrays once (tables, not per MAC) and
// multiplied by a cache-blocked, register-blocked loop (MultiplyF32 below).
// Every C element is still summed in k order starting from its initial
// value, one rounded product and one rounded sum per step, whichever loop
// computes it, so results do not depend on the blocking.
//
// That order is a contract, which is why this loop is not a BLAS call: the
// simulator runs it on every tile, and the reference runs it for its FP8
// GEMMs, which the simulated FP8 tiles match bit for bit where K is not
// split. (The reference's other GEMMs use OpenBLAS, kernels/blas.h.)

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/gemm_body.h"
#include "kernels/host_cpu.h"
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

using gemm_body::kColumnBlock;
using gemm_body::kDepthBlock;
using gemm_body::kPanel;
using gemm_body::MultiplyBody;
using gemm_body::Product;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TILEC_GEMM_AVX2 1
// The same code with AVX2 enabled (and not FMA: products and sums still
// round separately), chosen at run time when the host has it and not
// AVX-512F.
__attribute__((target("avx2"))) void MultiplyBodyAvx2(const Product& p,
                                                      float* bp) {
  MultiplyBody<false>(p, bp);
}

// With AVX-512F (and again not FMA): a panel row per register.
__attribute__((target("avx512f"))) void MultiplyBodyAvx512(const Product& p,
                                                           float* bp) {
  MultiplyBody<true>(p, bp);
}

#endif

void MultiplyBodyDefault(const Product& p, float* bp) {
  MultiplyBody<false>(p, bp);
}

// Set by UseGemmPathForTesting: the fastest path tests allow.
std::atomic<GemmPath> path_limit{GemmPath::kFastest};

// C += A * B as `p` lays them out.
void MultiplyStrided(const Product& p) {
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return;
  // The packed depth block of B, reused across calls on this thread.
  thread_local std::vector<float> packed;
  const int64_t panels = (std::min(p.n, kColumnBlock) + kPanel - 1) / kPanel;
  const size_t need =
      static_cast<size_t>(std::min(kDepthBlock, p.k) * panels * kPanel);
  if (packed.size() < need) packed.resize(need);
#ifdef TILEC_GEMM_AVX2
  const GemmPath limit = path_limit.load(std::memory_order_relaxed);
  if (HostHasAvx512f() && limit == GemmPath::kFastest) {
    if (p.exact_products) {
      gemm_body::MultiplyBodyAvx512Fma(p, packed.data());
      return;
    }
    MultiplyBodyAvx512(p, packed.data());
    return;
  }
  if (HostHasAvx2() && limit != GemmPath::kPortable) {
    MultiplyBodyAvx2(p, packed.data());
    return;
  }
#endif
  MultiplyBodyDefault(p, packed.data());
}

// C[m, n] += A[m, k_depth] * B[k_depth, n], all row-major F32.
void MultiplyF32(const float* a, const float* b, float* c, int64_t m,
                 int64_t k_depth, int64_t n, bool exact_products) {
  MultiplyStrided({a, k_depth, b, n, c, n, m, k_depth, n, exact_products});
}

// Operands already holding unscaled F32 are used in place: decoding them
// (LoadArrayAs) would copy their bits unchanged. Others are decoded once per
// call into per-thread scratch arrays that are reused across calls.
bool IsPlainF32(const Operand& op) {
  return op.dtype == DType::kF32 && op.scale_exp == 0 &&
         std::endian::native == std::endian::little &&
         reinterpret_cast<uintptr_t>(op.data) % alignof(float) == 0;
}

const float* F32View(const Operand& op, size_t elements,
                     std::vector<float>* scratch) {
  if (IsPlainF32(op) || elements == 0) {
    return reinterpret_cast<const float*>(op.data);
  }
  if (scratch->size() < elements) scratch->resize(elements);
  LoadArrayAs(
      op.dtype,
      std::span<const uint8_t>(
          op.data, elements * static_cast<size_t>(DTypeBytes(op.dtype))),
      op.scale_exp, std::span<float>(scratch->data(), elements));
  return scratch->data();
}

bool Overlap(const Operand& x, size_t x_elements, const Operand& y,
             size_t y_elements) {
  const auto begin = [](const Operand& op) {
    return reinterpret_cast<uintptr_t>(op.data);
  };
  const auto end = [&](const Operand& op, size_t elements) {
    return begin(op) + elements * static_cast<size_t>(DTypeBytes(op.dtype));
  };
  return begin(x) < end(y, y_elements) && begin(y) < end(x, x_elements);
}

// The F32 accumulator for C: C's own memory when it is plain F32 and shares
// no byte with A or B (which are read while C is written), else scratch
// holding C's decoded values (or zeros). FinishC stores scratch back.
float* AccumulatorC(const Operand& c, size_t c_elements, bool accumulate,
                    bool in_place, std::vector<float>* scratch) {
  float* acc;
  if (in_place) {
    acc = reinterpret_cast<float*>(c.data);
    if (accumulate) return acc;
  } else {
    if (scratch->size() < c_elements) scratch->resize(c_elements);
    acc = scratch->data();
    if (accumulate) {
      LoadArrayAs(
          c.dtype,
          std::span<const uint8_t>(
              c.data, c_elements * static_cast<size_t>(DTypeBytes(c.dtype))),
          c.scale_exp, std::span<float>(acc, c_elements));
      return acc;
    }
  }
  std::fill(acc, acc + c_elements, 0.0f);
  return acc;
}

void FinishC(const Operand& c, size_t c_elements, bool in_place,
             const float* acc) {
  if (!in_place) StoreElements(c, std::span<const float>(acc, c_elements));
}

struct Scratch {
  std::vector<float> a, b, c, transposed;
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

bool ProductsExactInF32(DType a, DType b) {
  auto narrow = [](DType d) {
    const DTypeClass c = ClassOf(d);
    return c == DTypeClass::kFp8 || c == DTypeClass::kF16;
  };
  return narrow(a) && narrow(b);
}

void MultiplyF32Columns(const float* a, const float* b, float* c, int64_t m,
                        int64_t k, int64_t n, int64_t begin, int64_t end,
                        bool exact_products) {
  if (m <= 0 || end <= begin) return;
  for (int64_t i = 0; i < m; ++i) {
    std::fill(c + i * n + begin, c + i * n + end, 0.0f);
  }
  MultiplyStrided(
      {a, k, b + begin, n, c + begin, n, m, k, end - begin, exact_products});
}

void UseGemmPathForTesting(GemmPath path) {
  path_limit.store(path, std::memory_order_relaxed);
}

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

  Scratch& scratch = ThreadScratch();
  const bool c_in_place = IsPlainF32(c) && !Overlap(c, *c_elems, a, *a_elems) &&
                          !Overlap(c, *c_elems, b, *b_elems);
  const float* af = F32View(a, *a_elems, &scratch.a);
  const float* bf = F32View(b, *b_elems, &scratch.b);
  float* cf = AccumulatorC(c, *c_elems, accumulate, c_in_place, &scratch.c);
  MultiplyF32(af, bf, cf, m, k, n, ProductsExactInF32(a.dtype, b.dtype));
  FinishC(c, *c_elems, c_in_place, cf);
  return Status::Ok();
}

Status GemmNt(const Operand& a, const Operand& b, const Operand& c, int64_t m,
              int64_t k, int64_t n, bool accumulate, float scale) {
  constexpr std::string_view kName = names::kGemmNt;
  // B holds [N, K]: its transpose, in F32, is the [K, N] operand of Gemm.
  StatusOr<size_t> b_elems = ElementCount(kName, {n, k});
  if (!b_elems.ok()) return b_elems.status();
  if (Status s = CheckOperand(kName, "B", b, *b_elems); !s.ok()) return s;
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
  Scratch& scratch = ThreadScratch();
  const float* rows = F32View(b, *b_elems, &scratch.b);
  if (scratch.transposed.size() < *b_elems) {
    scratch.transposed.resize(*b_elems);
  }
  float* transposed = scratch.transposed.data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) transposed[j * n + i] = rows[i * k + j];
  }
  // The product in F32, scaled, then added or stored: one rounding, as the
  // reference scales attention scores.
  const float* af = F32View(a, *a_elems, &scratch.a);
  std::vector<float> product(*c_elems, 0.0f);
  MultiplyF32(af, transposed, product.data(), m, k, n,
              ProductsExactInF32(a.dtype, b.dtype));
  const bool c_in_place = IsPlainF32(c) && !Overlap(c, *c_elems, a, *a_elems) &&
                          !Overlap(c, *c_elems, b, *b_elems);
  float* cf = AccumulatorC(c, *c_elems, accumulate, c_in_place, &scratch.c);
  for (size_t i = 0; i < *c_elems; ++i) cf[i] += product[i] * scale;
  FinishC(c, *c_elems, c_in_place, cf);
  return Status::Ok();
}

StatusOr<int64_t> GemmCycles(const CostModel& model, DType a_dtype, int64_t m,
                             int64_t k, int64_t n) {
  StatusOr<std::string_view> name = GemmKernelName(a_dtype);
  if (!name.ok()) return name.status();
  return model.Cycles(*name, {{"M", m}, {"K", k}, {"N", n}});
}

}  // namespace tilec::kernels
