#include "kernels/blas.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <string>

#include "kernels/amx.h"

namespace tilec::kernels {
namespace {

// About this many rows or columns of C per block: big enough that packing
// the other operand again for each block costs a few percent at most.
constexpr int64_t kBlock = 256;

// OpenBLAS's threads off, as the process starts: threads here take whole
// blocks (blas.h, "Determinism"), each calling OpenBLAS on one thread. Its
// pthread build starts its pool as the library loads, and a pool thread
// waits for work spinning on sched_yield for about 0.1 s before it sleeps,
// on the core the tool's own second thread needs: in every tool that links
// this file, whether it multiplies or not (a profile of inspect-program on
// the MLP block's program: a fifth of its samples). So the pool is stopped
// here. blas_thread_shutdown_ is exported by OpenBLAS's threaded builds
// (its own fork handler calls it); weak, so that a build without a pool
// (the serial one) links and runs without it. One thread set first, the
// pool is not started again.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

[[maybe_unused]] const bool kOneBlasThread = [] {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
  return true;
}();

Status Check(const BlasProduct& p) {
  auto fail = [&](const std::string& what) {
    return Status::BadInput("BLAS product [" + std::to_string(p.m) + "," +
                            std::to_string(p.k) + "] x [" +
                            std::to_string(p.k) + "," + std::to_string(p.n) +
                            "]: " + what);
  };
  if (p.m < 0 || p.k < 0 || p.n < 0) return fail("a negative dimension");
  const int64_t b_row = p.transpose_b ? p.k : p.n;
  if (p.lda < p.k || p.ldb < b_row || p.ldc < p.n) {
    return fail("a row stride shorter than its row (lda " +
                std::to_string(p.lda) + ", ldb " + std::to_string(p.ldb) +
                ", ldc " + std::to_string(p.ldc) + ")");
  }
  for (int64_t v : {p.m, p.k, p.n, p.lda, p.ldb, p.ldc}) {
    if (v > INT_MAX) return fail("larger than OpenBLAS's 32-bit integers");
  }
  return Status::Ok();
}

void Call(const BlasProduct& p) {
  if (p.m == 0 || p.n == 0) return;
  if (p.k == 0) {  // an empty sum; OpenBLAS would refuse lda = 0
    for (int64_t i = 0; i < p.m; ++i) {
      std::fill(p.c + i * p.ldc, p.c + i * p.ldc + p.n, 0.0f);
    }
    return;
  }
  // OpenBLAS wants every leading dimension at least 1.
  auto ld = [](int64_t v) { return static_cast<int>(std::max<int64_t>(v, 1)); };
  cblas_sgemm(CblasRowMajor, CblasNoTrans,
              p.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(p.m),
              static_cast<int>(p.n), static_cast<int>(p.k), 1.0f, p.a,
              ld(p.lda), p.b, ld(p.ldb), 0.0f, p.c, ld(p.ldc));
}

// Products of FP8, BF16 and F16 values on the host's matrix units where
// it has them (kernels/amx.h), several times OpenBLAS's speed.
bool OnMatrixUnits(const BlasProduct& p, int threads) {
  if (p.m == 0 || p.n == 0 || p.k == 0) return false;
  return AmxMultiply(p, threads);
}

}  // namespace

Status BlasMultiply(const BlasProduct& p) {
  TILEC_RETURN_IF_ERROR(Check(p));
  if (OnMatrixUnits(p, 1)) return Status::Ok();
  Call(p);
  return Status::Ok();
}

Status BlasMultiplyParallel(const BlasProduct& p, int threads) {
  TILEC_RETURN_IF_ERROR(Check(p));
  if (p.m == 0 || p.n == 0) return Status::Ok();
  if (OnMatrixUnits(p, threads)) return Status::Ok();
  // Blocks along C's longer side, about kBlock each, as a rule an even
  // number of them (two threads, the default, get equal shares), multiples
  // of 16 (a vector of the widest kernels) but the last.
  const bool by_rows = p.m > p.n;
  const int64_t extent = by_rows ? p.m : p.n;
  const int64_t count = 2 * ((extent + 2 * kBlock - 1) / (2 * kBlock));
  const int64_t size =
      std::max<int64_t>(16, ((extent + count - 1) / count + 15) / 16 * 16);
  const int64_t blocks = (extent + size - 1) / size;
  auto block = [&](int64_t i) {
    BlasProduct q = p;
    const int64_t begin = i * size, len = std::min(size, extent - begin);
    if (by_rows) {
      q.m = len;
      q.a += begin * p.lda;
      q.c += begin * p.ldc;
    } else {
      q.n = len;
      q.b += p.transpose_b ? begin * p.ldb : begin;
      q.c += begin;
    }
    Call(q);
  };
  OnThreads(blocks, threads, block);
  return Status::Ok();
}

}  // namespace tilec::kernels
