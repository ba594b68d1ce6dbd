// F32 matrix products on Intel AMX (the matrix units of Sapphire Rapids
// and later Xeons), for BLAS products (kernels/blas.h) whose operands the
// units can take: BF16 values (every FP8 value, E4M3 or E5M2 with any
// scale exponent of the IR, is one), or values that are each the sum of
// two BF16 values, their high 16 bits and the rest (every F16 value is,
// with its 11 significant bits). An operand of such sums goes to the units as
// both pieces (the product of two such operands as four products of pieces, k
// four times over), so the units multiply the reference's FP8 and F16
// GEMMs that no contract holds to the k order.
//
// Numbers. A product of two BF16 values is exact in F32 (8 + 8 significant
// bits), and TDPBF16PS sums the products in F32, in an order of its own
// (neither the k order nor pairs in k order: measured), so the result is
// the exact product to F32 summation error: |error| <= gamma_K * sum_p
// |a_ip b_pj| with K the number of products summed (k, 2k or 4k), not bit
// for bit OpenBLAS's. The units treat BF16 subnormal inputs and F32
// subnormal results as zero: an operand with a subnormal value or piece
// does not qualify, and a result below 2^-126 in magnitude may come out
// as zero (an absolute error under 2^-126).
//
// Determinism. Each C element sums the pieces' products in the same order
// (A's piece outer, B's inner, k in the same 32-wide chunks), whichever
// thread computes it: the same bytes on any thread count (on hosts with
// AMX; elsewhere OpenBLAS multiplies).

#ifndef TILEC_KERNELS_AMX_H_
#define TILEC_KERNELS_AMX_H_

#include <cstdint>
#include <functional>

#include "kernels/blas.h"

namespace tilec::kernels {

// Whether the host has AMX-BF16 and the kernel lets this process use it
// (asked once).
bool HostHasAmxBf16();

// C = A * B (or A * B^T) of a product that passed blas.cc's checks, with k
// >= 1, on up to `threads` threads. False, with C untouched, when the host
// has no AMX-BF16 or an operand holds a value the units cannot take (not
// the sum of its high 16 bits and a BF16 rest, a subnormal value or piece, or
// an infinity or NaN among values of two pieces).
bool AmxMultiply(const BlasProduct& p, int threads);

// Runs work(i) for i in [0, n) on up to `threads` threads (the caller's
// among them), each taking the next i when free: the BLAS path's blocks.
void OnThreads(int64_t n, int threads,
               const std::function<void(int64_t)>& work);

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_AMX_H_
