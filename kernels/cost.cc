#include "kernels/cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>
#include <vector>

namespace tilec::kernels {
namespace {

constexpr std::array<std::string_view, 8> kVariables = {
    "M", "K", "N", "n", "rows", "w", "P", "B"};

constexpr std::array<std::string_view, 19> kRequiredKernels = {
    "gemm_fp8",      "gemm_f16",       "gemm_f32",   "reduce_partials",
    "add",           "gelu",           "bias_gelu",  "bias_gelu_fp8",
    "cast",          "layernorm",      "layernorm_fp8", "ln_moments",
    "residual_moments", "moments_combine", "normalize", "normalize_fp8",
    "softmax",       "softmax_fp8",    "copy"};

bool IsKnownVariable(std::string_view name) {
  return std::find(kVariables.begin(), kVariables.end(), name) !=
         kVariables.end();
}

// ceil(a / b) for b > 0 and any sign of a (C++ division truncates to zero).
int64_t CeilDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && a > 0) ? q + 1 : q;
}

// Collects problems so that one validation run reports all of them.
class Problems {
 public:
  template <typename... Args>
  void Add(const Args&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    list_.push_back(os.str());
  }
  std::string Join() const {
    std::string out;
    for (const std::string& p : list_) {
      if (!out.empty()) out += "; ";
      out += p;
    }
    return out;
  }

 private:
  std::vector<std::string> list_;
};

void ValidateFormula(const fb::KernelFormulaT& f, Problems& problems) {
  const std::string where = "kernel '" + f.kernel + "'";
  if (!(f.base >= 0)) problems.Add(where, ": base ", f.base, " is negative");
  if (!(f.multiplier > 0)) {
    problems.Add(where, ": multiplier ", f.multiplier, " is not positive");
  }
  if (!(f.slow_path_term_multiplier > 0)) {
    problems.Add(where, ": slow_path_term_multiplier ",
                 f.slow_path_term_multiplier, " is not positive");
  }
  for (size_t t = 0; t < f.terms.size(); ++t) {
    const fb::CostTermT* term = f.terms[t].get();
    if (term == nullptr) {
      problems.Add(where, ": term ", t, " is null");
      continue;
    }
    if (!(term->coefficient >= 0)) {
      problems.Add(where, ": term ", t, " coefficient ", term->coefficient,
                   " is negative");
    }
    for (size_t i = 0; i < term->factors.size(); ++i) {
      const fb::CostFactorT* factor = term->factors[i].get();
      if (factor == nullptr) {
        problems.Add(where, ": term ", t, " factor ", i, " is null");
        continue;
      }
      if (!IsKnownVariable(factor->variable)) {
        problems.Add(where, ": term ", t, " uses unknown variable '",
                     factor->variable, "' (known: M K N n rows w P B)");
      }
      if (factor->divisor <= 0) {
        problems.Add(where, ": term ", t, " variable ", factor->variable,
                     " has divisor ", factor->divisor, " (must be positive)");
      }
    }
  }
}

}  // namespace

std::span<const std::string_view> FormulaVariables() { return kVariables; }

std::span<const std::string_view> RequiredKernels() {
  return kRequiredKernels;
}

StatusOr<double> EvaluateFormula(const fb::KernelFormulaT& formula,
                                 std::span<const CostVar> vars,
                                 KernelPath path) {
  auto lookup = [&](const std::string& name) -> const CostVar* {
    for (const CostVar& v : vars) {
      if (v.name == name) return &v;
    }
    return nullptr;
  };
  double sum = 0;
  for (const auto& term : formula.terms) {
    double product = term->coefficient;
    for (const auto& factor : term->factors) {
      const CostVar* var = lookup(factor->variable);
      if (var == nullptr) {
        std::string given;
        for (const CostVar& v : vars) given += " " + std::string(v.name);
        return Status::BadInput("kernel '" + formula.kernel +
                             "': formula uses variable '" + factor->variable +
                             "' but the call gives only [" + given + " ]");
      }
      if (var->value < 0) {
        return Status::BadInput("kernel '" + formula.kernel + "': variable '" +
                             factor->variable + "' is negative (" +
                             std::to_string(var->value) + ")");
      }
      if (factor->divisor <= 0) {
        return Status::BadInput("kernel '" + formula.kernel + "': variable '" +
                             factor->variable + "' has divisor " +
                             std::to_string(factor->divisor));
      }
      const int64_t f =
          std::max<int64_t>(0, CeilDiv(var->value + factor->offset,
                                       factor->divisor));
      product *= static_cast<double>(f);
    }
    sum += product;
  }
  const double path_multiplier =
      path == KernelPath::kSlow ? formula.slow_path_term_multiplier : 1.0;
  return formula.multiplier * (formula.base + path_multiplier * sum);
}

int64_t RoundUpCycles(double value) {
  const double slack = 1e-9 * std::max(1.0, std::fabs(value));
  return static_cast<int64_t>(std::ceil(value - slack));
}

std::string ValidateTarget(const fb::TargetT& t) {
  Problems problems;
  auto positive = [&](const char* name, double v) {
    if (!(v > 0)) problems.Add("target '", t.name, "': ", name, " = ", v,
                               " must be positive");
  };
  auto non_negative = [&](const char* name, double v) {
    if (!(v >= 0)) problems.Add("target '", t.name, "': ", name, " = ", v,
                                " must not be negative");
  };
  positive("tiles", t.tiles);
  positive("clock_hz", t.clock_hz);
  positive("sram_bytes", t.sram_bytes);
  non_negative("reserved_bytes", t.reserved_bytes);
  if (t.reserved_bytes >= t.sram_bytes && t.sram_bytes > 0) {
    problems.Add("target '", t.name, "': reserved_bytes ", t.reserved_bytes,
                 " leaves no room in sram_bytes ", t.sram_bytes);
  }
  positive("element_bytes", t.element_bytes);
  non_negative("standard_elements", t.standard_elements);
  positive("interleaved_element_bytes", t.interleaved_element_bytes);
  positive("workers", t.workers);
  positive("amp_macs_fp8", t.amp_macs_fp8);
  positive("amp_macs_f16", t.amp_macs_f16);
  positive("amp_macs_f32", t.amp_macs_f32);
  positive("exchange_bytes_per_cycle", t.exchange_bytes_per_cycle);
  non_negative("exchange_fragment_cycles", t.exchange_fragment_cycles);
  non_negative("sync_cycles", t.sync_cycles);
  non_negative("copy_call_cycles", t.copy_call_cycles);
  positive("copy_bytes_per_cycle", t.copy_bytes_per_cycle);
  positive("vector_elements", t.vector_elements);
  if (t.alignment <= 0 || (t.alignment & (t.alignment - 1)) != 0) {
    problems.Add("target '", t.name, "': alignment ", t.alignment,
                 " must be a positive power of two");
  }

  std::set<std::string, std::less<>> names;
  for (const auto& f : t.kernels) {
    if (f == nullptr) {
      problems.Add("target '", t.name, "': null kernel formula");
      continue;
    }
    if (!names.insert(f->kernel).second) {
      problems.Add("target '", t.name, "': kernel '", f->kernel,
                   "' is defined twice");
    }
    ValidateFormula(*f, problems);
  }
  for (std::string_view required : kRequiredKernels) {
    if (names.find(required) == names.end()) {
      problems.Add("target '", t.name, "' lacks kernel formula '", required,
                   "'");
    }
  }
  return problems.Join();
}

StatusOr<CostModel> CostModel::Create(const fb::TargetT& target) {
  if (std::string error = ValidateTarget(target); !error.empty()) {
    return Status::BadInput("invalid target: " + error);
  }
  CostModel model;
  auto copy = std::make_shared<const fb::TargetT>(target);
  auto formulas = std::make_shared<
      std::map<std::string, const fb::KernelFormulaT*, std::less<>>>();
  for (const auto& f : copy->kernels) (*formulas)[f->kernel] = f.get();
  model.target_ = std::move(copy);
  model.formulas_ = std::move(formulas);
  return model;
}

bool CostModel::HasKernel(std::string_view kernel) const {
  return formulas_->find(kernel) != formulas_->end();
}

StatusOr<const fb::KernelFormulaT*> CostModel::Formula(
    std::string_view kernel) const {
  auto it = formulas_->find(kernel);
  if (it == formulas_->end()) {
    return Status::BadInput("target '" + target_->name +
                         "' has no cycle formula for kernel '" +
                         std::string(kernel) + "'");
  }
  return it->second;
}

StatusOr<int64_t> CostModel::Cycles(std::string_view kernel,
                                    std::span<const CostVar> vars,
                                    KernelPath path) const {
  StatusOr<const fb::KernelFormulaT*> formula = Formula(kernel);
  if (!formula.ok()) return formula.status();
  StatusOr<double> value = EvaluateFormula(**formula, vars, path);
  if (!value.ok()) return value.status();
  return RoundUpCycles(*value);
}

int64_t CostModel::CopyCycles(int64_t bytes) const {
  return target_->copy_call_cycles +
         CeilDiv(std::max<int64_t>(bytes, 0), target_->copy_bytes_per_cycle);
}

int64_t CostModel::TileExchangeCycles(int64_t bytes_sent,
                                      int64_t bytes_received,
                                      int64_t fragments) const {
  const int64_t rate = target_->exchange_bytes_per_cycle;
  return std::max({CeilDiv(std::max<int64_t>(bytes_sent, 0), rate),
                   CeilDiv(std::max<int64_t>(bytes_received, 0), rate),
                   int64_t{target_->exchange_fragment_cycles} *
                       std::max<int64_t>(fragments, 0)});
}

}  // namespace tilec::kernels
