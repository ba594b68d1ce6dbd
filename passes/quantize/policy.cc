#include "passes/quantize/policy.h"

#include <charconv>
#include <sstream>
#include <string_view>
#include <vector>

#include "formats/repeat.h"

namespace tilec::quantize {
namespace {

std::vector<std::string> Words(std::string_view text) {
  std::vector<std::string> words;
  std::istringstream in{std::string(text)};
  std::string word;
  while (in >> word) words.push_back(word);
  return words;
}

std::optional<long> ParseInt(std::string_view text) {
  long v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return v;
}

// The value a rule names: its name, or %ID.
const fb::ValueT* FindValue(const fb::ModuleT& module, std::string_view ref) {
  if (ref.size() > 1 && ref[0] == '%') {
    std::optional<long> id = ParseInt(ref.substr(1));
    if (!id) return nullptr;
    for (const auto& v : module.values) {
      if (v->id == static_cast<uint32_t>(*id)) return v.get();
    }
    return nullptr;
  }
  for (const auto& v : module.values) {
    if (v->name == ref) return v.get();
  }
  return nullptr;
}

class Parser {
 public:
  Parser(const std::string& name, const fb::ModuleT& module)
      : name_(name), module_(module) {}

  Status Line(int line, std::string_view text) {
    line_ = line;
    const size_t hash = text.find('#');
    if (hash != std::string_view::npos) text = text.substr(0, hash);
    const size_t colon = text.find(':');
    std::vector<std::string> head = Words(text.substr(0, colon));
    if (head.empty() && colon == std::string_view::npos) return Status::Ok();
    if (colon == std::string_view::npos || head.size() != 2) {
      return Error("expected 'value NAME: RULE' or 'op ID: exclude'");
    }
    std::vector<std::string> rule = Words(text.substr(colon + 1));
    if (head[0] == "value") return Value(head[1], rule);
    if (head[0] == "op") return Op(head[1], rule);
    return Error("unknown keyword '" + head[0] + "' (expected value or op)");
  }

  Policy Take() { return std::move(policy_); }

 private:
  Status Error(const std::string& problem) const {
    return Status::BadInput(name_ + ":" + std::to_string(line_) + ": " +
                            problem);
  }

  Status Value(const std::string& ref, const std::vector<std::string>& rule) {
    const fb::ValueT* value = FindValue(module_, ref);
    if (value == nullptr) return Error("no value '" + ref + "' in the module");
    uint32_t body_weight = 0;
    if (ir::TwinOf(module_, value->id, &body_weight) != nullptr) {
      // A twin shares its body weight's dtype (docs/repeat.md).
      return Error("value '" + ref +
                   "' is a later iteration's copy of weight %" +
                   std::to_string(body_weight) +
                   " of a repeat: name that weight, whose rule rules every "
                   "iteration");
    }
    if (policy_.values.count(value->id)) {
      return Error("value '" + ref + "' is already given on line " +
                   std::to_string(policy_.values[value->id].line));
    }
    if (rule.empty() || rule.size() > 2) {
      return Error("expected f16, e4m3 or e5m2, optionally exp=N");
    }
    ValueRule r;
    r.line = line_;
    if (rule[0] == "f16") {
      if (rule.size() != 1) return Error("f16 takes no exponent");
      r.keep = true;
    } else if (rule[0] == "e4m3") {
      r.dtype = fb::DType::FP8E4M3;
    } else if (rule[0] == "e5m2") {
      r.dtype = fb::DType::FP8E5M2;
    } else {
      return Error("unknown format '" + rule[0] +
                   "' (expected f16, e4m3 or e5m2)");
    }
    if (rule.size() == 2) {
      std::optional<long> exp;
      if (rule[1].rfind("exp=", 0) == 0) exp = ParseInt(rule[1].substr(4));
      // FP8 scale exponents beyond +-64 move every value out of any
      // format's range; such a number is a typo.
      if (!exp || *exp < -64 || *exp > 64) {
        return Error("expected exp=N with -64 <= N <= 64, got '" + rule[1] +
                     "'");
      }
      r.scale_exp = static_cast<int>(*exp);
    }
    policy_.values[value->id] = r;
    return Status::Ok();
  }

  Status Op(const std::string& ref, const std::vector<std::string>& rule) {
    std::optional<long> id = ParseInt(ref);
    const fb::OperationT* op = nullptr;
    for (const auto& o : module_.ops) {
      if (id && o->id == static_cast<uint32_t>(*id)) op = o.get();
    }
    if (op == nullptr) return Error("no op '" + ref + "' in the module");
    if (op->kind != fb::OpKind::MatMul) {
      return Error("op " + ref + " is not a MatMul (only MatMuls are quantized)");
    }
    if (rule.size() != 1 || rule[0] != "exclude") {
      return Error("expected 'exclude' for op " + ref);
    }
    if (!policy_.excluded_ops.insert(op->id).second) {
      return Error("op " + ref + " is already excluded");
    }
    return Status::Ok();
  }

  const std::string& name_;
  const fb::ModuleT& module_;
  int line_ = 0;
  Policy policy_;
};

}  // namespace

StatusOr<Policy> ParsePolicy(const std::string& text, const std::string& name,
                             const fb::ModuleT& module) {
  Parser parser(name, module);
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    Status s = parser.Line(n, line);
    if (!s.ok()) return s;
  }
  return parser.Take();
}

}  // namespace tilec::quantize
