// gemm_body.h's AVX-512 loop compiled with -ffp-contract=fast (BUILD), so
// that each `acc += b * a` is one fused multiply-add. Only for products
// that are exact in F32 (Product::exact_products): the fused multiply-add
// rounds once, at the sum, which is where the product and the sum round
// when the product itself is exact. The results are Gemm's bits
// (kernels_test: GemmIsBitIdenticalToAPlainLoop); the micro-kernel's
// 6 x 16 block runs about 1.4 x faster on an AVX-512 Xeon (two
// instructions a multiply-accumulate become one).

#include "kernels/gemm_body.h"

namespace tilec::kernels::gemm_body {

// Only where gemm.cc has its AVX-512 path (GCC on x86-64), its one caller.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx512f"))) void MultiplyBodyAvx512Fma(const Product& p,
                                                              float* bp) {
  MultiplyBody<true>(p, bp);
}
#endif

}  // namespace tilec::kernels::gemm_body
