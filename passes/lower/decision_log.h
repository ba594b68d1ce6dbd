// Decisions of a lowering pass, for the module's pass log (table Decision):
// what was tried, accepted or rejected, why, and the cycles and bytes on
// both sides. --max-decisions=N (like LLVM's -opt-bisect-limit) lets only
// the first N transforming decisions apply; later ones are logged as
// rejected "beyond --max-decisions", and the conservative lowering is used.

#ifndef TILEC_PASSES_LOWER_DECISION_LOG_H_
#define TILEC_PASSES_LOWER_DECISION_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"

namespace tilec::lower {

struct Numbers {
  int64_t cycles_before = 0;
  int64_t cycles_after = 0;
  int64_t bytes_before = 0;
  int64_t bytes_after = 0;
};

class DecisionLog {
 public:
  // max_decisions < 0: no limit.
  explicit DecisionLog(int64_t max_decisions = -1)
      : max_decisions_(max_decisions) {}

  // A transforming decision that the pass wants to apply. Returns true if it
  // may (and logs it as accepted); false if the limit is reached (logged as
  // rejected with the limit as the reason, numbers unchanged).
  bool Apply(std::vector<uint32_t> ops, const std::string& action,
             const std::string& reason, const Numbers& numbers);
  // A decision not to transform, with its reason.
  void Reject(std::vector<uint32_t> ops, const std::string& action,
              const std::string& reason, const Numbers& numbers);
  // A figure that is not a choice (what a lowering costs, a summary).
  void Info(std::vector<uint32_t> ops, const std::string& action,
            const std::string& reason, const Numbers& numbers);

  int64_t applied() const { return applied_; }
  bool limited() const { return max_decisions_ >= 0; }
  const std::vector<std::unique_ptr<fb::DecisionT>>& decisions() const {
    return decisions_;
  }
  // Moves the decisions into a pass run.
  std::unique_ptr<fb::PassRunT> TakeRun(const std::string& pass,
                                        std::vector<std::string> flags);

 private:
  void Add(std::vector<uint32_t> ops, const std::string& action,
           fb::Outcome outcome, const std::string& reason,
           const Numbers& numbers);

  int64_t max_decisions_;
  int64_t applied_ = 0;
  std::vector<std::unique_ptr<fb::DecisionT>> decisions_;
};

// "12,345": numbers in reasons, readable and stable.
std::string Thousands(int64_t value);
// "1 phase", "3 phases": a count with its noun.
std::string Count(int64_t n, const std::string& singular,
                  const std::string& plural = "");

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_DECISION_LOG_H_
