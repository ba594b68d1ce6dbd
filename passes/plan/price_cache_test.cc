#include "passes/plan/price_cache.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "flatbuffers/flatbuffers.h"
#include "formats/ir.h"
#include "formats/price_cache_generated.h"
#include "passes/plan/planner.h"
#include "passes/plan/test_modules.h"

namespace tilec::plan {
namespace {

std::string Bytes(const flatbuffers::FlatBufferBuilder& b) {
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()),
                     b.GetSize());
}

// plan-ownership of `m` with `common`, packed.
std::string Planned(const fb::ModuleT& m, passes::PassOptions common) {
  std::unique_ptr<fb::ModuleT> copy = ir::CloneModule(m);
  PlannerOptions options;
  options.attempts = 16;
  PlanOwnershipPass pass(options, std::move(common));
  StatusOr<bool> ran = pass.Run(copy.get());
  EXPECT_TRUE(ran.ok()) << ran.status().message();
  flatbuffers::FlatBufferBuilder b;
  b.Finish(fb::Module::Pack(b, copy.get()));
  return Bytes(b);
}

// --price_cache's hooks: `taken` the saved prices, `*saved` what the pass
// saves.
passes::PassOptions PriceCache(std::string* saved, std::string taken = "") {
  passes::PassOptions common;
  common.saved_prices = std::move(taken);
  common.price_cache_name = "test.tilec-prices";
  common.save_prices = [saved](std::string bytes) {
    *saved = std::move(bytes);
    return Status::Ok();
  };
  return common;
}

Coster TinyCoster(PriceOptions options = {}) {
  fb::TargetT target;
  EXPECT_TRUE(ir::LoadTarget("tiny", &target).ok());
  return Coster::Create(target, options).value();
}

class PriceCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    module_ = TinyBlocks(2, /*repeat=*/true);
    cold_ = Planned(module_, PriceCache(&saved_));
    ASSERT_FALSE(saved_.empty());
  }

  fb::ModuleT module_;
  std::string cold_;   // the plan made without saved prices
  std::string saved_;  // the prices it saved
};

TEST_F(PriceCacheTest, APlanThatTakesSavedPricesIsTheSameBytes) {
  std::string again;
  EXPECT_EQ(Planned(module_, PriceCache(&again, saved_)), cold_);
  // It saved every price it was given, and those it made besides (exact
  // prices where it took bounds before).
  const Coster given = TinyCoster(), kept = TinyCoster();
  ASSERT_EQ(TakePrices(saved_, given), std::nullopt);
  ASSERT_EQ(TakePrices(again, kept), std::nullopt);
  EXPECT_GE(kept.cached_transfers(), given.cached_transfers());
  EXPECT_GE(kept.cached_prices(), given.cached_prices());
}

TEST_F(PriceCacheTest, SavedPricesComeBackAsTheyWere) {
  const Coster coster = TinyCoster();
  EXPECT_EQ(TakePrices(saved_, coster), std::nullopt);
  EXPECT_GT(coster.cached_transfers(), 0u);
  // Every field of every price, per-tile lists included: saved again, the
  // same bytes.
  EXPECT_EQ(SavePrices(coster), saved_);
}

TEST_F(PriceCacheTest, TakesNoneFromAnotherBuildTargetOrGemmDType) {
  auto refusal = [](std::string_view bytes, const Coster& coster) {
    const std::optional<std::string> why = TakePrices(bytes, coster);
    EXPECT_EQ(coster.cached_transfers(), 0u) << "took prices it refused";
    return why.value_or("taken");
  };
  EXPECT_EQ(refusal("not prices at all", TinyCoster()),
            "not a price cache (or a damaged one)");
  EXPECT_EQ(refusal(saved_.substr(0, saved_.size() / 2), TinyCoster()),
            "not a price cache (or a damaged one)");

  std::string other_build = saved_;
  const size_t at = other_build.find(kPriceFingerprint);
  ASSERT_NE(at, std::string::npos);
  other_build[at] = other_build[at] == '0' ? '1' : '0';
  EXPECT_EQ(refusal(other_build, TinyCoster()),
            "saved by another build of tilec");

  fb::TargetT ipu;
  ASSERT_TRUE(ir::LoadTarget("ipu21", &ipu).ok());
  EXPECT_EQ(refusal(saved_, Coster::Create(ipu, {}).value()),
            "saved for another target");
  EXPECT_EQ(refusal(saved_, TinyCoster({.gemm_dtype = fb::DType::FP8E4M3})),
            "saved for another --gemm_dtype");
}

TEST_F(PriceCacheTest, APassSaysWhyItTakesNoPrices) {
  std::ostringstream messages;
  std::string saved;
  passes::PassOptions common = PriceCache(&saved, "not prices at all");
  common.messages = &messages;
  // The output does not depend on it.
  EXPECT_EQ(Planned(module_, common), cold_);
  EXPECT_EQ(messages.str().substr(0, messages.str().find('\n') + 1),
            "plan-ownership: price cache test.tilec-prices not taken (not a "
            "price cache (or a damaged one)): every price is made afresh\n");
  // And saved a cache that is taken.
  EXPECT_EQ(TakePrices(saved, TinyCoster()), std::nullopt);
}

// A cache for `coster` of a flag and a price of bytes per tile naming list
// `index`, with one list of `tiles` tiles.
std::string HandMade(const Coster& coster, int32_t index, uint32_t tiles) {
  flatbuffers::FlatBufferBuilder t;
  t.Finish(fb::Target::Pack(t, &coster.target()));
  const std::vector<uint8_t> target(t.GetBufferPointer(),
                                    t.GetBufferPointer() + t.GetSize());
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::SavedFlag>> flags = {
      fb::CreateSavedFlag(b, b.CreateString("a"), true)};
  std::vector<flatbuffers::Offset<fb::SavedTileBytes>> bytes = {
      fb::CreateSavedTileBytes(b, b.CreateString("b"), index)};
  const auto tables =
      fb::CreateSavedPriceTablesDirect(b, nullptr, nullptr, &flags, &bytes);
  const std::vector<int32_t> values = {7};
  const std::vector<uint32_t> runs = {tiles};
  std::vector<flatbuffers::Offset<fb::TileRuns>> lists = {
      fb::CreateTileRunsDirect(b, &values, nullptr, &runs)};
  b.Finish(fb::CreatePriceCacheDirect(b, kPriceFingerprint, &target, -1, tables,
                                      0, &lists),
           fb::PriceCacheIdentifier());
  return Bytes(b);
}

TEST(PriceCacheFileTest, TakesNothingFromACacheWithABadPerTileList) {
  const Coster coster = TinyCoster();
  const std::string nothing = SavePrices(TinyCoster());
  const uint32_t tiles = static_cast<uint32_t>(coster.tiles());
  EXPECT_EQ(TakePrices(HandMade(coster, 0, tiles + 1), coster),
            "a per-tile list of " + std::to_string(tiles + 1) + " tiles, not " +
                std::to_string(tiles));
  EXPECT_EQ(SavePrices(coster), nothing);
  // Read after the flag: not even the flag is taken.
  EXPECT_EQ(TakePrices(HandMade(coster, 1, tiles), coster),
            "a price naming per-tile list 1 of 1");
  EXPECT_EQ(SavePrices(coster), nothing);
  EXPECT_EQ(TakePrices(HandMade(coster, 0, tiles), coster), std::nullopt);
  EXPECT_NE(SavePrices(coster), nothing);
}

}  // namespace
}  // namespace tilec::plan
