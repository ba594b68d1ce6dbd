#include "passes/lower/decision_log.h"

namespace tilec::lower {

std::string Thousands(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return value < 0 ? "-" + out : out;
}

std::string Count(int64_t n, const std::string& singular,
                  const std::string& plural) {
  return Thousands(n) + " " +
         (n == 1 ? singular : plural.empty() ? singular + "s" : plural);
}

void DecisionLog::Add(std::vector<uint32_t> ops, const std::string& action,
                      fb::Outcome outcome, const std::string& reason,
                      const Numbers& numbers) {
  auto d = std::make_unique<fb::DecisionT>();
  d->ops = std::move(ops);
  d->action = action;
  d->outcome = outcome;
  d->reason = reason;
  d->cycles_before = numbers.cycles_before;
  d->cycles_after = numbers.cycles_after;
  d->bytes_before = numbers.bytes_before;
  d->bytes_after = numbers.bytes_after;
  decisions_.push_back(std::move(d));
}

bool DecisionLog::Apply(std::vector<uint32_t> ops, const std::string& action,
                        const std::string& reason, const Numbers& numbers) {
  if (max_decisions_ >= 0 && applied_ >= max_decisions_) {
    Numbers unchanged{numbers.cycles_before, numbers.cycles_before,
                      numbers.bytes_before, numbers.bytes_before};
    Add(std::move(ops), action, fb::Outcome::Rejected,
        "beyond --max-decisions=" + std::to_string(max_decisions_) +
            " (would apply: " + reason + ")",
        unchanged);
    return false;
  }
  ++applied_;
  Add(std::move(ops), action, fb::Outcome::Accepted, reason, numbers);
  return true;
}

void DecisionLog::Reject(std::vector<uint32_t> ops, const std::string& action,
                         const std::string& reason, const Numbers& numbers) {
  Add(std::move(ops), action, fb::Outcome::Rejected, reason, numbers);
}

void DecisionLog::Info(std::vector<uint32_t> ops, const std::string& action,
                       const std::string& reason, const Numbers& numbers) {
  Add(std::move(ops), action, fb::Outcome::Info, reason, numbers);
}

std::unique_ptr<fb::PassRunT> DecisionLog::TakeRun(
    const std::string& pass, std::vector<std::string> flags) {
  auto run = std::make_unique<fb::PassRunT>();
  run->pass = pass;
  run->flags = std::move(flags);
  run->decisions = std::move(decisions_);
  decisions_.clear();
  return run;
}

}  // namespace tilec::lower
