// The --policy file of quantize-fp8 (docs/quantize.md, "Policy"): which
// values become FP8 and how, line by line like a --recipe file.
//
//   # comment; blank lines are ignored
//   value NAME: f16               keep NAME (or %ID) in its own dtype
//   value NAME: e4m3              this format (e5m2 too), calibrated scale
//   value NAME: e5m2 exp=6        this format with this scale exponent
//   op ID: exclude                GEMM ID keeps its operands as they are
//   op ID: fp8                    attention GEMM ID runs FP8 whatever the
//                                 price (otherwise decided by cost)
//
// A value may be named by its name or as %ID. Errors are
// "FILE:LINE: problem" (exit 2): an unknown keyword, value or op, an op
// that is not a GEMM (IsQuantizableGemm), a format other than
// f16/e4m3/e5m2, a bad exponent, a value or op given twice, a repeat's twin
// (a rule on its body weight rules every iteration).

#ifndef TILEC_PASSES_QUANTIZE_POLICY_H_
#define TILEC_PASSES_QUANTIZE_POLICY_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::quantize {

// The ops quantize-fp8 may run on FP8 operands: MatMuls, and attention's
// GEMMs (scores Q K^T, context P V), whose kernels take FP8 like a MatMul's.
inline bool IsQuantizableGemm(fb::OpKind kind) {
  return kind == fb::OpKind::MatMul || kind == fb::OpKind::AttentionScores ||
         kind == fb::OpKind::AttentionContext;
}

struct ValueRule {
  bool keep = false;          // f16: not quantized
  fb::DType dtype = fb::DType::FP8E4M3;
  std::optional<int> scale_exp;  // fixed instead of calibrated
  int line = 0;
};

struct Policy {
  std::map<uint32_t, ValueRule> values;  // by value id
  std::set<uint32_t> excluded_ops;       // by op id
  std::set<uint32_t> forced_ops;         // attention GEMMs, by op id
};

// Parses `text` (the file's contents) against `module`; `name` is the file
// name errors cite.
StatusOr<Policy> ParsePolicy(const std::string& text, const std::string& name,
                             const fb::ModuleT& module);

}  // namespace tilec::quantize

#endif  // TILEC_PASSES_QUANTIZE_POLICY_H_
