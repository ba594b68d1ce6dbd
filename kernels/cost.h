// Kernel cycle formulas of a target description, evaluated.
//
// A target (formats/tilec.fbs, table Target) holds every kernel's cycle
// formula as data so that another chip can be described without touching
// code. A formula is
//
//   cycles = multiplier * (base + path_multiplier * sum_i coefficient_i *
//                          prod_j ceil((var_ij + offset_ij) / divisor_ij))
//
// where path_multiplier is 1 on a kernel's fast path and the formula's
// slow_path_term_multiplier on its slow path (a binary kernel whose two
// inputs share a memory element, docs/machine.md). Variables are the work
// sizes of one call on one tile: M, K, N (GEMM), n (elements), rows, w (row
// width), P (partials), B (bytes).
//
// Rounding: a formula's value is a double (multipliers such as 1.06 make it
// fractional); a call's cycles are that value rounded UP to an integer,
// because a tile cannot finish a kernel part-way through a cycle and rounding
// up keeps estimates conservative. Values within a relative 1e-9 of an
// integer count as that integer, so that 1.06 * 6732 style products that land
// one ulp above a whole number do not gain a cycle from float noise.

#ifndef TILEC_KERNELS_COST_H_
#define TILEC_KERNELS_COST_H_

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "formats/target.h"
#include "formats/tilec_generated.h"
#include "kernels/status.h"

namespace tilec::kernels {

// One named variable of a call, e.g. {"M", 82}.
struct CostVar {
  std::string_view name;
  int64_t value;
};

// Which path of a kernel is charged (see slow_path_term_multiplier).
enum class KernelPath { kFast, kSlow };

// The formula variables, the required kernels and the target validator
// live with the schema (formats/target.h), so that every target load runs
// them; the kernels library uses the same definitions.
using ir::FormulaVariables;
using ir::RequiredKernels;
using ir::ValidateTarget;

// The formula's value for `vars`, before rounding. Errors name the kernel:
// a variable the formula uses but `vars` lacks, or a negative variable
// (variables are counts). Variables the formula does not use are ignored, so
// a caller may pass everything it knows. A factor whose (var + offset) is
// negative counts as 0: e.g. P - 1 with P = 0 is "no extra partials".
StatusOr<double> EvaluateFormula(const fb::KernelFormulaT& formula,
                                 std::span<const CostVar> vars,
                                 KernelPath path = KernelPath::kFast);

// Rounds a formula's value up to whole cycles as described at the top.
int64_t RoundUpCycles(double value);

// The most cycles one kernel call may cost: 2^40 is 12 minutes of one tile
// at 1.5 GHz, far beyond any real kernel (the largest today are ~10^5), so a
// formula that gets there describes no machine (a damaged or hand-made
// target). Refusing it keeps every program total far from int64's range.
inline constexpr double kMaxCallCycles = 1099511627776.0;

// Cycle costs on one target. Cheap to copy (the target is shared, immutable).
class CostModel {
 public:
  // Validates `target` with ValidateTarget and keeps a copy of it.
  static StatusOr<CostModel> Create(const fb::TargetT& target);

  const fb::TargetT& target() const { return *target_; }

  bool HasKernel(std::string_view kernel) const;
  // The formula named `kernel`, or an error naming the missing kernel and
  // the target.
  StatusOr<const fb::KernelFormulaT*> Formula(std::string_view kernel) const;

  // Cycles of one call of `kernel` on one tile, rounded up (see top).
  StatusOr<int64_t> Cycles(std::string_view kernel,
                           std::span<const CostVar> vars,
                           KernelPath path = KernelPath::kFast) const;
  StatusOr<int64_t> Cycles(std::string_view kernel,
                           std::initializer_list<CostVar> vars,
                           KernelPath path = KernelPath::kFast) const {
    return Cycles(kernel, std::span<const CostVar>(vars.begin(), vars.size()),
                  path);
  }

  // ---- the target's exchange, copy and vector numbers (docs/machine.md).

  // Elements per vector: rows that are not whole groups pay a tail.
  int vector_elements() const { return target_->vector_elements; }
  int workers() const { return target_->workers; }
  double clock_hz() const { return target_->clock_hz; }

  int exchange_bytes_per_cycle() const {
    return target_->exchange_bytes_per_cycle;
  }
  int exchange_fragment_cycles() const {
    return target_->exchange_fragment_cycles;
  }
  // Per exchange phase, on top of its schedule's length
  // (kernels/exchange_schedule.h prices exchange).
  int sync_cycles() const { return target_->sync_cycles; }

 private:
  CostModel() = default;

  std::shared_ptr<const fb::TargetT> target_;
  // kernel name -> formula inside *target_; std::less<> for string_view
  // lookups without a temporary string.
  std::shared_ptr<const std::map<std::string, const fb::KernelFormulaT*,
                                 std::less<>>>
      formulas_;
};

}  // namespace tilec::kernels

#endif  // TILEC_KERNELS_COST_H_
