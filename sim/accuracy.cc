#include "sim/accuracy.h"

#include <cstdio>
#include <map>
#include <set>

#include "formats/basics.h"
#include "formats/ir.h"
#include "kernels/fb_dtype.h"
#include "kernels/kernels.h"

namespace tilec::sim {
namespace {

Comparison Compare(std::span<const float> got, std::span<const float> want) {
  return CompareTensors(got, want, Tolerance{});
}

// Which op produces each value, and each value by id.
class Producers {
 public:
  explicit Producers(const fb::ModuleT& module) {
    for (const auto& v : module.values) values_[v->id] = v.get();
    for (const auto& op : module.ops) {
      for (uint32_t r : op->results) producer_[r] = op.get();
    }
  }
  const fb::OperationT* Of(uint32_t value) const {
    auto it = producer_.find(value);
    return it == producer_.end() ? nullptr : it->second;
  }
  const fb::ValueT* Value(uint32_t value) const {
    auto it = values_.find(value);
    return it == values_.end() ? nullptr : it->second;
  }
  // `value` followed back through Redistribute copies (a planned graph may
  // read an input through one).
  uint32_t Source(uint32_t value) const {
    for (const fb::OperationT* op = Of(value);
         op != nullptr && op->kind == fb::OpKind::Redistribute &&
         !op->operands.empty();
         op = Of(value)) {
      value = op->operands[0];
    }
    return value;
  }

 private:
  std::map<uint32_t, const fb::OperationT*> producer_;
  std::map<uint32_t, const fb::ValueT*> values_;
};

// A repeat's carried_in is read only in its body, where every iteration
// after the first reads the previous one's carried_out in its place
// (docs/repeat.md): the last iteration's residual is not the graph input.
bool CarriedAfterFirstIteration(const fb::ModuleT& module, uint32_t value) {
  for (const auto& r : module.repeats) {
    if (r->carried_in == value && r->count > 1) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<fb::ModuleT> Unquantized(const fb::ModuleT& module) {
  std::unique_ptr<fb::ModuleT> m = ir::CloneModule(module);
  m->program.reset();
  std::map<uint32_t, fb::ValueT*> by_id;
  for (auto& v : m->values) by_id[v->id] = v.get();
  std::set<uint32_t> restored;
  for (auto& v : m->values) {
    if (!v->fp8_quantized) continue;
    v->dtype = v->unquantized_dtype;
    v->fp8_scale_exp = 0;
    restored.insert(v->id);
  }
  // Copies of a quantized value (Redistribute ops from planning) and fused
  // bodies that store one follow it.
  for (auto& op : m->ops) {
    if (op->results.empty()) continue;
    fb::ValueT* r = by_id.count(op->results[0]) ? by_id[op->results[0]] : nullptr;
    if (r == nullptr) continue;
    if (op->kind == fb::OpKind::Redistribute && !op->operands.empty() &&
        restored.count(op->operands[0]) && !r->fp8_quantized) {
      const fb::ValueT* src = by_id[op->operands[0]];
      r->dtype = src->dtype;
      r->fp8_scale_exp = 0;
      restored.insert(r->id);
    }
    if (op->kind == fb::OpKind::Fused && restored.count(r->id)) {
      for (auto& step : op->body) {
        if (step->kind == fb::FusedStepKind::Cast && ir::IsFp8(step->dtype)) {
          step->dtype = r->dtype;
          step->fp8_scale_exp = 0;
        }
      }
    }
  }
  return m;
}

OutputAccuracy CompareOutput(const fb::ModuleT& module, uint32_t value,
                             std::span<const float> got,
                             const kernels::ReferenceResult& unquantized) {
  OutputAccuracy a;
  a.value = value;
  const kernels::ReferenceTensor* u = unquantized.Find(value);
  if (u == nullptr || u->data.size() != got.size()) return a;
  a.name = u->name;
  a.full = Compare(got, u->data);
  // The residual: an operand of the producing op that is a graph input (or
  // a copy of one).
  const Producers producers(module);
  const fb::OperationT* op = producers.Of(value);
  if (op == nullptr) return a;
  for (uint32_t operand : op->operands) {
    if (CarriedAfterFirstIteration(module, operand)) continue;
    operand = producers.Source(operand);
    const fb::ValueT* r = producers.Value(operand);
    const kernels::ReferenceTensor* ru = unquantized.Find(operand);
    if (r == nullptr || r->role != fb::ValueRole::Input || ru == nullptr ||
        ru->data.size() != got.size()) {
      continue;
    }
    std::vector<float> bq(got.size()), bu(got.size());
    for (size_t i = 0; i < bq.size(); ++i) {
      bq[i] = got[i] - ru->data[i];
      bu[i] = u->data[i] - ru->data[i];
    }
    a.has_branch = true;
    a.residual = operand;
    a.branch = Compare(bq, bu);
    break;
  }
  return a;
}

std::vector<OutputAccuracy> CompareOutputs(
    const fb::ModuleT& module, const kernels::ReferenceResult& quantized,
    const kernels::ReferenceResult& unquantized) {
  std::vector<OutputAccuracy> out;
  for (const auto& v : module.values) {
    if (v->role != fb::ValueRole::Output) continue;
    const kernels::ReferenceTensor* q = quantized.Find(v->id);
    if (q == nullptr) continue;
    out.push_back(CompareOutput(module, v->id, q->data, unquantized));
  }
  return out;
}

bool WithinUnquantizedTolerance(const OutputAccuracy& a,
                                const UnquantizedFloors& floors) {
  return a.full.cosine >= floors.output &&
         (!a.has_branch || a.branch.cosine >= floors.branch);
}

bool IsQuantized(const fb::ModuleT& module) {
  for (const auto& v : module.values) {
    if (v && v->fp8_quantized) return true;
  }
  return false;
}

std::string AccuracyText(const Comparison& c) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "cosine %.6f max_abs %.4g max_rel %.4g",
                c.cosine, c.max_abs_err, c.max_rel_err);
  return buf;
}

}  // namespace tilec::sim
