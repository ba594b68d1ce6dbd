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

#ifdef TILEC_HAVE_AMX
namespace {

// A tile: 16 rows of 64 bytes, 32 BF16 values of k per row (A) or 16 pairs
// of k for 16 columns (B, the units' pair-interleaved layout).
constexpr int64_t kTileRows = 16;
constexpr int64_t kChunk = 32;  // k per tile
constexpr int64_t kTileValues = kTileRows * kChunk;
// C column tiles that share one pass over A: their panel of packed B (a
// 1 KB tile each per chunk of k and piece) stays in the core's L2 cache
// while the rows of A go by. Measured on [1458,1152] x [1152,4304], the
// tile products alone on one core: 2 tiles 0.66, 8 tiles 0.85, 16 tiles
// 1.1 TFLOP/s.
constexpr int64_t kGroupTiles = 16;
// The L2 cache a group's panel of B may take (Sapphire Rapids' 2 MB a
// core): k beyond it goes in blocks, C's sums kept in F32 between them.
// Measured (scripts/bench.sh gemm, F16 values on two threads): 1 MB cut
// [729,1152] x [1152,4304] in two blocks and took it from 178 to 121
// GMAC/s; [729,4304] x [4304,1152] went from 86 in one block to 130 in
// five and 121 in three.
constexpr int64_t kPanelBytes = int64_t{1} << 21;

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

// The maskz forms: GCC 12's unmasked ones warn of an uninitialized
// register in its own header.
constexpr __mmask16 kAll = 0xFFFF;

__attribute__((target("avx512f"))) __mmask16 Lanes(int64_t count) {
  return count >= 16
             ? kAll
             : static_cast<__mmask16>((1u << std::max<int64_t>(count, 0)) - 1);
}

// Lanes whose float is not a BF16 value the units read as itself: low 16
// bits set, or subnormal (exponent 0, not zero).
__attribute__((target("avx512f"))) __mmask16 NotBf16(__m512i bits) {
  const __mmask16 low = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0xFFFF));
  const __mmask16 zero_exponent =
      _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));
  const __mmask16 nonzero =
      _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7FFFFFFF));
  return low | (zero_exponent & nonzero);
}

// Piece 0 of each float: its high 16 bits, a BF16 value (the float
// truncated). Piece 1: the rest, float minus piece 0, exact in F32.
__attribute__((target("avx512f"))) __m512i Piece(__m512i bits, int piece) {
  const __m512i high =
      _mm512_and_si512(bits, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
  if (piece == 0) return high;
  return _mm512_castps_si512(_mm512_maskz_sub_ps(
      kAll, _mm512_castsi512_ps(bits), _mm512_castsi512_ps(high)));
}

// What the values of an operand seen so far need: whether one is not a
// BF16 value, one is not the sum of two (its pieces), one is not finite.
struct Qualify {
  bool two = false, neither = false, nonfinite = false;
  void Merge(const Qualify& q) {
    two |= q.two;
    neither |= q.neither;
    nonfinite |= q.nonfinite;
  }
  // The pieces the units need for every value: 1 where all are BF16
  // values, 2 where each is the sum of two and all are finite (an
  // infinity's second piece would be inf - inf), else 0.
  int Pieces() const {
    if (neither) return 0;
    if (!two) return 1;
    return nonfinite ? 0 : 2;
  }
};

__attribute__((target("avx512f"))) void Check(__m512i bits, Qualify* q) {
  const __m512i exponent = _mm512_set1_epi32(0x7F800000);
  q->nonfinite |=
      _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), exponent) != 0;
  if (NotBf16(bits) == 0) return;
  q->two = true;
  q->neither |= NotBf16(Piece(bits, 0)) != 0 || NotBf16(Piece(bits, 1)) != 0;
}

// An operand as tiles: for each piece, strips of 16 rows of A (or 16
// columns of B), each cut into chunks of 32 k, zero past the matrix.
// Strips are counted even, so that the kernel takes them in pairs. Every
// value is written when packed; piece 1 is made only where it is needed.
struct Packed {
  int64_t pieces = 1, strips = 0, chunks = 0;
  // Each piece's tiles, in storage the calling thread keeps from product
  // to product: a fresh allocation of a weight's tiles (10 MB for so400m's
  // MLP) costs more in page faults than packing it.
  std::vector<uint16_t>* storage[2];
  Packed(int64_t extent, int64_t k, std::vector<uint16_t>* first,
         std::vector<uint16_t>* second)
      : strips(2 * ((extent + 2 * kTileRows - 1) / (2 * kTileRows))),
        chunks((k + kChunk - 1) / kChunk),
        storage{first, second} {
    Reserve(0);
  }
  void Reserve(int piece) const {
    const size_t values = static_cast<size_t>(strips * chunks * kTileValues);
    if (storage[piece]->size() < values) storage[piece]->resize(values);
  }
  void AddSecondPiece() {
    Reserve(1);
    pieces = 2;
  }
  // Chunk by chunk, each chunk's strips side by side: B is packed a pair
  // of its rows at a time across every strip (PackColumnPairs).
  uint16_t* Tile(int64_t piece, int64_t strip, int64_t chunk) {
    return storage[piece]->data() + (chunk * strips + strip) * kTileValues;
  }
  const uint16_t* Tile(int64_t piece, int64_t strip, int64_t chunk) const {
    return storage[piece]->data() + (chunk * strips + strip) * kTileValues;
  }
};

// Piece `piece` of count (<= 32) floats as 32 BF16 values, zero past
// count; the floats checked into `q` unless it is null.
__attribute__((target("avx512f"))) void ConvertRow(const float* src,
                                                   int64_t count, int piece,
                                                   uint16_t* dst, Qualify* q) {
  for (int half = 0; half < 2; ++half) {
    const __m512i bits =
        _mm512_maskz_loadu_epi32(Lanes(count - 16 * half), src + 16 * half);
    if (q != nullptr) Check(bits, q);
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(dst + 16 * half),
        _mm512_maskz_cvtepi32_epi16(
            kAll, _mm512_maskz_srli_epi32(kAll, Piece(bits, piece), 16)));
  }
}

// Strip s of A: rows 16s.. as tiles of 32 k.
__attribute__((target("avx512f"))) void PackRowsStrip(const float* a,
                                                      int64_t lda, int64_t m,
                                                      int64_t k, int piece,
                                                      int64_t s, Packed* out,
                                                      Qualify* q) {
  for (int64_t c = 0; c < out->chunks; ++c) {
    uint16_t* tile = out->Tile(piece, s, c);
    for (int64_t r = 0; r < kTileRows; ++r) {
      const int64_t row = s * kTileRows + r;
      const int64_t count = row < m ? std::min(kChunk, k - c * kChunk) : 0;
      ConvertRow(a + row * lda + c * kChunk, count, piece, tile + r * kChunk,
                 q);
    }
  }
}

// Pairs [first, end) of B's rows (B [k, n]; pair q is rows 2q and 2q+1,
// zero past k) across every strip: row q % 16 of chunk q / 16's tile of
// each strip holds the pair's 16 columns interleaved (even k in the low
// half of each 32-bit word). Row by row, B is read in order.
__attribute__((target("avx512f"))) void PackColumnPairs(
    const float* b, int64_t ldb, int64_t k, int64_t n, int piece, int64_t first,
    int64_t end, Packed* out, Qualify* q) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t pair = first; pair < end; ++pair) {
    const int64_t even = 2 * pair, odd = even + 1;
    const int64_t c = pair / kTileRows, r = pair % kTileRows;
    for (int64_t s = 0; s < out->strips; ++s) {
      const __mmask16 lanes = Lanes(n - s * kTileRows);
      const float* columns = b + s * kTileRows;
      const __m512i lo =
          _mm512_maskz_loadu_epi32(even < k ? lanes : 0, columns + even * ldb);
      const __m512i hi =
          _mm512_maskz_loadu_epi32(odd < k ? lanes : 0, columns + odd * ldb);
      if (q != nullptr) {
        Check(lo, q);
        Check(hi, q);
      }
      const __m512i pair_words =
          _mm512_or_si512(_mm512_maskz_srli_epi32(kAll, Piece(lo, piece), 16),
                          _mm512_and_si512(Piece(hi, piece), high_half));
      uint32_t* tile = reinterpret_cast<uint32_t*>(out->Tile(piece, s, c));
      _mm512_storeu_si512(tile + r * kTileRows, pair_words);
    }
  }
}

// Strip s of B^T, B [n, k]: the rows 16s.. of B, each row's 32 k of a
// chunk as 16 pairs down one column of the tile.
__attribute__((target("avx512f"))) void PackTransposedStrip(
    const float* b, int64_t ldb, int64_t k, int64_t n, int piece, int64_t s,
    Packed* out, Qualify* q) {
  uint32_t pairs[kTileRows][kTileRows];
  for (int64_t c = 0; c < out->chunks; ++c) {
    for (int64_t j = 0; j < kTileRows; ++j) {
      const int64_t row = s * kTileRows + j;
      const int64_t count = row < n ? std::min(kChunk, k - c * kChunk) : 0;
      ConvertRow(b + row * ldb + c * kChunk, count, piece,
                 reinterpret_cast<uint16_t*>(pairs[j]), q);
    }
    uint32_t* tile = reinterpret_cast<uint32_t*>(out->Tile(piece, s, c));
    for (int64_t r = 0; r < kTileRows; ++r) {
      for (int64_t j = 0; j < kTileRows; ++j) {
        tile[r * kTileRows + j] = pairs[j][r];
      }
    }
  }
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

// C's sums between blocks of k, where k takes more than one: rows and
// columns padded to whole blocks of 32, row stride ld.
struct Sums {
  float* data = nullptr;
  int64_t ld = 0;
  float* Block(int64_t i, int64_t j) const {
    return data + 2 * kTileRows * (i * ld + j);
  }
};

// Tiles 0-3 hold a 32 x 32 block of C's sums: tile 0 its top left, 1 top
// right, 2 bottom left, 3 bottom right. From or to memory at `c`, `ld`
// floats a row.
__attribute__((always_inline, target("amx-tile"))) inline void LoadSums(
    const float* c, int64_t ld) {
  const int64_t stride = ld * static_cast<int64_t>(sizeof(float));
  _tile_loadd(0, c, stride);
  _tile_loadd(1, c + kTileRows, stride);
  _tile_loadd(2, c + kTileRows * ld, stride);
  _tile_loadd(3, c + kTileRows * ld + kTileRows, stride);
}

__attribute__((always_inline, target("amx-tile"))) inline void StoreSums(
    float* c, int64_t ld) {
  const int64_t stride = ld * static_cast<int64_t>(sizeof(float));
  _tile_stored(0, c, stride);
  _tile_stored(1, c + kTileRows, stride);
  _tile_stored(2, c + kTileRows * ld, stride);
  _tile_stored(3, c + kTileRows * ld + kTileRows, stride);
}

// The finished block at rows 32i.., columns 32j.. of C: in place where it
// lies wholly inside C, else through a buffer and only its part inside.
__attribute__((target("amx-tile"))) void StoreInC(int64_t i, int64_t j,
                                                  const BlasProduct& p) {
  const int64_t row = 2 * kTileRows * i, column = 2 * kTileRows * j;
  const int64_t rows = std::min(2 * kTileRows, p.m - row);
  const int64_t columns = std::min(2 * kTileRows, p.n - column);
  if (rows == 2 * kTileRows && columns == 2 * kTileRows) {
    StoreSums(p.c + row * p.ldc + column, p.ldc);
    return;
  }
  alignas(64) float block[2 * kTileRows][2 * kTileRows];
  StoreSums(&block[0][0], 2 * kTileRows);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(p.c + (row + r) * p.ldc + column, block[r],
                static_cast<size_t>(columns) * sizeof(float));
  }
}

// Rows 32i.. and columns 32j.. of C (strips 2i, 2i+1 of A and 2j, 2j+1 of
// B) over chunks [first, end) of k: four tiles, zero at the first chunk or
// else the sums so far, summed over every pair of pieces (A's piece
// outer), each over the chunks in order; then stored in the sums, or in C
// after the last chunk.
__attribute__((target("amx-tile,amx-bf16"))) void MultiplyBlock(
    const Packed& a, const Packed& b, int64_t i, int64_t j, int64_t first,
    int64_t end, const Sums& sums, const BlasProduct& p) {
  float* partial = sums.data != nullptr ? sums.Block(i, j) : nullptr;
  if (first == 0) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    LoadSums(partial, sums.ld);
  }
  for (int64_t pa = 0; pa < a.pieces; ++pa) {
    for (int64_t pb = 0; pb < b.pieces; ++pb) {
      for (int64_t c = first; c < end; ++c) {
        _tile_loadd(4, a.Tile(pa, 2 * i, c), 64);
        _tile_loadd(5, a.Tile(pa, 2 * i + 1, c), 64);
        _tile_loadd(6, b.Tile(pb, 2 * j, c), 64);
        _tile_loadd(7, b.Tile(pb, 2 * j + 1, c), 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  if (end < a.chunks) {
    StoreSums(partial, sums.ld);
  } else {
    StoreInC(i, j, p);
  }
}

// Piece `piece` of A and B (either null: not packed), on the threads;
// with non-null qualifies, what their values need, checked as they pass.
void Pack(const BlasProduct& p, int threads, int piece, Packed* a, Packed* b,
          Qualify* a_needs, Qualify* b_needs) {
  // A by strips; B^T by strips, B by ranges of its row pairs (every strip
  // at once).
  constexpr int64_t kPairsPerUnit = 16;
  const int64_t a_units = a != nullptr ? a->strips : 0;
  const int64_t pairs = b != nullptr ? b->chunks * kTileRows : 0;
  const int64_t b_units = b == nullptr ? 0
                          : p.transpose_b
                              ? b->strips
                              : (pairs + kPairsPerUnit - 1) / kPairsPerUnit;
  std::vector<Qualify> needs(static_cast<size_t>(a_units + b_units));
  const bool check = a_needs != nullptr;
  OnThreads(a_units + b_units, threads, [&](int64_t u) {
    Qualify* q = check ? &needs[static_cast<size_t>(u)] : nullptr;
    if (u < a_units) {
      PackRowsStrip(p.a, p.lda, p.m, p.k, piece, u, a, q);
    } else if (p.transpose_b) {
      PackTransposedStrip(p.b, p.ldb, p.k, p.n, piece, u - a_units, b, q);
    } else {
      const int64_t first = (u - a_units) * kPairsPerUnit;
      PackColumnPairs(p.b, p.ldb, p.k, p.n, piece, first,
                      std::min(pairs, first + kPairsPerUnit), b, q);
    }
  });
  if (!check) return;
  for (int64_t u = 0; u < a_units + b_units; ++u) {
    (u < a_units ? a_needs : b_needs)->Merge(needs[static_cast<size_t>(u)]);
  }
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
  // Piece 0 of each operand is its values truncated, whatever they need;
  // piece 1 follows where some value needs it.
  thread_local std::vector<uint16_t> kept[4];
  Packed a(p.m, p.k, &kept[0], &kept[1]), b(p.n, p.k, &kept[2], &kept[3]);
  Qualify a_needs, b_needs;
  Pack(p, threads, 0, &a, &b, &a_needs, &b_needs);
  const int a_pieces = a_needs.Pieces(), b_pieces = b_needs.Pieces();
  if (a_pieces == 0 || b_pieces == 0) return false;
  if (a_pieces == 2) a.AddSecondPiece();
  if (b_pieces == 2) b.AddSecondPiece();
  if (a_pieces == 2 || b_pieces == 2) {
    Pack(p, threads, 1, a_pieces == 2 ? &a : nullptr,
         b_pieces == 2 ? &b : nullptr, nullptr, nullptr);
  }
  // k in blocks whose panel of packed B for a group of C's column tiles
  // (kGroupTiles strips, each piece) stays in the core's L2 cache
  // (kPanelBytes), of as even a size as their number allows; in each
  // block, groups of column tiles, then down the rows: a group's panel is
  // reused by every row block, a row block's tiles of A by the group's
  // columns.
  const int64_t most = std::max<int64_t>(
      1, kPanelBytes / (kGroupTiles * b.pieces * kTileValues * 2));
  const int64_t k_blocks = (a.chunks + most - 1) / most;
  const int64_t chunks_per_block = (a.chunks + k_blocks - 1) / k_blocks;
  const int64_t row_blocks = a.strips / 2, column_blocks = b.strips / 2;
  const int64_t group = kGroupTiles / 2;
  const int64_t groups = (column_blocks + group - 1) / group;
  thread_local std::vector<float> kept_sums;
  Sums sums;
  if (k_blocks > 1) {
    sums.ld = b.strips * kTileRows;
    const size_t values = static_cast<size_t>(a.strips * kTileRows * sums.ld);
    if (kept_sums.size() < values) kept_sums.resize(values);
    sums.data = kept_sums.data();
  }
  for (int64_t first = 0; first < a.chunks; first += chunks_per_block) {
    const int64_t end = std::min(a.chunks, first + chunks_per_block);
    // Each unit loads the tile configuration (a thread's own state) anew:
    // a unit is thousands of tile products, the load a few hundred cycles.
    OnThreads(groups * row_blocks, threads, [&](int64_t u) {
      LoadTileConfig();
      const int64_t g = u / row_blocks, i = u % row_blocks;
      const int64_t last = std::min(column_blocks, (g + 1) * group);
      for (int64_t j = g * group; j < last; ++j) {
        MultiplyBlock(a, b, i, j, first, end, sums, p);
      }
      ReleaseTiles();
    });
  }
  return true;
}

#else

bool HostHasAmxBf16() { return false; }
bool AmxMultiply(const BlasProduct&, int) { return false; }

#endif

}  // namespace tilec::kernels
