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

// A number of type T, all of `text`; nothing when it does not fit T (an
// id of 4294967299 is no id, not %3).
template <typename T>
std::optional<T> ParseNumber(std::string_view text) {
  T v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return v;
}

// A name or word from the file as a message quotes it: at most 64 bytes.
std::string Shown(std::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return std::string(text);
  return std::string(text.substr(0, kMax)) + "... (" +
         std::to_string(text.size()) + " bytes)";
}

// The value a rule names: its name, or %ID.
const fb::ValueT* FindValue(const fb::ModuleT& module, std::string_view ref) {
  if (ref.size() > 1 && ref[0] == '%') {
    std::optional<uint32_t> id = ParseNumber<uint32_t>(ref.substr(1));
    if (!id) return nullptr;
    for (const auto& v : module.values) {
      if (v->id == *id) return v.get();
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
    return Error("unknown keyword '" + Shown(head[0]) +
                 "' (expected value or op)");
  }

  Policy Take() { return std::move(policy_); }

 private:
  Status Error(const std::string& problem) const {
    return Status::BadInput(name_ + ":" + std::to_string(line_) + ": " +
                            problem);
  }

  Status Value(const std::string& ref, const std::vector<std::string>& rule) {
    const fb::ValueT* value = FindValue(module_, ref);
    if (value == nullptr) {
      return Error("no value '" + Shown(ref) + "' in the module");
    }
    uint32_t body_weight = 0;
    if (ir::TwinOf(module_, value->id, &body_weight) != nullptr) {
      // A twin shares its body weight's dtype (docs/repeat.md).
      return Error("value '" + Shown(ref) +
                   "' is a later iteration's copy of weight %" +
                   std::to_string(body_weight) +
                   " of a repeat: name that weight, whose rule rules every "
                   "iteration");
    }
    if (!IsGemmOperand(value->id)) {
      // quantize-fp8 makes only GEMM operands FP8: the rule would be
      // silently ignored.
      return Error("value '" + Shown(ref) +
                   "' is no GEMM operand; only the operands of MatMuls and "
                   "attention GEMMs are quantized, so the rule would do "
                   "nothing");
    }
    if (policy_.values.count(value->id)) {
      return Error("value '" + Shown(ref) + "' is already given on line " +
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
      return Error("unknown format '" + Shown(rule[0]) +
                   "' (expected f16, e4m3 or e5m2)");
    }
    if (rule.size() == 2) {
      std::optional<int> exp;
      if (rule[1].rfind("exp=", 0) == 0) {
        exp = ParseNumber<int>(std::string_view(rule[1]).substr(4));
      }
      // FP8 scale exponents beyond +-64 move every value out of any
      // format's range; such a number is a typo.
      if (!exp || *exp < -64 || *exp > 64) {
        return Error("expected exp=N with -64 <= N <= 64, got '" +
                     Shown(rule[1]) + "'");
      }
      r.scale_exp = static_cast<int>(*exp);
    }
    policy_.values[value->id] = r;
    return Status::Ok();
  }

  Status Op(const std::string& ref, const std::vector<std::string>& rule) {
    std::optional<uint32_t> id = ParseNumber<uint32_t>(ref);
    const fb::OperationT* op = nullptr;
    for (const auto& o : module_.ops) {
      if (id && o->id == *id) op = o.get();
    }
    if (op == nullptr) return Error("no op '" + Shown(ref) + "' in the module");
    if (!IsQuantizableGemm(op->kind)) {
      return Error("op " + ref +
                   " is not a GEMM (only MatMuls and attention GEMMs are "
                   "quantized)");
    }
    if (rule.size() != 1 || (rule[0] != "exclude" && rule[0] != "fp8")) {
      return Error("expected 'exclude' or 'fp8' for op " + ref);
    }
    if (policy_.excluded_ops.count(op->id) ||
        policy_.forced_ops.count(op->id)) {
      return Error("op " + ref + " is already given");
    }
    if (rule[0] == "exclude") {
      policy_.excluded_ops.insert(op->id);
    } else if (op->kind == fb::OpKind::MatMul) {
      // A MatMul is quantized whenever it fits; only attention's GEMMs are
      // decided by cost.
      return Error("op " + ref +
                   " is a MatMul, quantized whenever it fits: 'fp8' is for "
                   "attention GEMMs");
    } else {
      policy_.forced_ops.insert(op->id);
    }
    return Status::Ok();
  }

  bool IsGemmOperand(uint32_t id) const {
    for (const auto& op : module_.ops) {
      if (!IsQuantizableGemm(op->kind)) continue;
      for (uint32_t operand : op->operands) {
        if (operand == id) return true;
      }
    }
    return false;
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
