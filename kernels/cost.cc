#include "kernels/cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <sstream>
#include <vector>

#include "formats/basics.h"

namespace tilec::kernels {

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
          std::max<int64_t>(0, ir::CeilDiv(var->value + factor->offset,
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

StatusOr<CostModel> CostModel::Create(const fb::TargetT& target) {
  TILEC_RETURN_IF_ERROR(
      ir::ValidateTarget(target).WithContext("invalid target"));
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
  if (!(*value <= kMaxCallCycles)) {
    return Status::BadInput("kernel '" + std::string(kernel) +
                            "': its formula gives " + std::to_string(*value) +
                            " cycles for one call, more than 2^40");
  }
  return RoundUpCycles(*value);
}

}  // namespace tilec::kernels
