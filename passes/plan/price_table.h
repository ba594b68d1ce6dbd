// Prices by key that several threads fill together (the Coster's caches,
// shared by the costers of one family: docs/planner.md, "Cost model").
//
// Each key is priced once: a thread that asks for a key another thread is
// pricing waits for that price instead of making it again. quantize-fp8
// plans two trial graphs at once, and when memory repair starts both miss
// most of the same prices at about the same time: at batch 2, about 3,000
// exchange prices (transfers, redistributions, phases) and 750 op prices
// used to be made twice.
//
// No deadlock: a thread waits only for a key that another thread is
// pricing, and a price that needed, while being made, a key whose own
// price needs it would recurse forever on one thread too.

#ifndef TILEC_PASSES_PLAN_PRICE_TABLE_H_
#define TILEC_PASSES_PLAN_PRICE_TABLE_H_

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "formats/status.h"

namespace tilec::plan {

template <typename Value>
class PriceTable {
 public:
  // The price of `key`, or null. What it points to stays valid: an entry
  // is never changed or erased.
  const Value* Find(const std::string& key) const {
    std::shared_lock lock(mutex_);
    auto it = prices_.find(key);
    return it != prices_.end() ? &it->second : nullptr;
  }

  // Adds `key` unless it is there (a price made twice is the same).
  void Add(std::string key, Value value) {
    std::unique_lock lock(mutex_);
    prices_.emplace(std::move(key), std::move(value));
  }

  // The price of `key`: the one in the table, or the one the thread pricing
  // it makes, or else `price()` (a StatusOr<Value>) made here and added. An
  // error is returned, not kept: a thread that waited for it prices the
  // key itself.
  template <typename Price>
  StatusOr<Value> FindOrPrice(const std::string& key, const Price& price) {
    if (const Value* found = Find(key)) return *found;
    {
      std::unique_lock lock(mutex_);
      while (pricing_.count(key)) {
        ++waiting_;
        priced_.wait(lock);
        --waiting_;
      }
      auto it = prices_.find(key);
      if (it != prices_.end()) return it->second;
      pricing_.insert(key);
    }
    StatusOr<Value> value = price();
    {
      std::unique_lock lock(mutex_);
      if (value.ok()) prices_.emplace(key, *value);
      pricing_.erase(key);
    }
    priced_.notify_all();
    return value;
  }

  // Calls f(key, value) for every price, in no particular order.
  template <typename F>
  void ForEach(const F& f) const {
    std::shared_lock lock(mutex_);
    for (const auto& [key, value] : prices_) f(key, value);
  }

  size_t size() const {
    std::shared_lock lock(mutex_);
    return prices_.size();
  }

  // Threads waiting now for a price another thread is making (tests).
  int waiting() const {
    std::shared_lock lock(mutex_);
    return waiting_;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::condition_variable_any priced_;
  std::unordered_map<std::string, Value> prices_;
  std::unordered_set<std::string> pricing_;  // keys being priced now
  int waiting_ = 0;
};

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_PRICE_TABLE_H_
