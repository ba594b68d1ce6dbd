#include "passes/fuse/residual.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <set>

#include "formats/target.h"
#include "formats/print.h"
#include "kernels/cost.h"
#include "passes/core/ownership.h"
#include "passes/fuse/boundary.h"
#include "passes/lower/lowering.h"
#include "passes/lower/program.h"

namespace tilec::fuse {
namespace {

using passes::Numbers;
using passes::Thousands;

std::string OpText(const fb::OperationT& op) {
  return "op " + std::to_string(op.id) + " (" + op.name + ")";
}

// A residual add: an Add, or a Fused body whose last step is one.
bool EndsInResidualAdd(const fb::OperationT& op) {
  if (op.results.size() != 1) return false;
  if (op.kind == fb::OpKind::Add) return true;
  return op.kind == fb::OpKind::Fused && !op.body.empty() &&
         op.body.back()->kind == fb::FusedStepKind::ResidualAdd;
}

// One candidate: the add, the copies of its sum on the way to the
// LayerNorm, the LayerNorm (op indices).
struct Site {
  int add = -1;
  std::vector<int> copies;
  int layernorm = -1;

  // Whether all its ops are in one repeat's body or all outside: the
  // moments are a second result of the add, and a body's last add feeding
  // a LayerNorm after it (or a LayerNorm of the next iteration) would carry
  // them across the loop's boundary.
  bool WithinOneRegion(const std::vector<int>& body) const {
    for (int copy : copies) {
      if (body[copy] != body[add]) return false;
    }
    return body[layernorm] == body[add];
  }
};

std::vector<Site> Sites(const fb::ModuleT& m) {
  std::map<uint32_t, int> producer;
  for (size_t i = 0; i < m.ops.size(); ++i) {
    for (uint32_t r : m.ops[i]->results) producer[r] = static_cast<int>(i);
  }
  std::vector<Site> sites;
  for (size_t i = 0; i < m.ops.size(); ++i) {
    const fb::OperationT& ln = *m.ops[i];
    if (ln.kind != fb::OpKind::LayerNorm || ln.operands.size() != 3 ||
        !ln.recipe || !ln.recipe->layout) {
      continue;
    }
    Site site;
    site.layernorm = static_cast<int>(i);
    uint32_t v = ln.operands[0];
    while (true) {
      auto it = producer.find(v);
      if (it == producer.end()) break;
      const fb::OperationT& p = *m.ops[it->second];
      if (p.kind == fb::OpKind::Redistribute && p.operands.size() == 1) {
        site.copies.insert(site.copies.begin(), it->second);
        v = p.operands[0];
        continue;
      }
      if (EndsInResidualAdd(p) && p.recipe && p.recipe->layout) {
        site.add = it->second;
      }
      break;
    }
    if (site.add >= 0) sites.push_back(site);
  }
  return sites;
}

// The lowered cycles of ops `ops` of `m` (in program order), each phase on
// its own superstep as the simulator counts it, and the largest scratch of
// one of them on a tile.
struct Lowered {
  int64_t cycles = 0;
  int64_t scratch = 0;
  std::map<uint32_t, lower::ProgramCost> per_op;
};

StatusOr<Lowered> LowerOps(const fb::ModuleT& m,
                           const kernels::CostModel& model,
                           const std::vector<int>& ops) {
  lower::LoweringOptions options;
  options.assume_operands = true;
  lower::Lowering lowering(m, model, options);
  Lowered out;
  for (int i : ops) {
    const fb::OperationT& op = *m.ops[i];
    StatusOr<lower::OpProgram> p = lowering.Lower(op);
    if (!p.ok()) return p.status();
    StatusOr<lower::ProgramCost> c =
        lower::CostOfOp(model, lowering.buffers(), *p, lowering.tiles());
    if (!c.ok()) return c.status();
    out.cycles += c->cycles;
    out.per_op[op.id] = *c;
    out.scratch = std::max(out.scratch, lowering.ScratchBytesPerTile(op.id));
  }
  return out;
}

// `m` with the site fused: the add gains a Moments step and a moments
// result (owned by the LayerNorm's row owners: a LayerNorm over column
// slices of its rows gets each row block's moments on every slice of it),
// the LayerNorm becomes a Normalize of the sum with them. The fused op gets
// `fused_id`.
fb::ModuleT FuseSite(const fb::ModuleT& m, const Site& site,
                     uint32_t fused_id, uint32_t moments_id) {
  fb::ModuleT out = m;
  fb::OperationT& add = *out.ops[site.add];
  fb::OperationT& ln = *out.ops[site.layernorm];
  const fb::ValueT* sum = nullptr;
  for (const auto& v : out.values) {
    if (v->id == add.results[0]) sum = v.get();
  }
  auto moments = std::make_unique<fb::ValueT>();
  moments->id = moments_id;
  moments->name = add.name + ".moments";
  moments->shape = {sum->shape[0], 3};
  moments->dtype = fb::DType::F32;
  moments->role = fb::ValueRole::Activation;
  moments->ownership = std::make_unique<fb::OwnershipT>(
      passes::RowColumnOwnership(*ln.recipe->layout)
          .value_or(*ln.recipe->layout));
  if (add.kind == fb::OpKind::Add) {
    auto step = std::make_unique<fb::FusedStepT>();
    step->kind = fb::FusedStepKind::ResidualAdd;
    step->operand = 1;
    add.body.push_back(std::move(step));
    add.origin = {add.id};
    add.kind = fb::OpKind::Fused;
  } else if (add.origin.empty()) {
    add.origin = {add.id};
  }
  auto step = std::make_unique<fb::FusedStepT>();
  step->kind = fb::FusedStepKind::Moments;
  add.body.push_back(std::move(step));
  add.id = fused_id;
  add.results.push_back(moments_id);
  add.name += "+moments";
  ln.kind = fb::OpKind::Normalize;
  ln.operands.insert(ln.operands.begin() + 1, moments_id);
  ln.recipe->note = "statistics from op " + std::to_string(fused_id);
  out.values.push_back(std::move(moments));
  return out;
}

}  // namespace

StatusOr<bool> FuseResidualPass::Transform(fb::ModuleT* module,
                                           passes::DecisionLog* log) {
  if (!module->target) return Status::BadInput("the module has no target");
  StatusOr<kernels::CostModel> model =
      kernels::CostModel::Create(*module->target);
  if (!model.ok()) return model.status();
  uint32_t next_op = 0, next_value = 0;
  for (const auto& op : module->ops) next_op = std::max(next_op, op->id + 1);
  for (const auto& v : module->values) {
    next_value = std::max(next_value, v->id + 1);
  }
  bool changed = false;
  // Sites are decided in program order on the module as fused so far
  // (fusing keeps every op at its index, and so every body's range).
  const std::vector<Site> sites = Sites(*module);
  StatusOr<std::vector<int>> body = OpBodies(*module);
  if (!body.ok()) return body.status();
  for (const Site& site : sites) {
    const fb::OperationT& add = *module->ops[site.add];
    if (!site.WithinOneRegion(*body)) {
      log->Reject({add.id, module->ops[site.layernorm]->id}, "keep separate",
                  OpText(add) + " and LayerNorm " +
                      OpText(*module->ops[site.layernorm]) +
                      ": one is in a repeat's body and the other is not; "
                      "nothing fuses across the loop's boundary",
                  Numbers{});
      continue;
    }
    if (!EndsInResidualAdd(add)) {
      log->Reject({add.id, module->ops[site.layernorm]->id}, "keep separate",
                  OpText(add) + " already computes another LayerNorm's "
                                "statistics",
                  Numbers{});
      continue;
    }
    const fb::OperationT& ln = *module->ops[site.layernorm];
    std::vector<int> region = {site.add};
    region.insert(region.end(), site.copies.begin(), site.copies.end());
    region.push_back(site.layernorm);
    StatusOr<Lowered> before = LowerOps(*module, *model, region);
    if (!before.ok()) return before.status();
    fb::ModuleT fused = FuseSite(*module, site, next_op, next_value);
    StatusOr<Lowered> after = LowerOps(fused, *model, region);
    const std::vector<uint32_t> ids = {add.id, ln.id};
    const std::string what = "residual add " + OpText(add) +
                             " with the statistics of LayerNorm " + OpText(ln);
    if (!after.ok()) {
      log->Reject(ids, "keep separate",
                  what + ": the fused form cannot be lowered: " +
                      after.status().message(),
                  Numbers{before->cycles, before->cycles, before->scratch,
                          before->scratch});
      continue;
    }
    const Numbers numbers{before->cycles, after->cycles, before->scratch,
                          after->scratch};
    const int64_t capacity = ir::MaxTileTensorBytes(*module->target);
    const std::string split =
        ir::OwnershipText(*module->ops[site.add]->recipe->layout) +
        (site.copies.empty() ? ", no copy before the LayerNorm"
                             : ", " + std::to_string(site.copies.size()) +
                                   " copy before the LayerNorm");
    VLOG(1) << what << " on " << split << ": before " << before->cycles
            << ", after " << after->cycles;
    if (after->cycles >= before->cycles) {
      log->Reject(ids, "keep separate",
                  what + " (" + split + "): rejected by cost: before " +
                      Thousands(before->cycles) + ", after " +
                      Thousands(after->cycles),
                  numbers);
      continue;
    }
    if (after->scratch > capacity) {
      log->Reject(ids, "keep separate",
                  what + ": rejected by memory: " +
                      Thousands(after->scratch) + " B of scratch on a tile, " +
                      Thousands(capacity) + " B hold tensors",
                  numbers);
      continue;
    }
    if (!log->Apply({add.id, ln.id, next_op},
                    "fuse into op " + std::to_string(next_op),
                    what + " (" + split + "): before " +
                        Thousands(before->cycles) + ", after " +
                        Thousands(after->cycles),
                    numbers)) {
      break;
    }
    // The estimates of the two rewritten ops: their lowered prices.
    for (int i : {site.add, site.layernorm}) {
      fb::OperationT& op = *fused.ops[i];
      const lower::ProgramCost& c = after->per_op.at(op.id);
      op.estimate = std::make_unique<fb::EstimateT>();
      op.estimate->cycles = c.cycles;
      op.estimate->compute_cycles = c.compute_cycles;
      op.estimate->exchange_cycles = c.exchange_cycles;
      op.estimate->exchange_phases = static_cast<int32_t>(c.exchange_phases);
      op.estimate->exchange_bytes = c.bytes_received;
    }
    *module = std::move(fused);
    ++next_op;
    ++next_value;
    changed = true;
  }
  return changed;
}

}  // namespace tilec::fuse
