// quantize-fp8's trial graphs priced by planning (PriceByPlanning), each
// once, by whichever thread comes to it first: the pass, which waits for a
// price another thread is making (pricing ahead itself meanwhile), or a
// thread pricing ahead the trial the pass is expected to make next, which
// never waits. A price depends on the
// graph and the repair flag alone, so the pass decides exactly as if it
// had made every price itself. Not on the FP8 values' scales and
// statistics either (the planner reads dtypes, not scales), so the thread
// pricing ahead may make prices while the pass still calibrates.

#ifndef TILEC_PASSES_QUANTIZE_TRIAL_PRICES_H_
#define TILEC_PASSES_QUANTIZE_TRIAL_PRICES_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/plan/cost.h"
#include "passes/quantize/support.h"

namespace tilec::quantize {

class TrialPrices {
 public:
  // `coster`: the pass's, which must outlive this; each price is planned
  // with a coster made from it (its caches are shared and locked), and
  // keeps its plan if `keep_plans` (PriceByPlanning).
  explicit TrialPrices(const plan::Coster& coster, bool keep_plans = false)
      : coster_(coster), keep_plans_(keep_plans) {}
  // Prices with `planner` instead of PriceByPlanning (tests: a price that
  // takes as long as the test says).
  using Planner =
      std::function<StatusOr<Priced>(const fb::ModuleT& module, bool repair)>;
  TrialPrices(const plan::Coster& coster, Planner planner)
      : coster_(coster), keep_plans_(false), planner_(std::move(planner)) {}

  // The price of `module`, planned here or by another thread (waited for).
  // While another thread plans it, `help` (if any) is called, again as long
  // as it says it priced something (true), the price is still pending and
  // helping is worth it (WorthHelping): the waiting thread prices ahead
  // meanwhile instead of idling.
  using Help = std::function<bool()>;
  StatusOr<Priced> Price(const fb::ModuleT& module, bool repair,
                         const Help& help = nullptr);

  // For a thread pricing ahead: the price if made (kKnown, in `*price`);
  // kPending while another thread makes it; otherwise, if `claim`, planned
  // here (kMadeHere, in `*price`), else kAbsent. A repaired trial is not
  // claimed once the pass decides: memory repair keeps both cores busy on
  // its own, so planning one ahead only slows the repaired price the pass
  // makes or waits for meanwhile, and for nothing where the guess that led
  // to it is wrong (so400m at batch 2, where calibration ended before the
  // pass's first repaired price was claimed: 49-52 s with such claims,
  // 44-46 s without; docs/quantize.md).
  enum class Ahead { kKnown, kPending, kMadeHere, kAbsent };
  Ahead PriceAhead(const fb::ModuleT& module, bool repair, bool claim,
                   std::optional<StatusOr<Priced>>* price);

  // Counts every price claimed or made: a thread that found nothing to
  // price ahead waits for it to change (WaitForChange).
  int64_t version() const;
  // Returns once version() is not `seen` or Stop() was called.
  void WaitForChange(int64_t seen);
  // Pricing ahead ends: waiting threads return, stopped() is true.
  void Stop();
  bool stopped() const;
  // The pass has calibrated and makes its decisions from now on.
  void PassDeciding();
  bool pass_deciding() const;

 private:
  // Everything the price depends on: the module's bytes, but for the
  // FP8 scales and statistics, and the flag.
  static std::string Key(const fb::ModuleT& module, bool repair);
  // Plans the claimed `key` and publishes its price.
  StatusOr<Priced> Make(const std::string& key, const fb::ModuleT& module,
                        bool repair);
  // Whether a thread waiting for the pending `key` should price ahead
  // meanwhile (with the lock held). Not for a repaired price: memory
  // repair keeps both cores busy on its own. Before any plan is made (the
  // unquantized graph's, which the first trial follows whatever its
  // price), yes. Otherwise only while plans are short (kLongestPlanHelped)
  // and less than half as long has passed since this one's planning began
  // as the last plan took: a trial priced ahead takes about as long, and
  // where the guess is wrong it holds the waiting thread back past the
  // price it waits for.
  bool WorthHelping(const std::string& key, bool repair) const;
  // Measured on so400m: helping took the MLP block's quantize-fp8 from
  // 1.7 s to 1.25 s and one layer's from 3.3 s to 3.0 s and left the whole
  // model at batch 1 and 2 unchanged, but made batch 8 (plans of seconds
  // each, guesses often wrong) 38 % slower, and still 7 % with the other
  // limits; with this one it is unchanged.
  static constexpr std::chrono::milliseconds kLongestPlanHelped{1000};

  const plan::Coster& coster_;
  const bool keep_plans_;
  const Planner planner_;  // none: PriceByPlanning
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // By Key; nullopt while being made.
  std::unordered_map<std::string, std::optional<StatusOr<Priced>>> prices_;
  int64_t version_ = 0;
  using Clock = std::chrono::steady_clock;
  std::unordered_map<std::string, Clock::time_point> started_;  // by Key
  std::optional<Clock::duration> last_plan_;  // unrepaired, the last made
  bool stopped_ = false;
  bool pass_deciding_ = false;
};

}  // namespace tilec::quantize

#endif  // TILEC_PASSES_QUANTIZE_TRIAL_PRICES_H_
