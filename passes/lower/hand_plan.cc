#include "passes/lower/hand_plan.h"

#include <glog/logging.h>

#include <algorithm>

#include "formats/ir.h"
#include "sim/reference.h"
#include "sim/tensor_data.h"
#include "passes/core/ownership.h"
#include "passes/core/tile_plan.h"
#include "passes/import/model_builder.h"

namespace tilec::lower::testing {

using passes::BlockedOwnership;
using passes::FlatOwnership;

fb::ModuleT Import(const std::string& preset, const std::string& part,
                   const std::string& target, int64_t tokens, int64_t width,
                   int64_t mlp_width, int64_t heads) {
  fb::ModuleT module;
  module.target = std::make_unique<fb::TargetT>();
  CHECK(ir::LoadTarget(target, module.target.get()).ok());
  passes::ModelOverrides o;
  o.tokens = tokens;
  o.width = width;
  o.mlp_width = mlp_width;
  if (heads > 0) o.heads = heads;
  const Status built = passes::BuildModel(preset, part, o, &module);
  CHECK(built.ok()) << built.message();
  module.schema_version = ir::kSchemaVersion;
  module.producer = "hand_plan";
  return module;
}

fb::ValueT* FindValue(fb::ModuleT* module, uint32_t id) {
  for (auto& v : module->values) {
    if (v->id == id) return v.get();
  }
  LOG(FATAL) << "no value " << id;
}

fb::OperationT* FindOp(fb::ModuleT* module, const std::string& name) {
  for (auto& op : module->ops) {
    if (op->name == name) return op.get();
  }
  LOG(FATAL) << "no op " << name;
}

namespace {

std::unique_ptr<fb::OwnershipT> Own(const fb::OwnershipT& o) {
  return std::make_unique<fb::OwnershipT>(o);
}

int OwnershipTiles(const fb::OwnershipT& o) {
  if (o.kind == fb::OwnershipKind::Flat) return o.tiles;
  int t = o.replicas;
  for (int p : o.partitions) t *= p;
  return t;
}

// The bias ownership planning.md prescribes for an elementwise layout.
fb::OwnershipT BiasOwnership(const fb::OwnershipT& layout) {
  return passes::ColumnVectorOwnership(layout).value();
}

}  // namespace

void InsertRedistribute(fb::ModuleT* module, fb::OperationT* op, int index,
                        const fb::OwnershipT& ownership) {
  uint32_t next_value = 0, next_op = 0;
  for (const auto& v : module->values) next_value = std::max(next_value, v->id + 1);
  for (const auto& o : module->ops) next_op = std::max(next_op, o->id + 1);
  const fb::ValueT* src = FindValue(module, op->operands[index]);
  auto v = std::make_unique<fb::ValueT>();
  v->id = next_value;
  v->name = src->name + "@" + op->name;
  v->shape = src->shape;
  v->dtype = src->dtype;
  v->fp8_scale_exp = src->fp8_scale_exp;
  v->role = fb::ValueRole::Activation;
  v->ownership = Own(ownership);
  auto r = std::make_unique<fb::OperationT>();
  r->id = next_op;
  r->kind = fb::OpKind::Redistribute;
  r->name = op->name + ".redistribute" + std::to_string(index);
  r->operands = {src->id};
  r->results = {v->id};
  r->recipe = std::make_unique<fb::RecipeT>();
  r->recipe->kind = fb::RecipeKind::Copy;
  r->recipe->layout = Own(ownership);
  op->operands[index] = v->id;
  module->values.push_back(std::move(v));
  auto it = std::find_if(module->ops.begin(), module->ops.end(),
                         [&](const auto& o) { return o.get() == op; });
  module->ops.insert(it, std::move(r));
}

void PlaceInput(fb::ModuleT* module, uint32_t value,
                const fb::OwnershipT& ownership) {
  fb::ValueT* v = FindValue(module, value);
  if (!v->ownership) v->ownership = Own(ownership);
}

namespace {

// Operand `index` of `op` in exactly `layout` (placing or redistributing).
void Require(fb::ModuleT* module, fb::OperationT* op, int index,
             const fb::OwnershipT& layout) {
  fb::ValueT* v = FindValue(module, op->operands[index]);
  if (!v->ownership) {
    v->ownership = Own(layout);
    return;
  }
  if (!passes::SamePlacement(*v->ownership, layout, v->shape)) {
    InsertRedistribute(module, op, index, layout);
  }
}

}  // namespace

void PlanGemm(fb::ModuleT* module, fb::OperationT* op, const GemmShape& g) {
  fb::ValueT* a = FindValue(module, op->operands[0]);
  fb::ValueT* b = FindValue(module, op->operands[1]);
  fb::ValueT* c = FindValue(module, op->results[0]);
  auto r = std::make_unique<fb::RecipeT>();
  r->kind = fb::RecipeKind::Gemm;
  r->m_split = g.m;
  r->k_split = g.k;
  r->n_split = g.n;
  auto largest = [](int64_t e, int p) { return (e + p - 1) / p; };
  r->block_m = static_cast<int>(largest(a->shape[0], g.m));
  r->block_k = static_cast<int>(largest(a->shape[1], g.k));
  r->block_n = static_cast<int>(largest(b->shape[1], g.n));
  r->staging = g.staging;
  r->chunk_k = g.chunk_k;
  r->batch_chunks = g.batch_chunks;
  r->layout = Own(BlockedOwnership({g.m, g.k, g.n}, 1, g.first, g.stride));
  op->recipe = std::move(r);
  const passes::GemmGrid grid = passes::MakeGemmGrid(
      a->shape[0], a->shape[1], b->shape[1], g.m, g.k, g.n, g.first, g.stride,
      g.staging, g.chunk_k, g.batch_chunks);
  c->ownership = Own(grid.ResultOwnership());
  b->ownership = Own(grid.BNeeded());
  if (!a->ownership) a->ownership = Own(grid.ANeeded());
}

void PlanElementwise(fb::ModuleT* module, fb::OperationT* op,
                     const fb::OwnershipT& layout) {
  auto r = std::make_unique<fb::RecipeT>();
  r->kind = fb::RecipeKind::Elementwise;
  r->layout = Own(layout);
  op->recipe = std::move(r);
  for (uint32_t id : op->results) FindValue(module, id)->ownership = Own(layout);
  for (size_t i = 0; i < op->operands.size(); ++i) {
    fb::ValueT* v = FindValue(module, op->operands[i]);
    if (v->role == fb::ValueRole::Weight && v->shape.size() == 1) {
      v->ownership = Own(BiasOwnership(layout));
    } else {
      Require(module, op, static_cast<int>(i), layout);
    }
  }
}

void PlanRowWise(fb::ModuleT* module, fb::OperationT* op,
                 const fb::OwnershipT& layout) {
  auto r = std::make_unique<fb::RecipeT>();
  r->kind = fb::RecipeKind::RowWise;
  r->layout = Own(layout);
  op->recipe = std::move(r);
  FindValue(module, op->results[0])->ownership = Own(layout);
  for (size_t i = 1; i < op->operands.size(); ++i) {
    FindValue(module, op->operands[i])->ownership =
        Own(BlockedOwnership({1}, OwnershipTiles(layout), layout.first_tile,
                             layout.tile_stride));
  }
  Require(module, op, 0, layout);
}

void PlanMlpBlock(fb::ModuleT* module, const MlpPlan& plan) {
  const int tiles = module->target->tiles;
  fb::OperationT* ln = FindOp(module, "l0.ln2");
  PlanRowWise(module, ln, BlockedOwnership({plan.ln_parts, 1}, 1, plan.ln_first));
  fb::OperationT* up = FindOp(module, "l0.mlp.up");
  PlanGemm(module, up, plan.up);
  const fb::OwnershipT up_out = *FindValue(module, up->results[0])->ownership;
  PlanElementwise(module, FindOp(module, "l0.mlp.up_bias"),
                  plan.bias_flat ? FlatOwnership(4, tiles) : up_out);
  PlanElementwise(module, FindOp(module, "l0.mlp.gelu"),
                  plan.gelu_flat ? FlatOwnership(4, tiles) : up_out);
  fb::OperationT* down = FindOp(module, "l0.mlp.down");
  PlanGemm(module, down, plan.down);
  const fb::OwnershipT down_out =
      *FindValue(module, down->results[0])->ownership;
  PlanElementwise(module, FindOp(module, "l0.mlp.down_bias"), down_out);
  PlanElementwise(module, FindOp(module, "l0.mlp.residual"), down_out);
}

void PlanTwins(fb::ModuleT* module) {
  for (const auto& r : module->repeats) {
    for (size_t k = 0; k < r->iteration_weights.size(); ++k) {
      const fb::ValueT* weight =
          FindValue(module, r->weights[k % r->weights.size()]);
      FindValue(module, r->iteration_weights[k])->ownership =
          std::make_unique<fb::OwnershipT>(*weight->ownership);
    }
  }
}

void DefaultReductions(fb::ModuleT* module) {
  for (auto& op : module->ops) {
    if (op->kind != fb::OpKind::MatMul || !op->recipe ||
        op->recipe->k_split < 2) {
      continue;
    }
    auto r = std::make_unique<fb::ReductionT>();
    r->partials = op->recipe->k_split;
    r->direct_seed_read = true;
    r->direct_final_write = true;
    op->reduction = std::move(r);
  }
}

Status SimulateAgainstReference(const fb::ModuleT& module,
                                const sim::Tolerance& tolerance,
                                SimCheck* check) {
  sim::HostTensors inputs;
  for (const auto& b : module.program->inputs) {
    for (const auto& v : module.values) {
      if (v->id != b->value) continue;
      std::vector<float> data;
      TILEC_RETURN_IF_ERROR(kernels::MaterializeValue(*v, ".", &data));
      inputs[v->id] = std::move(data);
    }
  }
  sim::SimOptions options;
  TILEC_RETURN_IF_ERROR(sim::Simulate(module, inputs, options, &check->result));
  kernels::ReferenceResult ref;
  TILEC_RETURN_IF_ERROR(kernels::RunReference(module, &ref));
  check->pass = true;
  for (const auto& [id, data] : check->result.outputs) {
    const kernels::ReferenceTensor* r = ref.Find(id);
    if (r == nullptr) return Status::Internal("no reference for output");
    sim::Comparison c = sim::CompareTensors(data, r->data, tolerance);
    check->pass = check->pass && c.pass;
    check->max_abs_err = std::max(check->max_abs_err, c.max_abs_err);
    check->max_rel_err = std::max(check->max_rel_err, c.max_rel_err);
    check->mismatches += c.mismatches;
    if (!c.pass) {
      check->message += r->name + ": max_abs_err " + std::to_string(c.max_abs_err) +
                        " worst sim " + std::to_string(c.worst_sim) + " ref " +
                        std::to_string(c.worst_ref) + " at " +
                        std::to_string(c.worst_index) + "; ";
    }
  }
  return Status::Ok();
}

ProgramFigures ProgramFiguresOf(const fb::ModuleT& module) {
  ProgramFigures figures;
  for (const auto& run : module.log) {
    if (run->pass != "emit-device") continue;
    for (const auto& d : run->decisions) {
      if (d->action != "program") continue;
      figures.planned = d->cycles_before;
      figures.predicted = d->cycles_after;
    }
  }
  return figures;
}

}  // namespace tilec::lower::testing
