#include "passes/plan/price_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace tilec::plan {
namespace {

using std::chrono::steady_clock;

// Spins until `table` has `n` waiting threads or 10 s pass; whether it did.
bool UntilWaiting(const PriceTable<int>& table, int n) {
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (table.waiting() < n) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(PriceTableTest, FindsWhatWasAddedAndKeepsTheFirst) {
  PriceTable<int> table;
  EXPECT_EQ(table.Find("a"), nullptr);
  table.Add("a", 1);
  table.Add("a", 2);
  ASSERT_NE(table.Find("a"), nullptr);
  EXPECT_EQ(*table.Find("a"), 1);
  EXPECT_EQ(table.size(), 1u);
}

TEST(PriceTableTest, PricesAKeyOnceAndThenFindsIt) {
  PriceTable<int> table;
  int calls = 0;
  auto price = [&]() -> StatusOr<int> { return ++calls * 10; };
  EXPECT_EQ(*table.FindOrPrice("k", price), 10);
  EXPECT_EQ(*table.FindOrPrice("k", price), 10);
  EXPECT_EQ(calls, 1);
}

// The second thread asks while the first is pricing: it waits for that
// price (the first finishes only once the second waits), and the key is
// priced once.
TEST(PriceTableTest, AThreadAskingForAKeyBeingPricedWaitsForThatPrice) {
  PriceTable<int> table;
  std::atomic<int> calls{0};
  std::atomic<bool> started{false};
  bool second_waited = false;
  auto slow_price = [&]() -> StatusOr<int> {
    ++calls;
    started = true;
    second_waited = UntilWaiting(table, 1);
    return 7;
  };
  StatusOr<int> first = Status::Internal("unset");
  StatusOr<int> second = Status::Internal("unset");
  std::thread pricing([&] { first = table.FindOrPrice("k", slow_price); });
  while (!started) std::this_thread::yield();
  std::thread asking([&] {
    second = table.FindOrPrice("k", [&]() -> StatusOr<int> {
      ++calls;
      return 8;
    });
  });
  pricing.join();
  asking.join();
  EXPECT_TRUE(second_waited);
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, 7);
  EXPECT_EQ(*second, 7);
}

// An error is not kept: the thread that waited for it prices the key
// itself, and later asks find that price.
TEST(PriceTableTest, AFailedPriceIsMadeAgainByTheThreadThatWaited) {
  PriceTable<int> table;
  std::atomic<bool> started{false};
  auto failing = [&]() -> StatusOr<int> {
    started = true;
    UntilWaiting(table, 1);
    return Status::Internal("no price");
  };
  StatusOr<int> first = 0;
  StatusOr<int> second = 0;
  std::thread pricing([&] { first = table.FindOrPrice("k", failing); });
  while (!started) std::this_thread::yield();
  std::thread asking([&] {
    second = table.FindOrPrice("k", []() -> StatusOr<int> { return 3; });
  });
  pricing.join();
  asking.join();
  EXPECT_FALSE(first.ok());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, 3);
  ASSERT_NE(table.Find("k"), nullptr);
  EXPECT_EQ(*table.Find("k"), 3);
}

}  // namespace
}  // namespace tilec::plan
