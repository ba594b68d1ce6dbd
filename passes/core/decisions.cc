#include "passes/core/decisions.h"

#include <algorithm>
#include <charconv>

#include "formats/print.h"

namespace tilec::passes {

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

StatusOr<ExplainFilter> ExplainFilter::Parse(const std::string& text) {
  ExplainFilter filter;
  if (text.empty()) return filter;
  if (text == "all") {
    filter.kind = Kind::kAll;
    return filter;
  }
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, filter.op);
  if (ec != std::errc() || ptr != end) {
    return Status::BadInput("--explain=" + text +
                            ": expected 'all' (or a bare --explain) or an op id");
  }
  filter.kind = Kind::kOp;
  return filter;
}

bool ExplainFilter::Matches(const fb::DecisionT& decision) const {
  switch (kind) {
    case Kind::kNone:
      return false;
    case Kind::kAll:
      return true;
    case Kind::kOp:
      return std::find(decision.ops.begin(), decision.ops.end(), op) !=
             decision.ops.end();
  }
  return false;
}

DecisionLog::DecisionLog(std::string pass, int64_t max_decisions,
                         ExplainFilter explain, std::ostream* messages)
    : pass_(std::move(pass)),
      max_decisions_(max_decisions),
      explain_(explain),
      messages_(messages) {}

void DecisionLog::Explain(const fb::DecisionT& decision) {
  if (messages_ && explain_.Matches(decision)) {
    *messages_ << pass_ << ": " << ir::DecisionText(decision) << "\n";
  }
}

namespace {

fb::DecisionT MakeDecision(std::vector<uint32_t> ops, const std::string& action,
                           fb::Outcome outcome, const std::string& reason,
                           const Numbers& numbers) {
  fb::DecisionT d;
  d.ops = std::move(ops);
  d.action = action;
  d.outcome = outcome;
  d.reason = reason;
  d.cycles_before = numbers.cycles_before;
  d.cycles_after = numbers.cycles_after;
  d.bytes_before = numbers.bytes_before;
  d.bytes_after = numbers.bytes_after;
  return d;
}

}  // namespace

bool DecisionLog::Apply(std::vector<uint32_t> ops, const std::string& action,
                        const std::string& reason, const Numbers& numbers) {
  return TryApply(MakeDecision(std::move(ops), action, fb::Outcome::Accepted,
                               reason, numbers));
}

bool DecisionLog::TryApply(fb::DecisionT decision) {
  const bool apply = !LimitReached();
  if (apply) {
    decision.outcome = fb::Outcome::Accepted;
    decision.limit_index = ++applied_;
  } else {
    // Held back: it changes nothing.
    decision.outcome = fb::Outcome::Rejected;
    decision.limit_index = 0;
    decision.reason = "beyond --max-decisions=" +
                      std::to_string(max_decisions_) +
                      " (would apply: " + decision.reason + ")";
    decision.cycles_after = decision.cycles_before;
    decision.bytes_after = decision.bytes_before;
  }
  decisions_.push_back(std::make_unique<fb::DecisionT>(std::move(decision)));
  Explain(*decisions_.back());
  return apply;
}

void DecisionLog::Reject(std::vector<uint32_t> ops, const std::string& action,
                         const std::string& reason, const Numbers& numbers) {
  Record(MakeDecision(std::move(ops), action, fb::Outcome::Rejected, reason,
                      numbers));
}

void DecisionLog::Info(std::vector<uint32_t> ops, const std::string& action,
                       const std::string& reason, const Numbers& numbers) {
  Record(MakeDecision(std::move(ops), action, fb::Outcome::Info, reason,
                      numbers));
}

void DecisionLog::Record(const fb::DecisionT& decision) {
  applied_ = std::max(applied_, decision.limit_index);
  decisions_.push_back(std::make_unique<fb::DecisionT>(decision));
  Explain(*decisions_.back());
}

std::unique_ptr<fb::PassRunT> DecisionLog::TakeRun(
    std::vector<std::string> flags) {
  auto run = std::make_unique<fb::PassRunT>();
  run->pass = pass_;
  run->flags = std::move(flags);
  run->decisions = std::move(decisions_);
  decisions_.clear();
  return run;
}

}  // namespace tilec::passes
