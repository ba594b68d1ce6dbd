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

// The product runs in blocks that keep every operand in cache:
//  - column blocks of kColumnBlock columns of B and C, one after the other
//    (bounding the packed copy of B below);
//  - depth blocks of kDepthBlock k values; within one, B is packed into
//    panels of kPanel columns (zero-padded), each panel [kc][kPanel]
//    contiguous, so the inner loop reads B sequentially;
//  - row blocks of kRowBlock rows of A, which stay in L2 while every panel
//    of the depth block passes over them;
//  - a kRows x kPanel block of C accumulates in registers over one depth
//    block, then goes back to C (an exact F32 store), so across depth
//    blocks every element keeps one running F32 sum.
// Each C element is therefore still c, then c + a[0]*b[0], then ... in
// ascending k, every product rounded to F32 and then added (no FMA: the
// library is built with -ffp-contract=off, so not even the AVX-512 path,
// whose instruction set has FMA, fuses them), exactly what a plain i-j-k
// triple loop computes.
//
// C goes to memory and back once per depth block, which on the reference's
// whole-matrix GEMMs (so400m's 729 x 1152 x 4304) stalled the loop more
// than its multiplies: 768 deep, three times fewer round trips than 256,
// with A's row block (221 KB) still in L2 and B's packed column block
// (3 MB) in L3.
constexpr int64_t kRows = 6;
constexpr int64_t kPanel = 16;
constexpr int64_t kDepthBlock = 768;
constexpr int64_t kRowBlock = 72;       // a multiple of kRows
constexpr int64_t kColumnBlock = 1024;  // a multiple of kPanel

// Eight floats; on the default target GCC splits it into two SSE halves,
// under target("avx2") it is one YMM register.
typedef float Vec8 __attribute__((vector_size(32)));

// C[r][0..kPanel) += sum over k in [0, kc) of a[r][k] * bp[k][0..kPanel),
// for r < kRows; c has row stride ldc.
[[gnu::always_inline]] inline void MicroKernel(const float* const* a,
                                               const float* bp, int64_t kc,
                                               float* c, int64_t ldc) {
  Vec8 acc[kRows][2];
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(&acc[r][0], c + r * ldc, sizeof(Vec8));
    std::memcpy(&acc[r][1], c + r * ldc + 8, sizeof(Vec8));
  }
  const float* a0 = a[0];
  const float* a1 = a[1];
  const float* a2 = a[2];
  const float* a3 = a[3];
  const float* a4 = a[4];
  const float* a5 = a[5];
  for (int64_t k = 0; k < kc; ++k) {
    Vec8 b0, b1;
    std::memcpy(&b0, bp + k * kPanel, sizeof(Vec8));
    std::memcpy(&b1, bp + k * kPanel + 8, sizeof(Vec8));
    // acc + (a * b): the product rounds, then the sum rounds.
    acc[0][0] += b0 * a0[k];
    acc[0][1] += b1 * a0[k];
    acc[1][0] += b0 * a1[k];
    acc[1][1] += b1 * a1[k];
    acc[2][0] += b0 * a2[k];
    acc[2][1] += b1 * a2[k];
    acc[3][0] += b0 * a3[k];
    acc[3][1] += b1 * a3[k];
    acc[4][0] += b0 * a4[k];
    acc[4][1] += b1 * a4[k];
    acc[5][0] += b0 * a5[k];
    acc[5][1] += b1 * a5[k];
  }
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(c + r * ldc, &acc[r][0], sizeof(Vec8));
    std::memcpy(c + r * ldc + 8, &acc[r][1], sizeof(Vec8));
  }
}
static_assert(kRows == 6, "MicroKernel is written out for six rows");
static_assert(kPanel == 16, "MicroKernel is written out for two Vec8");

// Sixteen floats: one ZMM register under target("avx512f").
typedef float Vec16 __attribute__((vector_size(64)));

// MicroKernel with each row's panel in one Vec16: the same product and sum
// for every element, in half the instructions where AVX-512 holds a panel
// row in one register. Written out like MicroKernel: one template over the
// vector type ran the AVX2 path at a fifth of its speed.
[[gnu::always_inline]] inline void MicroKernelWide(const float* const* a,
                                                   const float* bp, int64_t kc,
                                                   float* c, int64_t ldc) {
  Vec16 acc[kRows];
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(&acc[r], c + r * ldc, sizeof(Vec16));
  }
  const float* a0 = a[0];
  const float* a1 = a[1];
  const float* a2 = a[2];
  const float* a3 = a[3];
  const float* a4 = a[4];
  const float* a5 = a[5];
  for (int64_t k = 0; k < kc; ++k) {
    Vec16 b;
    std::memcpy(&b, bp + k * kPanel, sizeof(Vec16));
    // acc + (a * b): the product rounds, then the sum rounds.
    acc[0] += b * a0[k];
    acc[1] += b * a1[k];
    acc[2] += b * a2[k];
    acc[3] += b * a3[k];
    acc[4] += b * a4[k];
    acc[5] += b * a5[k];
  }
  for (int64_t r = 0; r < kRows; ++r) {
    std::memcpy(c + r * ldc, &acc[r], sizeof(Vec16));
  }
}
static_assert(kPanel == 16, "MicroKernelWide holds a panel row in one Vec16");

// B[k0 .. k0+kc) x [j_begin, j_end) (row stride ldb) into panels: panel p
// holds columns [j_begin + p*kPanel, + kPanel) as bp[(p*kc + k)*kPanel +
// j], zero past j_end.
[[gnu::always_inline]] inline void PackB(const float* b, int64_t ldb,
                                         int64_t j_begin, int64_t j_end,
                                         int64_t k0, int64_t kc, float* bp) {
  const int64_t panels = (j_end - j_begin + kPanel - 1) / kPanel;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t j0 = j_begin + p * kPanel;
    const int64_t width = std::min(kPanel, j_end - j0);
    float* dst = bp + p * kc * kPanel;
    if (width == kPanel) {  // a constant-size copy, inlined
      for (int64_t k = 0; k < kc; ++k) {
        std::memcpy(dst + k * kPanel, b + (k0 + k) * ldb + j0,
                    kPanel * sizeof(float));
      }
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = b + (k0 + k) * ldb + j0;
      float* d = dst + k * kPanel;
      for (int64_t j = 0; j < width; ++j) d[j] = src[j];
      for (int64_t j = width; j < kPanel; ++j) d[j] = 0.0f;
    }
  }
}

// MicroKernelWide (AVX-512 hosts) or MicroKernel. A function, not a
// lambda: a lambda is not inlined into the target("avx2") caller, and its
// default-target code ran the AVX2 path at 1.7 GMAC/s instead of 53.
template <bool kWide>
[[gnu::always_inline]] inline void Micro(const float* const* a, const float* bp,
                                         int64_t kc, float* c, int64_t ldc) {
  if constexpr (kWide) {
    MicroKernelWide(a, bp, kc, c, ldc);
  } else {
    MicroKernel(a, bp, kc, c, ldc);
  }
}

// The product's operands: A [m, k] and B [k, n] read, C [m, n] summed
// into, each row-major with its own row stride.
struct Product {
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  int64_t m, k, n;
};

// kWide: MicroKernelWide for the full blocks (AVX-512 hosts).
template <bool kWide>
[[gnu::always_inline]] inline void MultiplyBody(const Product& p, float* bp) {
  const float* a = p.a;
  float* c = p.c;
  const int64_t m = p.m, k_depth = p.k, n = p.n;
  for (int64_t jb = 0; jb < n; jb += kColumnBlock) {
    const int64_t j_end = std::min(n, jb + kColumnBlock);
    const int64_t panels = (j_end - jb + kPanel - 1) / kPanel;
    for (int64_t k0 = 0; k0 < k_depth; k0 += kDepthBlock) {
      const int64_t kc = std::min(kDepthBlock, k_depth - k0);
      PackB(p.b, p.ldb, jb, j_end, k0, kc, bp);
      for (int64_t ib = 0; ib < m; ib += kRowBlock) {
        const int64_t i_end = std::min(m, ib + kRowBlock);
        for (int64_t q = 0; q < panels; ++q) {
          const int64_t j0 = jb + q * kPanel;
          const int64_t width = std::min(kPanel, j_end - j0);
          const float* panel = bp + q * kc * kPanel;
          for (int64_t i = ib; i < i_end; i += kRows) {
            const int64_t rows = std::min(kRows, i_end - i);
            // Missing rows repeat the last real one; their sums are dropped.
            const float* arows[kRows];
            for (int64_t r = 0; r < kRows; ++r) {
              arows[r] = a + (i + std::min(r, rows - 1)) * p.lda + k0;
            }
            if (rows == kRows && width == kPanel) {
              Micro<kWide>(arows, panel, kc, c + i * p.ldc + j0, p.ldc);
              continue;
            }
            // An edge block: through a full-size copy of the C block.
            float tile[kRows * kPanel] = {};
            for (int64_t r = 0; r < rows; ++r) {
              std::memcpy(tile + r * kPanel, c + (i + r) * p.ldc + j0,
                          static_cast<size_t>(width) * sizeof(float));
            }
            Micro<kWide>(arows, panel, kc, tile, kPanel);
            for (int64_t r = 0; r < rows; ++r) {
              std::memcpy(c + (i + r) * p.ldc + j0, tile + r * kPanel,
                          static_cast<size_t>(width) * sizeof(float));
            }
          }
        }
      }
    }
  }
}

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
                 int64_t k_depth, int64_t n) {
  MultiplyStrided({a, k_depth, b, n, c, n, m, k_depth, n});
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

void MultiplyF32Columns(const float* a, const float* b, float* c, int64_t m,
                        int64_t k, int64_t n, int64_t begin, int64_t end) {
  if (m <= 0 || end <= begin) return;
  for (int64_t i = 0; i < m; ++i) {
    std::fill(c + i * n + begin, c + i * n + end, 0.0f);
  }
  MultiplyStrided({a, k, b + begin, n, c + begin, n, m, k, end - begin});
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
  MultiplyF32(af, bf, cf, m, k, n);
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
  MultiplyF32(af, transposed, product.data(), m, k, n);
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
