#include "kernels/amx.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TILEC_HAVE_AMX 1
#endif

namespace tilec::kernels {

#ifdef TILEC_HAVE_AMX
namespace {

// A tile: 16 rows of 64 bytes, 32 BF16 values of k per row (A) or 16 pairs
// of k for 16 columns (B, the units' pair-interleaved layout).
constexpr int64_t kTileRows = 16;
constexpr int64_t kChunk = 32;  // k per tile
constexpr int64_t kTileValues = kTileRows * kChunk;
// C column tiles that share one pass over A: their panel of packed B
// (16 tiles x 2 KB per chunk of k) stays in the core's L2 cache while the
// rows of A go by. Measured on [1458,1152] x [1152,4304]: 2 tiles 0.66,
// 8 tiles 0.85, 16 tiles 1.1 TFLOP/s.
constexpr int64_t kGroupTiles = 16;

// Linux gives a process the tile registers on request only.
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// An operand as tiles: strips of 16 rows of A (or 16 columns of B), each
// cut into chunks of 32 k, zero past the matrix. Strips are counted even,
// so that the kernel takes them in pairs.
struct Packed {
  int64_t strips = 0, chunks = 0;
  std::vector<uint16_t> values;
  Packed(int64_t extent, int64_t k)
      : strips(2 * ((extent + 2 * kTileRows - 1) / (2 * kTileRows))),
        chunks((k + kChunk - 1) / kChunk),
        values(static_cast<size_t>(strips * chunks * kTileValues)) {}
  uint16_t* Tile(int64_t strip, int64_t chunk) {
    return values.data() + (strip * chunks + chunk) * kTileValues;
  }
  const uint16_t* Tile(int64_t strip, int64_t chunk) const {
    return values.data() + (strip * chunks + chunk) * kTileValues;
  }
};

// Lanes whose float is not a BF16 value the units read as itself: low 16
// bits set, or subnormal (exponent 0, not zero).
__attribute__((target("avx512f"))) __mmask16 Inexact(__m512i bits) {
  const __mmask16 low = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0xFFFF));
  const __mmask16 zero_exponent =
      _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));
  const __mmask16 nonzero =
      _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7FFFFFFF));
  return low | (zero_exponent & nonzero);
}

// The maskz forms: GCC 12's unmasked ones warn of an uninitialized
// register in its own header.
constexpr __mmask16 kAll = 0xFFFF;

// Each lane's high 16 bits, moved to its low half.
__attribute__((target("avx512f"))) __m512i HighHalves(__m512i bits) {
  return _mm512_maskz_srli_epi32(kAll, bits, 16);
}

__attribute__((target("avx512f"))) __mmask16 Lanes(int64_t count) {
  return count >= 16
             ? kAll
             : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1);
}

// count (<= 32) floats as 32 BF16 values, zero past count. False where one
// is inexact.
__attribute__((target("avx512f"))) bool ConvertRow(const float* src,
                                                   int64_t count,
                                                   uint16_t* dst) {
  bool exact = true;
  for (int half = 0; half < 2; ++half) {
    const __mmask16 lanes = Lanes(count - 16 * half);
    const __m512i bits = _mm512_maskz_loadu_epi32(lanes, src + 16 * half);
    exact &= Inexact(bits) == 0;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16 * half),
                        _mm512_maskz_cvtepi32_epi16(kAll, HighHalves(bits)));
  }
  return exact;
}

// Strip s of A: rows 16s.. as tiles of 32 k.
__attribute__((target("avx512f"))) bool PackRowsStrip(const float* a,
                                                      int64_t lda, int64_t m,
                                                      int64_t k, int64_t s,
                                                      Packed* out) {
  bool exact = true;
  for (int64_t c = 0; c < out->chunks; ++c) {
    uint16_t* tile = out->Tile(s, c);
    for (int64_t r = 0; r < kTileRows; ++r) {
      const int64_t row = s * kTileRows + r;
      const int64_t count = row < m ? std::min(kChunk, k - c * kChunk) : 0;
      exact &= ConvertRow(a + row * lda + c * kChunk, count, tile + r * kChunk);
    }
  }
  return exact;
}

// Strip s of B [k, n]: columns 16s.., each tile row two rows of k
// interleaved (k even in the low half of each 32-bit pair).
__attribute__((target("avx512f"))) bool PackColumnsStrip(const float* b,
                                                         int64_t ldb, int64_t k,
                                                         int64_t n, int64_t s,
                                                         Packed* out) {
  const __mmask16 lanes = Lanes(n - s * kTileRows);
  bool exact = true;
  for (int64_t c = 0; c < out->chunks; ++c) {
    uint32_t* tile = reinterpret_cast<uint32_t*>(out->Tile(s, c));
    for (int64_t r = 0; r < kTileRows; ++r) {
      const int64_t even = c * kChunk + 2 * r, odd = even + 1;
      const float* column = b + s * kTileRows;
      const __m512i lo = _mm512_maskz_loadu_epi32(
          even < k ? lanes : __mmask16{0}, column + even * ldb);
      const __m512i hi = _mm512_maskz_loadu_epi32(
          odd < k ? lanes : __mmask16{0}, column + odd * ldb);
      exact &= (Inexact(lo) | Inexact(hi)) == 0;
      const __m512i pair = _mm512_or_si512(
          HighHalves(lo),
          _mm512_and_si512(hi,
                           _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
      _mm512_storeu_si512(tile + r * kTileRows, pair);
    }
  }
  return exact;
}

// Strip s of B^T, B [n, k]: the rows 16s.. of B, each row's 32 k of a
// chunk as 16 pairs down one column of the tile.
__attribute__((target("avx512f"))) bool PackTransposedStrip(
    const float* b, int64_t ldb, int64_t k, int64_t n, int64_t s, Packed* out) {
  bool exact = true;
  uint32_t pairs[kTileRows][kTileRows];
  for (int64_t c = 0; c < out->chunks; ++c) {
    for (int64_t j = 0; j < kTileRows; ++j) {
      const int64_t row = s * kTileRows + j;
      const int64_t count = row < n ? std::min(kChunk, k - c * kChunk) : 0;
      exact &= ConvertRow(b + row * ldb + c * kChunk, count,
                          reinterpret_cast<uint16_t*>(pairs[j]));
    }
    uint32_t* tile = reinterpret_cast<uint32_t*>(out->Tile(s, c));
    for (int64_t r = 0; r < kTileRows; ++r) {
      for (int64_t j = 0; j < kTileRows; ++j) {
        tile[r * kTileRows + j] = pairs[j][r];
      }
    }
  }
  return exact;
}

// Runs work(i) for i in [0, n) on up to `threads` threads, in any order.
void OnThreads(int64_t n, int threads,
               const std::function<void(int64_t)>& work) {
  std::atomic<int64_t> next{0};
  auto run = [&] {
    for (int64_t i = next++; i < n; i = next++) work(i);
  };
  std::vector<std::thread> pool;
  const int64_t workers =
      std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1));
  for (int64_t t = 1; t < workers; ++t) pool.emplace_back(run);
  run();
  for (std::thread& t : pool) t.join();
}

__attribute__((target("amx-tile"))) void LoadTileConfig() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = kChunk * sizeof(uint16_t);
    config.rows[t] = kTileRows;
  }
  _tile_loadconfig(&config);
}

__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

// Rows 32i.. and columns 32j.. of C (strips 2i, 2i+1 of A and 2j, 2j+1 of
// B): four tiles summed over every chunk of k in order, then stored.
__attribute__((target("amx-tile,amx-bf16"))) void MultiplyBlock(
    const Packed& a, const Packed& b, int64_t i, int64_t j,
    const BlasProduct& p) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t c = 0; c < a.chunks; ++c) {
    _tile_loadd(4, a.Tile(2 * i, c), 64);
    _tile_loadd(5, a.Tile(2 * i + 1, c), 64);
    _tile_loadd(6, b.Tile(2 * j, c), 64);
    _tile_loadd(7, b.Tile(2 * j + 1, c), 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const int64_t row = 2 * kTileRows * i, column = 2 * kTileRows * j;
  const int64_t rows = std::min(2 * kTileRows, p.m - row);
  const int64_t columns = std::min(2 * kTileRows, p.n - column);
  if (rows == 2 * kTileRows && columns == 2 * kTileRows) {
    float* c = p.c + row * p.ldc + column;
    const int64_t stride = p.ldc * static_cast<int64_t>(sizeof(float));
    _tile_stored(0, c, stride);
    _tile_stored(1, c + kTileRows, stride);
    _tile_stored(2, c + kTileRows * p.ldc, stride);
    _tile_stored(3, c + kTileRows * p.ldc + kTileRows, stride);
    return;
  }
  // An edge block: through a buffer, then its part inside C.
  alignas(64) float block[2 * kTileRows][2 * kTileRows];
  constexpr int64_t kStride = 2 * kTileRows * sizeof(float);
  _tile_stored(0, &block[0][0], kStride);
  _tile_stored(1, &block[0][kTileRows], kStride);
  _tile_stored(2, &block[kTileRows][0], kStride);
  _tile_stored(3, &block[kTileRows][kTileRows], kStride);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(p.c + (row + r) * p.ldc + column, block[r],
                static_cast<size_t>(columns) * sizeof(float));
  }
}

bool Pack(const BlasProduct& p, int threads, Packed* a, Packed* b) {
  std::atomic<bool> exact{true};
  OnThreads(a->strips + b->strips, threads, [&](int64_t s) {
    if (!exact.load(std::memory_order_relaxed)) return;
    bool ok;
    if (s < a->strips) {
      ok = PackRowsStrip(p.a, p.lda, p.m, p.k, s, a);
    } else if (p.transpose_b) {
      ok = PackTransposedStrip(p.b, p.ldb, p.k, p.n, s - a->strips, b);
    } else {
      ok = PackColumnsStrip(p.b, p.ldb, p.k, p.n, s - a->strips, b);
    }
    if (!ok) exact = false;
  });
  return exact;
}

}  // namespace

bool HostHasAmxBf16() {
  static const bool has = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool avx512f = ebx & (1u << 16);
    const bool amx_bf16 = edx & (1u << 22), amx_tile = edx & (1u << 24);
    if (!avx512f || !amx_bf16 || !amx_tile) return false;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
}

bool AmxMultiply(const BlasProduct& p, int threads) {
  if (!HostHasAmxBf16()) return false;
  Packed a(p.m, p.k), b(p.n, p.k);
  if (!Pack(p, threads, &a, &b)) return false;
  // Blocks by groups of C's column tiles, then down the rows: a group's
  // panel of B is reused by every row block, a row block's tiles of A by
  // the group's columns.
  const int64_t row_blocks = a.strips / 2, column_blocks = b.strips / 2;
  const int64_t group = kGroupTiles / 2;
  const int64_t groups = (column_blocks + group - 1) / group;
  // Each unit loads the tile configuration (a thread's own state) anew:
  // a unit is thousands of tile products, the load a few hundred cycles.
  OnThreads(groups * row_blocks, threads, [&](int64_t u) {
    LoadTileConfig();
    const int64_t g = u / row_blocks, i = u % row_blocks;
    const int64_t end = std::min(column_blocks, (g + 1) * group);
    for (int64_t j = g * group; j < end; ++j) MultiplyBlock(a, b, i, j, p);
    ReleaseTiles();
  });
  return true;
}

#else

bool HostHasAmxBf16() { return false; }
bool AmxMultiply(const BlasProduct&, int) { return false; }

#endif

}  // namespace tilec::kernels
