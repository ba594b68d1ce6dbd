#include "passes/quantize/trial_prices.h"

#include <exception>
#include <memory>

#include "flatbuffers/flatbuffers.h"
#include "formats/ir.h"

namespace tilec::quantize {

std::string TrialPrices::Key(const fb::ModuleT& module, bool repair) {
  std::unique_ptr<fb::ModuleT> plain = ir::CloneModule(module);
  for (auto& v : plain->values) {
    v->fp8_scale_exp = 0;
    v->fp8_amax = 0;
    v->fp8_saturated = 0;
    v->fp8_flushed = 0;
  }
  flatbuffers::FlatBufferBuilder builder;
  builder.Finish(fb::Module::Pack(builder, plain.get()));
  std::string key(reinterpret_cast<const char*>(builder.GetBufferPointer()),
                  builder.GetSize());
  key += repair ? 'r' : 'g';
  return key;
}

StatusOr<Priced> TrialPrices::Make(const std::string& key,
                                   const fb::ModuleT& module, bool repair) {
  // An exception would leave the price pending (and end the program in a
  // thread pricing ahead): it becomes the price's error.
  StatusOr<Priced> price = Status::Internal("not priced");
  const Clock::time_point start = Clock::now();
  {
    std::lock_guard lock(mutex_);
    started_[key] = start;
  }
  try {
    price = planner_ ? planner_(module, repair)
                     : PriceByPlanning(module, coster_, repair, keep_plans_);
  } catch (const std::exception& e) {
    price = Status::Internal(std::string("pricing a trial: ") + e.what());
  }
  {
    std::lock_guard lock(mutex_);
    prices_[key] = price;
    ++version_;
    if (!repair) last_plan_ = Clock::now() - start;
  }
  changed_.notify_all();
  return price;
}

bool TrialPrices::WorthHelping(const std::string& key, bool repair) const {
  if (repair) return false;
  if (!last_plan_) return true;
  if (*last_plan_ > kLongestPlanHelped) return false;
  auto it = started_.find(key);
  return it == started_.end() || 2 * (Clock::now() - it->second) < *last_plan_;
}

StatusOr<Priced> TrialPrices::Price(const fb::ModuleT& module, bool repair,
                                    const Help& help) {
  const std::string key = Key(module, repair);
  {
    std::unique_lock lock(mutex_);
    auto [it, claimed] = prices_.try_emplace(key);
    if (!claimed) {
      // The entry stays where it is while others are added; the iterator
      // may not.
      const std::optional<StatusOr<Priced>>* made = &it->second;
      bool helped = static_cast<bool>(help);
      while (helped && !made->has_value() && WorthHelping(key, repair)) {
        lock.unlock();
        helped = help();
        lock.lock();
      }
      changed_.wait(lock, [made] { return made->has_value(); });
      return **made;
    }
    ++version_;
  }
  changed_.notify_all();
  return Make(key, module, repair);
}

TrialPrices::Ahead TrialPrices::PriceAhead(
    const fb::ModuleT& module, bool repair, bool claim,
    std::optional<StatusOr<Priced>>* price) {
  const std::string key = Key(module, repair);
  {
    std::lock_guard lock(mutex_);
    auto it = prices_.find(key);
    if (it != prices_.end()) {
      if (!it->second) return Ahead::kPending;
      *price = *it->second;
      return Ahead::kKnown;
    }
    if (!claim || (repair && pass_deciding_)) return Ahead::kAbsent;
    prices_.try_emplace(key);
    ++version_;
  }
  changed_.notify_all();
  *price = Make(key, module, repair);
  return Ahead::kMadeHere;
}

int64_t TrialPrices::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

void TrialPrices::WaitForChange(int64_t seen) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return stopped_ || version_ != seen; });
}

void TrialPrices::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopped_ = true;
  }
  changed_.notify_all();
}

bool TrialPrices::stopped() const {
  std::lock_guard lock(mutex_);
  return stopped_;
}

void TrialPrices::PassDeciding() {
  std::lock_guard lock(mutex_);
  pass_deciding_ = true;
}

bool TrialPrices::pass_deciding() const {
  std::lock_guard lock(mutex_);
  return pass_deciding_;
}

}  // namespace tilec::quantize
