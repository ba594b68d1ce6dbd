// Host speed of the GEMM kernel on the per-tile shapes of the SigLIP MLP
// (the simulator's hot loop) and on the reference executor's whole-layer
// shapes, and of the BLAS path (OpenBLAS, the matrix units) on the latter; then
// the host's slower code paths on one shape. Run: bazel run -c opt
// //kernels:gemm_benchmark (the default build already uses -O2).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>
#include <vector>

#include "kernels/amx.h"
#include "kernels/blas.h"
#include "kernels/kernels.h"

namespace tilec::kernels {
namespace {

void Bench(DType in, int64_t m, int64_t k, int64_t n, int reps) {
  std::vector<uint8_t> a(m * k * DTypeBytes(in)), b(k * n * DTypeBytes(in));
  std::vector<uint8_t> c(m * n * 4);
  // Ordinary numbers (raw byte patterns would make F32 denormals, which
  // are slow on the host and never seen in a real model).
  const int w = DTypeBytes(in);
  for (size_t i = 0; i < a.size() / w; ++i) {
    StoreAs(in, 0.25f * static_cast<float>(i % 37) - 4.0f, 0, &a[i * w]);
  }
  for (size_t i = 0; i < b.size() / w; ++i) {
    StoreAs(in, 0.125f * static_cast<float>(i % 41) - 2.5f, 0, &b[i * w]);
  }
  const Operand ao{a.data(), a.size(), in, 0};
  const Operand bo{b.data(), b.size(), in, 0};
  const Operand co{c.data(), c.size(), DType::kF32, 0};
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    Status s = Gemm(ao, bo, co, m, k, n, r > 0);
    if (!s.ok()) {
      std::printf("error: %s\n", s.message().c_str());
      return;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  const double macs = double(m) * k * n * reps;
  std::printf("%-8s M%-4lld K%-4lld N%-4lld %6.2f GMAC/s  %6.2f GFLOP/s\n",
              std::string(DTypeName(in)).c_str(), (long long)m, (long long)k,
              (long long)n, macs / seconds * 1e-9, 2 * macs / seconds * 1e-9);
}

// The values a BLAS product multiplies, which choose its path: F32 values
// (OpenBLAS), or FP8 or F16 values (the matrix units, where the host has
// AMX: kernels/amx.h).
enum class Values { kF32, kFp8, kF16 };

float Value(Values values, size_t i, float step, int spread) {
  const float v = step * static_cast<float>(i % spread) - 4.0f;
  switch (values) {
    case Values::kF32:
      return v * 1.0001f;  // every bit of the significand
    case Values::kFp8:
      return v;  // a few significant bits
    case Values::kF16:
      return v + static_cast<float>(i % 7) / 1024;  // 11 significant bits
  }
  return v;
}

void BenchBlas(int64_t m, int64_t k, int64_t n, int threads, Values values) {
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = Value(values, i, 0.25f, 37);
  for (size_t i = 0; i < b.size(); ++i) b[i] = Value(values, i, 0.125f, 41);
  BlasProduct p;
  p.m = m, p.k = k, p.n = n;
  p.a = a.data(), p.lda = k;
  p.b = b.data(), p.ldb = n;
  p.c = c.data(), p.ldc = n;
  // Once untimed: the first calls allocate OpenBLAS's buffers.
  if (Status s = BlasMultiplyParallel(p, threads); !s.ok()) {
    std::printf("error: %s\n", s.message().c_str());
    return;
  }
  // The fastest of five: one product is milliseconds, and a neighbour's
  // burst on the shared host shows in any one of them.
  double seconds = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    (void)BlasMultiplyParallel(p, threads);
    seconds = std::min(seconds, std::chrono::duration<double>(
                                    std::chrono::steady_clock::now() - start)
                                    .count());
  }
  const double macs = double(m) * k * n;
  const bool units = values != Values::kF32 && HostHasAmxBf16();
  const char* name = values == Values::kF32   ? "f32"
                     : values == Values::kFp8 ? "fp8"
                                              : "f16";
  std::printf(
      "blas %s on %-8s M%-4lld K%-4lld N%-4lld %7.2f GMAC/s  %7.2f GFLOP/s  "
      "(%d thread%s)\n",
      name, units ? "amx" : "openblas", (long long)m, (long long)k,
      (long long)n, macs / seconds * 1e-9, 2 * macs / seconds * 1e-9, threads,
      threads == 1 ? "" : "s");
}

}  // namespace
}  // namespace tilec::kernels

int main() {
  using tilec::kernels::DType;
  tilec::kernels::Bench(DType::kFp8E4M3, 82, 192, 160, 300);
  tilec::kernels::Bench(DType::kFp8E4M3, 122, 160, 128, 300);
  tilec::kernels::Bench(DType::kF16, 82, 192, 160, 300);
  tilec::kernels::Bench(DType::kF32, 82, 192, 160, 300);
  tilec::kernels::Bench(DType::kF32, 7, 13, 21, 100000);
  // The reference executor's shapes: one thread's half of the so400m MLP
  // up- and down-projections (sim/reference_ops.cc splits rows of FP8
  // GEMMs)...
  tilec::kernels::Bench(DType::kF32, 365, 1152, 4304, 1);
  tilec::kernels::Bench(DType::kF32, 365, 4304, 1152, 1);
  // ... and the same on the BLAS path, which multiplies the reference's
  // other GEMMs: one thread's half, then the whole product on two threads,
  // with F32 values (OpenBLAS) and with FP8 and F16 values (the matrix
  // units where the host has AMX, else OpenBLAS).
  using tilec::kernels::Values;
  for (Values values : {Values::kF32, Values::kFp8, Values::kF16}) {
    tilec::kernels::BenchBlas(365, 1152, 4304, 1, values);
    tilec::kernels::BenchBlas(365, 4304, 1152, 1, values);
    tilec::kernels::BenchBlas(729, 1152, 4304, 2, values);
    tilec::kernels::BenchBlas(729, 4304, 1152, 2, values);
  }
  // The slower code paths on the first shape, each labelled, so a path the
  // host does not pick by itself stays measured (a path that only the
  // tests exercise can lose its speed unseen).
  using tilec::kernels::GemmPath;
  for (const auto& [path, name, reps] :
       {std::tuple{GemmPath::kAvx2, "avx2 or slower path:", 300},
        std::tuple{GemmPath::kPortable, "portable path:", 10}}) {
    tilec::kernels::UseGemmPathForTesting(path);
    std::printf("%s ", name);
    std::fflush(stdout);
    tilec::kernels::Bench(DType::kFp8E4M3, 82, 192, 160, reps);
  }
  tilec::kernels::UseGemmPathForTesting(GemmPath::kFastest);
  return 0;
}
