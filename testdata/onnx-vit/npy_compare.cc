// npy_compare EXPECTED.npy ACTUAL.npy MAX_ABS MIN_COSINE
// Compares two float32 .npy files of the same element count (shapes may
// differ: tilec's [rows, width] against PyTorch's [B, T, W]) with the
// simulator's comparison (sim/simulator.h) and prints one line:
//   max_abs_err E (scale S) cosine C
// Exit 0 when max_abs_err <= MAX_ABS and cosine >= MIN_COSINE, else 1.

#include <cstdio>
#include <string>
#include <vector>

#include "sim/npy.h"
#include "sim/simulator.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: npy_compare EXPECTED ACTUAL MAX_ABS MIN_COSINE\n");
    return 2;
  }
  std::vector<int64_t> shape;
  std::vector<float> expected, actual;
  for (auto [path, data] :
       {std::pair{argv[1], &expected}, std::pair{argv[2], &actual}}) {
    tilec::Status s = tilec::kernels::ReadNpyF32(path, &shape, data);
    if (!s.ok()) {
      std::fprintf(stderr, "npy_compare: %s\n", s.message().c_str());
      return 2;
    }
  }
  if (expected.size() != actual.size()) {
    std::fprintf(stderr, "npy_compare: %zu elements against %zu\n",
                 expected.size(), actual.size());
    return 1;
  }
  const double max_abs = std::stod(argv[3]), min_cosine = std::stod(argv[4]);
  tilec::sim::Tolerance tol;
  tol.atol = 1;  // the verdict below is on absolute error and cosine only
  tol.rtol = 0;
  tol.min_cosine = min_cosine;
  const tilec::sim::Comparison c =
      tilec::sim::CompareTensors(actual, expected, tol);
  const bool pass =
      c.nonfinite == 0 && c.max_abs_err <= max_abs && c.cosine >= min_cosine;
  std::printf(
      "max_abs_err %.3g (scale %.3g, limit %g) cosine %.9f (min %g): %s\n",
      c.max_abs_err, c.scale, max_abs, c.cosine, min_cosine,
      pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
