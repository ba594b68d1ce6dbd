#include "passes/inspect/test_program.h"

#include <gtest/gtest.h>

#include "formats/ir.h"
#include "kernels/exchange_schedule.h"

namespace tilec::inspect {

TestProgram::TestProgram() {
  module.target = std::make_unique<fb::TargetT>();
  const Status loaded = ir::LoadTarget("tiny", module.target.get());
  EXPECT_TRUE(loaded.ok()) << loaded.message();
  module.program = std::make_unique<fb::DeviceProgramT>();
}

uint32_t TestProgram::AddValue(const std::string& name,
                               std::vector<int64_t> shape, fb::DType dtype,
                               fb::ValueRole role) {
  auto v = std::make_unique<fb::ValueT>();
  v->id = static_cast<uint32_t>(module.values.size());
  v->name = name;
  v->shape = std::move(shape);
  v->dtype = dtype;
  v->role = role;
  module.values.push_back(std::move(v));
  return module.values.back()->id;
}

void TestProgram::AddOp(uint32_t id, fb::OpKind kind, const std::string& name) {
  auto op = std::make_unique<fb::OperationT>();
  op->id = id;
  op->kind = kind;
  op->name = name;
  module.ops.push_back(std::move(op));
}

uint32_t TestProgram::AddBuffer(uint32_t tile, uint32_t offset, uint32_t bytes,
                                fb::DType dtype) {
  auto b = std::make_unique<fb::BufferT>();
  b->id = static_cast<uint32_t>(module.program->buffers.size());
  b->tile = tile;
  b->offset = kTensorBase + offset;
  b->bytes = bytes;
  b->dtype = dtype;
  b->name = "b" + std::to_string(b->id);
  module.program->buffers.push_back(std::move(b));
  return module.program->buffers.back()->id;
}

fb::ModuleT TestProgram::Completed() const {
  fb::ModuleT completed(module);
  const Status s =
      kernels::CompleteProgram(*completed.target, completed.program.get());
  EXPECT_TRUE(s.ok()) << s.message();
  return completed;
}

fb::BufferT* TestProgram::Buffer(uint32_t id) {
  for (auto& b : module.program->buffers) {
    if (b->id == id) return b.get();
  }
  ADD_FAILURE() << "no buffer #" << id;
  return nullptr;
}

int TestProgram::AddStep(const std::string& label) {
  auto s = std::make_unique<fb::SuperstepT>();
  s->label = label;
  module.program->supersteps.push_back(std::move(s));
  return static_cast<int>(module.program->supersteps.size()) - 1;
}

void TestProgram::AddCompute(int step, uint32_t tile, const std::string& kernel,
                             const std::vector<uint32_t>& buffers,
                             std::vector<int64_t> params, uint32_t op) {
  auto c = std::make_unique<fb::ComputeT>();
  c->tile = tile;
  c->kernel = kernel;
  for (uint32_t id : buffers) {
    auto a = std::make_unique<fb::BufferSliceT>();
    a->buffer = id;
    a->bytes = Buffer(id) ? Buffer(id)->bytes : 0;
    c->args.push_back(std::move(a));
  }
  c->params = std::move(params);
  c->op = op;
  module.program->supersteps[step]->compute.push_back(std::move(c));
}

void TestProgram::AddTransfer(
    int step, uint32_t src_tile, uint32_t src_buffer, uint32_t bytes,
    uint32_t rows, const std::vector<std::pair<uint32_t, uint32_t>>& dests,
    uint32_t op) {
  auto t = std::make_unique<fb::TransferT>();
  t->src_tile = src_tile;
  t->src_buffer = src_buffer;
  t->bytes = bytes;
  t->rows = rows;
  t->src_pitch = rows > 1 ? bytes : 0;
  t->dst_pitch = rows > 1 ? bytes : 0;
  t->dtype = Buffer(src_buffer) ? Buffer(src_buffer)->dtype : fb::DType::F32;
  for (const auto& [tile, buffer] : dests) {
    auto d = std::make_unique<fb::DestinationT>();
    d->tile = tile;
    d->buffer = buffer;
    t->destinations.push_back(std::move(d));
  }
  t->op = op;
  module.program->supersteps[step]->exchange.push_back(std::move(t));
}

std::unique_ptr<fb::HostBindingT> TestProgram::Binding(uint32_t value,
                                                       uint32_t tile,
                                                       uint32_t buffer) {
  auto b = std::make_unique<fb::HostBindingT>();
  b->value = value;
  auto f = std::make_unique<fb::FragmentT>();
  f->tile = tile;
  f->buffer = buffer;
  f->begin.assign(module.values[value]->shape.size(), 0);
  f->end = module.values[value]->shape;
  b->fragments.push_back(std::move(f));
  return b;
}

void TestProgram::BindInput(uint32_t value, uint32_t tile, uint32_t buffer) {
  module.program->inputs.push_back(Binding(value, tile, buffer));
}

void TestProgram::BindOutput(uint32_t value, uint32_t tile, uint32_t buffer) {
  module.program->outputs.push_back(Binding(value, tile, buffer));
}

}  // namespace tilec::inspect
