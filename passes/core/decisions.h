// The decision log every transforming pass writes (table Decision in the
// pass log): what was tried, accepted or rejected, why, and the cycles and
// bytes on both sides. --max-decisions=N (like LLVM's -opt-bisect-limit)
// lets only the first N transforming decisions apply; later ones are logged
// as rejected "beyond --max-decisions" and the pass keeps the conservative
// form. --explain prints decisions as they are made.

#ifndef TILEC_PASSES_CORE_DECISIONS_H_
#define TILEC_PASSES_CORE_DECISIONS_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::passes {

struct Numbers {
  int64_t cycles_before = 0;
  int64_t cycles_after = 0;
  int64_t bytes_before = 0;
  int64_t bytes_after = 0;
};

// Which decisions --explain prints: none, all, or those naming one op id.
struct ExplainFilter {
  enum class Kind { kNone, kAll, kOp } kind = Kind::kNone;
  uint32_t op = 0;

  // "" (none), "all", or an op id; anything else is a usage error.
  static StatusOr<ExplainFilter> Parse(const std::string& text);
  bool Matches(const fb::DecisionT& decision) const;
};

class DecisionLog {
 public:
  // max_decisions < 0: no limit. Explained decisions go to `messages` (if
  // not null) as "<pass>: <decision>".
  explicit DecisionLog(std::string pass = "", int64_t max_decisions = -1,
                       ExplainFilter explain = {},
                       std::ostream* messages = nullptr);

  // A transforming decision that the pass wants to apply. Returns true if it
  // may (and logs it as accepted); false if the limit is reached (logged as
  // rejected with the limit as the reason, numbers unchanged).
  bool Apply(std::vector<uint32_t> ops, const std::string& action,
             const std::string& reason, const Numbers& numbers);
  // Apply for a decision the pass built itself, its reason the one it would
  // be applied for (outcome and limit_index are set here). The one place
  // the limit is checked.
  bool TryApply(fb::DecisionT decision);
  // A decision not to transform, with its reason.
  void Reject(std::vector<uint32_t> ops, const std::string& action,
              const std::string& reason, const Numbers& numbers);
  // A figure that is not a choice (what a lowering costs, a summary).
  void Info(std::vector<uint32_t> ops, const std::string& action,
            const std::string& reason, const Numbers& numbers);
  // A decision the pass built itself (e.g. a required repair: accepted but
  // not subject to the limit, limit_index 0), or one restored from a
  // checkpoint with its limit_index, as it is.
  void Record(const fb::DecisionT& decision);

  // Transforming decisions applied so far.
  int64_t applied() const { return applied_; }
  int64_t max_decisions() const { return max_decisions_; }
  // For a pass that learns its limit late (plan-ownership resuming from a
  // checkpoint that recorded one); < 0: no limit.
  void set_max_decisions(int64_t max_decisions) {
    max_decisions_ = max_decisions;
  }
  bool limited() const { return max_decisions_ >= 0; }
  bool LimitReached() const { return limited() && applied_ >= max_decisions_; }
  // Transforming decisions that may still apply; -1: no limit.
  int64_t remaining() const {
    return limited() ? std::max<int64_t>(0, max_decisions_ - applied_) : -1;
  }
  const std::vector<std::unique_ptr<fb::DecisionT>>& decisions() const {
    return decisions_;
  }
  // Moves the decisions into a pass run.
  std::unique_ptr<fb::PassRunT> TakeRun(std::vector<std::string> flags);

 private:
  void Explain(const fb::DecisionT& decision);

  std::string pass_;
  int64_t max_decisions_;
  ExplainFilter explain_;
  std::ostream* messages_;
  int64_t applied_ = 0;
  std::vector<std::unique_ptr<fb::DecisionT>> decisions_;
};

// "12,345": numbers in reasons, readable and stable.
std::string Thousands(int64_t value);
// "1 phase", "3 phases": a count with its noun.
std::string Count(int64_t n, const std::string& singular,
                  const std::string& plural = "");

}  // namespace tilec::passes

#endif  // TILEC_PASSES_CORE_DECISIONS_H_
