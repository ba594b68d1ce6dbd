#include "formats/test_graph.h"

#include <memory>
#include <utility>

namespace tilec::ir::testing {

uint32_t AddValue(fb::ModuleT* m, const std::string& name,
                  std::vector<int64_t> shape, fb::ValueRole role,
                  uint64_t seed, float stddev) {
  auto v = std::make_unique<fb::ValueT>();
  v->id = static_cast<uint32_t>(m->values.size());
  v->name = name;
  v->shape = std::move(shape);
  v->dtype = fb::DType::F16;
  v->role = role;
  if (role == fb::ValueRole::Input || role == fb::ValueRole::Weight) {
    v->init = std::make_unique<fb::WeightInitT>();
    v->init->distribution = fb::Distribution::Gaussian;
    v->init->seed = seed;
    v->init->stddev = stddev;
  }
  m->values.push_back(std::move(v));
  return m->values.back()->id;
}

fb::OperationT* AddOp(fb::ModuleT* m, fb::OpKind kind, const std::string& name,
                      std::vector<uint32_t> operands, uint32_t result) {
  auto op = std::make_unique<fb::OperationT>();
  op->id = static_cast<uint32_t>(m->ops.size());
  op->kind = kind;
  op->name = name;
  op->operands = std::move(operands);
  op->results = {result};
  m->ops.push_back(std::move(op));
  return m->ops.back().get();
}

}  // namespace tilec::ir::testing
