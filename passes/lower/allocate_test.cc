#include "passes/lower/allocate.h"

#include <gtest/gtest.h>

#include <random>

#include "formats/ir.h"

namespace tilec::lower {
namespace {

MemoryMap Tiny() {
  fb::TargetT t;
  EXPECT_TRUE(ir::LoadTarget("tiny", &t).ok());
  return MemoryMap::FromTarget(t);
}

TEST(AllocateTest, TinyMemoryMap) {
  const MemoryMap m = Tiny();
  EXPECT_EQ(m.capacity, 81920);
  EXPECT_EQ(m.base, 16384);  // the runtime's code takes element 0
  EXPECT_EQ(m.standard_end, 49152);
  EXPECT_EQ(m.ElementOf(0), 0);
  EXPECT_EQ(m.ElementOf(16384), 1);
  EXPECT_EQ(m.ElementOf(32768), 2);
  EXPECT_EQ(m.ElementStart(2), 32768);
  EXPECT_EQ(m.AlignUp(13), 16);
}

TEST(AllocateTest, DeadBuffersAreReusedAndOffsetsAligned) {
  const MemoryMap m = Tiny();
  // a [0,1], b [2,3]: b can reuse a; c [1,2] overlaps both.
  std::vector<AllocBuffer> bufs = {
      {0, 1001, 0, 1, false}, {1, 1000, 2, 3, false}, {2, 500, 1, 2, false}};
  AllocResult r;
  AllocFailure f;
  ASSERT_TRUE(AllocateTile(m, bufs, {}, &r, &f));
  EXPECT_EQ(r.offsets[0], m.base);
  EXPECT_EQ(r.offsets[2], m.base + 1008);  // after a, aligned
  EXPECT_EQ(r.offsets[1], m.base);         // a is dead by slot 2
  for (int64_t o : r.offsets) EXPECT_EQ(o % 8, 0);
  EXPECT_EQ(r.peak, m.base + 1512);
}

TEST(AllocateTest, InterleavedAndHardElementRule) {
  const MemoryMap m = Tiny();
  // A GEMM: A (left operand) must not share an element with C, which must be
  // interleaved. tiny has one interleaved element, so A goes low.
  std::vector<AllocBuffer> bufs = {{0, 4096, 0, 5, false},
                                   {1, 8192, 1, 5, true}};
  AllocResult r;
  AllocFailure f;
  ASSERT_TRUE(AllocateTile(m, bufs, {{0, 1, true}}, &r, &f));
  EXPECT_GE(r.offsets[1], m.standard_end);
  EXPECT_NE(m.ElementOf(r.offsets[0]), m.ElementOf(r.offsets[1]));
}

TEST(AllocateTest, SoftRuleSeparatesWhenItCanAndReportsWhenItCannot) {
  const MemoryMap m = Tiny();
  // Two 1 KiB binary inputs: separated into elements 0 and 1.
  std::vector<AllocBuffer> two = {{0, 1024, 0, 3, false}, {1, 1024, 0, 3, false}};
  AllocResult r;
  AllocFailure f;
  ASSERT_TRUE(AllocateTile(m, two, {{0, 1, false}}, &r, &f));
  EXPECT_NE(m.ElementOf(r.offsets[0]), m.ElementOf(r.offsets[1]));
  EXPECT_TRUE(r.soft_dropped.empty());
  // Fill the tensor elements except room for both inputs in one element: the
  // rule is dropped and reported.
  std::vector<AllocBuffer> tight = {{5, 16384 - 2048, -1, 9, false},
                                    {6, 16384, -1, 9, false},
                                    {7, m.capacity - m.standard_end, -1, 9, false},
                                    {0, 1024, 0, 3, false},
                                    {1, 1024, 0, 3, false}};
  ASSERT_TRUE(AllocateTile(m, tight, {{0, 1, false}}, &r, &f));
  EXPECT_EQ(r.soft_dropped, std::vector<int>{0});
}

TEST(AllocateTest, FailureNamesTheBufferAndLiveSet) {
  const MemoryMap m = Tiny();
  std::vector<AllocBuffer> bufs = {{3, 50000, -1, 10, false},
                                   {4, 20000, 2, 4, false}};
  AllocResult r;
  AllocFailure f;
  EXPECT_FALSE(AllocateTile(m, bufs, {}, &r, &f));
  EXPECT_EQ(f.buffer, 4);
  EXPECT_EQ(f.slot, 2);
  EXPECT_EQ(f.live, std::vector<int>{3});
  EXPECT_EQ(f.live_bytes, 50000);
  EXPECT_EQ(f.largest_gap, m.capacity - m.base - 50000);
  EXPECT_TRUE(f.element_partners.empty());
}

// A gap large enough in bytes, but only beside a live buffer whose memory
// element the new one must not share: the failure names that buffer.
TEST(AllocateTest, FailureNamesTheElementPartnerThatBlocksAGap) {
  const MemoryMap m = Tiny();
  const int64_t tensor = m.capacity - m.base;
  // Buffer 3 takes all but 4,096 B of the tiles' tensor memory; buffer 4
  // (1,024 B) fits in the rest only inside buffer 3's last element.
  std::vector<AllocBuffer> bufs = {{3, tensor - 4096, -1, 10, false},
                                   {4, 1024, 2, 4, false}};
  AllocResult r;
  AllocFailure f;
  ASSERT_GE(m.element_bytes, 8192);
  EXPECT_FALSE(AllocateTile(m, bufs, {{3, 4, true}}, &r, &f));
  EXPECT_EQ(f.buffer, 4);
  EXPECT_GE(f.largest_gap, f.bytes);
  EXPECT_EQ(f.element_partners, std::vector<int>{3});
}

// No two buffers whose lifetimes overlap share a byte.
void ExpectNoOverlap(const std::vector<AllocBuffer>& bufs,
                     const AllocResult& r) {
  for (size_t i = 0; i < bufs.size(); ++i) {
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      const bool live_together =
          bufs[i].start <= bufs[j].end && bufs[j].start <= bufs[i].end;
      const bool share = r.offsets[i] < r.offsets[j] + bufs[j].bytes &&
                         r.offsets[j] < r.offsets[i] + bufs[i].bytes;
      EXPECT_FALSE(live_together && share) << "buffers " << bufs[i].id
                                           << " and " << bufs[j].id;
    }
  }
}

// Lifetime order leaves a long-lived buffer above a short-lived one: the
// free space after the short one dies is split in two, neither part large
// enough for the next buffer. Largest first places that buffer before the
// small ones can split the memory (64 KiB of tensor memory on tiny).
TEST(AllocateTest, LargestFirstPlacesWhatLifetimeOrderFragments) {
  const MemoryMap m = Tiny();
  ASSERT_EQ(m.capacity - m.base, 65536);
  const std::vector<AllocBuffer> bufs = {{0, 16384, 0, 1, false},
                                         {1, 8192, 0, 3, false},
                                         {2, 49152, 2, 3, false}};
  AllocResult r;
  AllocFailure f;
  EXPECT_FALSE(AllocateTile(m, bufs, {}, &r, &f));
  EXPECT_EQ(f.buffer, 2);
  EXPECT_EQ(f.live_bytes, 8192);
  EXPECT_EQ(f.largest_gap, 65536 - 16384 - 8192);
  ASSERT_TRUE(AllocateTile(m, bufs, {}, &r, &f, -1, AllocOrder::kLargestFirst));
  EXPECT_EQ(r.offsets[2], m.base);
  EXPECT_EQ(r.offsets[0], m.base);  // not live beside buffer 2
  EXPECT_EQ(r.offsets[1], m.base + 49152);
  EXPECT_EQ(r.peak, m.base + 49152 + 8192);
  ExpectNoOverlap(bufs, r);
}

// Largest first keeps the rules and places data from before the program
// first, at the bottom, whatever its size.
TEST(AllocateTest, LargestFirstKeepsRulesAndDataFromBeforeTheProgram) {
  const MemoryMap m = Tiny();
  const std::vector<AllocBuffer> bufs = {{0, 1024, -1, 9, false},
                                         {1, 4096, 0, 5, false},
                                         {2, 8192, 1, 5, true},
                                         {3, 20000, 6, 8, false}};
  AllocResult r;
  AllocFailure f;
  ASSERT_TRUE(AllocateTile(m, bufs, {{1, 2, true}}, &r, &f, -1,
                           AllocOrder::kLargestFirst));
  EXPECT_EQ(r.offsets[0], m.base);
  EXPECT_GE(r.offsets[2], m.standard_end);
  EXPECT_NE(m.ElementOf(r.offsets[1]), m.ElementOf(r.offsets[2]));
  EXPECT_EQ(r.offsets[3], m.base + 1024);  // reuses what 1 and 2 held
  ExpectNoOverlap(bufs, r);
}

// Many buffers of random sizes (empty ones too) and lifetimes, with rules:
// in every order and with or without a floor, a placement that succeeds
// keeps buffers live together apart, interleaved ones in interleaved
// memory, hard partners in different elements, all below capacity.
TEST(AllocateTest, RandomPlacementsKeepEveryRule) {
  const MemoryMap m = Tiny();
  std::mt19937 rng(7);
  int placed = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<AllocBuffer> bufs;
    const int n = 5 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int64_t start = static_cast<int64_t>(rng() % 30) - 2;
      const int64_t bytes = rng() % 8 == 0 ? 0 : 1 + rng() % 3000;
      bufs.push_back({i, bytes, start, start + static_cast<int64_t>(rng() % 12),
                      rng() % 6 == 0});
    }
    std::vector<AllocRule> rules;
    for (int k = 0; k < n / 3; ++k) {
      rules.push_back({static_cast<int>(rng() % n), static_cast<int>(rng() % n),
                       rng() % 2 == 0});
    }
    for (AllocOrder order :
         {AllocOrder::kLifetime, AllocOrder::kLargestFirst}) {
      for (int64_t floor : {int64_t{-1}, m.base + 4096}) {
        AllocResult r;
        AllocFailure f;
        if (!AllocateTile(m, bufs, rules, &r, &f, floor, order)) continue;
        ++placed;
        ExpectNoOverlap(bufs, r);
        for (size_t i = 0; i < bufs.size(); ++i) {
          EXPECT_GE(r.offsets[i], m.base);
          EXPECT_LE(r.offsets[i] + bufs[i].bytes, m.capacity);
          if (bufs[i].interleaved && bufs[i].bytes > 0) {
            EXPECT_GE(r.offsets[i], m.standard_end);
          }
        }
        for (const AllocRule& rule : rules) {
          const AllocBuffer& a = bufs[rule.a];
          const AllocBuffer& b = bufs[rule.b];
          if (!rule.hard || rule.a == rule.b || a.bytes == 0 || b.bytes == 0 ||
              a.end < b.start || b.end < a.start) {
            continue;
          }
          const int64_t a0 = m.ElementOf(r.offsets[rule.a]);
          const int64_t a1 = m.ElementOf(r.offsets[rule.a] + a.bytes - 1);
          const int64_t b0 = m.ElementOf(r.offsets[rule.b]);
          const int64_t b1 = m.ElementOf(r.offsets[rule.b] + b.bytes - 1);
          EXPECT_TRUE(a1 < b0 || b1 < a0)
              << "round " << round << ": buffers " << rule.a << " and "
              << rule.b << " share an element";
        }
      }
    }
  }
  EXPECT_GT(placed, 200);  // most cases fit: the checks ran
}

}  // namespace
}  // namespace tilec::lower
