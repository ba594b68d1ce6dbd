#include "passes/lower/expand_reduce.h"

#include <glog/logging.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "formats/print.h"
#include "kernels/cost.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "passes/core/ownership.h"
#include "passes/core/decisions.h"
#include "passes/lower/lowering.h"
#include "passes/lower/program.h"

namespace tilec::lower {
namespace {

using passes::Count;
using passes::DecisionLog;
using passes::Numbers;
using passes::Thousands;

// One lowering of one op, priced on its own.
struct Priced {
  ProgramCost cost;
  OpNotes notes;
  int64_t scratch = 0;                   // busiest tile
  std::vector<int64_t> scratch_per_tile;  // by tile
  std::map<BufferKind, int64_t> kind_bytes;  // busiest tile per kind
  struct Stage {
    int64_t bytes_per_tile = 0;
  };
  std::vector<Stage> partial_stages;
  Numbers Of() const { return {0, cost.cycles, 0, scratch}; }
};

Numbers Compare(const Priced& before, const Priced& after) {
  return {before.cost.cycles, after.cost.cycles, before.scratch, after.scratch};
}

class Reducer {
 public:
  Reducer(fb::ModuleT* module, const ExpandReduceOptions& options,
          const kernels::CostModel& model, DecisionLog* log)
      : module_(*module), options_(options), model_(model), log_(*log) {
    tiles_ = module->target->tiles;
    capacity_ = int64_t{module->target->sram_bytes} -
                module->target->reserved_bytes;
  }

  Status Run();

 private:
  StatusOr<Priced> Price(const fb::OperationT& op,
                         const ReductionChoice& choice,
                         const fb::RecipeT* recipe = nullptr);
  // Bytes per tile of every value live while op `index` runs (weights are
  // resident), without the op's scratch.
  std::vector<int64_t> LiveBytes(size_t index) const;
  Status Gemm(size_t index);
  // LayerNorm over split rows, Moments, fused moments over column slices.
  Status Statistics(size_t index);

  fb::ModuleT& module_;
  const ExpandReduceOptions& options_;
  kernels::CostModel model_;
  DecisionLog& log_;
  int tiles_ = 0;
  int64_t capacity_ = 0;
};

StatusOr<Priced> Reducer::Price(const fb::OperationT& op,
                             const ReductionChoice& choice,
                             const fb::RecipeT* recipe) {
  fb::OperationT copy;
  const fb::OperationT* target = &op;
  if (recipe != nullptr) {
    copy.id = op.id;
    copy.kind = op.kind;
    copy.name = op.name;
    copy.operands = op.operands;
    copy.results = op.results;
    copy.recipe = std::make_unique<fb::RecipeT>(*recipe);
    if (recipe->layout) {
      copy.recipe->layout = std::make_unique<fb::OwnershipT>(*recipe->layout);
    }
    target = &copy;
  }
  Lowering lowering(module_, model_, LoweringOptions{true, true});
  StatusOr<OpProgram> program = lowering.Lower(*target, choice);
  if (!program.ok()) return program.status();
  VLOG(1) << "priced op " << op.id << " " << op.name << " with "
          << (choice.seed_in_place ? "seed in place" : "seed copied") << ", "
          << (choice.direct_final_write ? "direct write" : "result copied")
          << ", " << choice.partials_per_epoch << " partials per epoch"
          << (recipe ? " (recipe variant)" : "");
  StatusOr<ProgramCost> cost =
      CostOfOp(model_, lowering.buffers(), *program, tiles_);
  if (!cost.ok()) return cost.status();
  Priced p;
  p.cost = *cost;
  p.notes = lowering.notes(op.id);
  p.scratch_per_tile.assign(tiles_, 0);
  std::map<BufferKind, std::vector<int64_t>> per_kind;
  for (const VBuffer& b : lowering.buffers()) {
    if (b.op != op.id || b.kind == BufferKind::kValue) continue;
    p.scratch_per_tile[b.tile] += b.bytes;
    auto& v = per_kind[b.kind];
    if (v.empty()) v.assign(tiles_, 0);
    v[b.tile] += b.bytes;
  }
  for (int64_t s : p.scratch_per_tile) p.scratch = std::max(p.scratch, s);
  for (const auto& [kind, v] : per_kind) {
    p.kind_bytes[kind] = *std::max_element(v.begin(), v.end());
  }
  for (const Phase& ph : program->phases) {
    if (ph.kind != Phase::Kind::kExchange ||
        (ph.label.rfind("partials", 0) != 0 && ph.label != "moments")) {
      continue;
    }
    std::vector<int64_t> received(tiles_, 0);
    for (const VTransfer& t : ph.transfers) {
      for (const VDestination& d : t.destinations) {
        received[d.tile] += t.Bytes();
      }
    }
    p.partial_stages.push_back(
        {*std::max_element(received.begin(), received.end())});
  }
  return p;
}

std::vector<int64_t> Reducer::LiveBytes(size_t index) const {
  std::map<uint32_t, size_t> producer, last_use;
  for (size_t i = 0; i < module_.ops.size(); ++i) {
    for (uint32_t r : module_.ops[i]->results) producer[r] = i;
    for (uint32_t v : module_.ops[i]->operands) last_use[v] = i;
  }
  std::vector<int64_t> live(tiles_, 0);
  for (const auto& v : module_.values) {
    if (!v->ownership) continue;
    bool alive = false;
    if (v->role == fb::ValueRole::Weight) {
      alive = true;
    } else {
      const size_t from = producer.count(v->id) ? producer[v->id] : 0;
      const size_t to = v->role == fb::ValueRole::Output
                            ? module_.ops.size()
                            : (last_use.count(v->id) ? last_use[v->id] : from);
      alive = from <= index && index <= to;
    }
    if (!alive) continue;
    const std::vector<int64_t> bytes = passes::BytesPerTile(
        *v->ownership, v->shape, ir::DTypeBytes(v->dtype), tiles_);
    for (int t = 0; t < tiles_; ++t) live[t] += bytes[t];
  }
  return live;
}

Status Reducer::Gemm(size_t index) {
  fb::OperationT& op = *module_.ops[index];
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Gemm) {
    return Status::BadInput("op " + std::to_string(op.id) + " (" + op.name +
                            ") has no gemm recipe: run plan-ownership first");
  }
  StatusOr<GemmGrid> grid = ReadGemmGrid(module_, op);
  if (!grid.ok()) return grid.status();
  const GemmGrid& g = *grid;
  const fb::ValueT* C = nullptr;
  for (const auto& v : module_.values) {
    if (v->id == op.results[0]) C = v.get();
  }
  const std::vector<uint32_t> ops = {op.id};

  // ---- operand staging as the recipe says, against the Complete panel
  StatusOr<Priced> as_planned = Price(op, ReductionChoice{true, true, 0});
  if (!as_planned.ok()) return as_planned.status();
  if (g.staged) {
    fb::RecipeT complete = *op.recipe;
    complete.layout = std::make_unique<fb::OwnershipT>(*op.recipe->layout);
    complete.staging = fb::Staging::Complete;
    StatusOr<Priced> panel = Price(op, ReductionChoice{true, true, 0}, &complete);
    if (!panel.ok()) return panel.status();
    const int chunks_per_tile =
        static_cast<int>((g.depth.Largest() + g.phase_k - 1) / g.phase_k);
    log_.Info(ops,
              "lower staging " +
                  std::string(fb::EnumNameStaging(op.recipe->staging)) +
                  (op.recipe->staging == fb::Staging::Batched
                       ? "(" + std::to_string(op.recipe->batch_chunks) + ")"
                       : std::string()),
              Count(chunks_per_tile, "phase") + " of up to " +
                  std::to_string(g.phase_k) + " K columns (chunk_k " +
                  std::to_string(op.recipe->chunk_k) + "), " +
                  Count(as_planned->notes.stage_phases, "exchange phase") +
                  ", " + Count(std::min(chunks_per_tile, 2), "buffer") +
                  " of " +
                  Thousands(as_planned->notes.stage_bytes_per_tile /
                            std::min(chunks_per_tile, 2)) +
                  " B per tile; Complete: 1 phase, one panel of " +
                  Thousands(panel->notes.stage_bytes_per_tile) +
                  " B (numbers: Complete -> as planned)",
              {panel->cost.cycles, as_planned->cost.cycles,
               panel->notes.stage_bytes_per_tile,
               as_planned->notes.stage_bytes_per_tile});
  } else {
    log_.Info(ops, "lower staging Complete",
              "left operand panel in " +
                  Count(as_planned->notes.stage_phases, "exchange phase") +
                  ", " +
                  Thousands(as_planned->notes.stage_bytes_per_tile) +
                  " B per tile",
              {0, as_planned->cost.cycles, 0,
               as_planned->notes.stage_bytes_per_tile});
  }

  if (g.k == 1) {
    op.reduction.reset();
    if (!g.staged || C->dtype == fb::DType::F32) return Status::Ok();
    // A one-partial reduction: the F32 accumulator into the output.
    const int64_t bm = g.rows.Largest(), bn = g.cols.Largest();
    std::vector<kernels::Operand> io = {
        {nullptr, 0, kernels::DType::kF32, 0},
        {nullptr, 0, *kernels::DTypeFromFb(C->dtype), C->fp8_scale_exp}};
    const std::vector<int64_t> cast_params = {bm, bn}, reduce_params = {bm * bn};
    StatusOr<int64_t> cast =
        kernels::Cycles(model_, "cast", io, cast_params, {});
    StatusOr<int64_t> reduce =
        kernels::Cycles(model_, "reduce_partials", io, reduce_params, {});
    if (!cast.ok()) return cast.status();
    if (!reduce.ok()) return reduce.status();
    log_.Info(ops, "convert the accumulator with " + as_planned->notes.converter,
              "staged K chunks accumulate in F32; one " + std::to_string(bm) +
                  "x" + std::to_string(bn) + " block: cast " +
                  Thousands(*cast) + " cycles, reduce_partials with one "
                  "partial " + Thousands(*reduce) + " (numbers: cast -> chosen)",
              {*cast, std::min(*cast, *reduce), 0, 0});
    auto r = std::make_unique<fb::ReductionT>();
    r->partials = 1;
    auto acc = std::make_unique<fb::ScratchBufferT>();
    acc->role = fb::ScratchRole::Initial;
    acc->dtype = fb::DType::F32;
    acc->bytes_per_tile = as_planned->kind_bytes[BufferKind::kPartial];
    acc->reason = "F32 accumulator of the staged K chunks";
    r->scratch.push_back(std::move(acc));
    auto res = std::make_unique<fb::ScratchBufferT>();
    res->role = fb::ScratchRole::Result;
    res->dtype = C->dtype;
    res->elided = true;
    res->reason = "converted straight into the output block";
    r->scratch.push_back(std::move(res));
    r->direct_seed_read = true;
    r->direct_final_write = true;
    op.reduction = std::move(r);
    return Status::Ok();
  }

  // ---- K split: output ranges, then seed, final write and epochs
  StatusOr<std::vector<ReduceRange>> ranges = GemmRanges(module_, op, g);
  if (!ranges.ok()) return ranges.status();
  int seeds = 0, strided = 0;
  for (const ReduceRange& r : *ranges) {
    if (r.seed_ki < 0) continue;
    ++seeds;
    const Segments whole = Consecutive(std::vector<Box>{g.CBox(r.mi, r.ni)});
    strided += !ContiguousOffset(r.box, whole).has_value();
  }
  log_.Info(ops, "reduce K-split partials",
            std::to_string(ranges->size()) + " output ranges, k=" +
                std::to_string(g.k) + " partials each; " +
                std::to_string(seeds) + " have their seed on the reducing "
                "tile, " + std::to_string(strided) +
                " of those are column sub-ranges (strided) of the GEMM's " +
                std::to_string(g.rows.Largest()) + "x" +
                std::to_string(g.cols.Largest()) + " partial block",
            {0, 0, 0, 0});

  ReductionChoice choice{false, false, options_.partials_per_epoch};
  StatusOr<Priced> current = Price(op, choice);
  if (!current.ok()) return current.status();

  // Seed.
  {
    ReductionChoice in_place = choice;
    in_place.seed_in_place = true;
    StatusOr<Priced> p = Price(op, in_place);
    if (!p.ok()) return p.status();
    const std::string action = "read seed partials in place";
    if (p->notes.seeds_in_place == 0) {
      log_.Reject(ops, action,
                  seeds == 0 ? "no range has its seed on the reducing tile"
                             : "seeds are strided in the partial block and the "
                               "weight cannot be placed as column pieces "
                               "(not a single-use host weight): copies kept",
                  Compare(*current, *p));
    } else if (!options_.seed_in_place) {
      log_.Reject(ops, action, "disabled by --seed_in_place=false",
                  Compare(*current, *p));
    } else if (p->cost.cycles > current->cost.cycles ||
               (p->cost.cycles == current->cost.cycles &&
                p->scratch >= current->scratch)) {
      log_.Reject(ops, action,
                  std::string(p->notes.split_partials
                                  ? "cutting the GEMM calls at the seed ranges "
                                    "costs more than copying the seeds"
                                  : "no saving") +
                      ": rejected by cost, before " +
                      Thousands(current->cost.cycles) + ", after " +
                      Thousands(p->cost.cycles),
                  Compare(*current, *p));
    } else {
      const std::string reason =
          p->notes.split_partials
              ? std::to_string(p->notes.seeds_in_place) +
                    " seeds read in place: each tile's GEMM calls are cut at "
                    "the columns of the range it reduces, so its seed is a "
                    "contiguous piece (the weight is placed as matching "
                    "column pieces); saves " +
                    std::to_string(current->notes.seed_copies) +
                    " seed copies of " +
                    Thousands(current->notes.local_copy_runs) + " row copies"
              : std::to_string(p->notes.seeds_in_place) +
                    " seeds are contiguous in the partial block: read in "
                    "place instead of copied";
      if (log_.Apply(ops, action, reason, Compare(*current, *p))) {
        choice = in_place;
        current = std::move(p);
      }
    }
  }
  // Final write.
  {
    ReductionChoice direct = choice;
    direct.direct_final_write = true;
    StatusOr<Priced> p = Price(op, direct);
    if (!p.ok()) return p.status();
    const std::string action = "write results directly into the output";
    if (p->notes.direct_writes == 0) {
      log_.Reject(ops, action,
                  "no output range is contiguous in its output block (ranges "
                  "span several GEMM column blocks): result copies kept",
                  Compare(*current, *p));
    } else if (!options_.direct_final_write) {
      log_.Reject(ops, action, "disabled by --direct_final_write=false",
                  Compare(*current, *p));
    } else if (p->cost.cycles > current->cost.cycles) {
      log_.Reject(ops, action,
                  "rejected by cost, before " + Thousands(current->cost.cycles) +
                      ", after " + Thousands(p->cost.cycles),
                  Compare(*current, *p));
    } else {
      const std::string reason =
          std::to_string(p->notes.direct_writes) + " of " +
          std::to_string(p->notes.ranges) +
          " ranges are contiguous and element-aligned in the output buffer "
          "on the same tile (reduce_partials has no memory-element rule)" +
          (p->notes.result_copies > 0
               ? "; " + std::to_string(p->notes.result_copies) +
                     " are not and keep their copy"
               : std::string());
      if (log_.Apply(ops, action, reason, Compare(*current, *p))) {
        choice = direct;
        current = std::move(p);
      }
    }
  }
  // Epochs: all remote partials at once unless memory says otherwise.
  {
    const std::vector<int64_t> live = LiveBytes(index);
    auto peak = [&](const Priced& p) {
      int64_t most = 0;
      for (int t = 0; t < tiles_; ++t) {
        most = std::max(most, live[t] + p.scratch_per_tile[t]);
      }
      return most;
    };
    const int64_t now = peak(*current);
    if (options_.partials_per_epoch > 0) {
      log_.Info(ops, "receive at most " +
                         std::to_string(options_.partials_per_epoch) +
                         " remote partials per exchange phase",
                "requested by --partials_per_epoch; " +
                    std::to_string(current->notes.reduce_epochs) +
                    " epochs; peak live bytes " + Thousands(now) + " of " +
                    Thousands(capacity_),
                current->Of());
    } else if (now <= capacity_) {
      log_.Info(ops, "receive all " + Count(g.k - 1, "remote partial") +
                         " in one exchange phase",
                "fits: peak live bytes on a tile " + Thousands(now) + " of " +
                    Thousands(capacity_),
                {0, current->cost.cycles, 0, now});
    } else {
      bool fixed = false;
      for (int n = g.k - 2; n >= 1 && !fixed; --n) {
        ReductionChoice staged = choice;
        staged.partials_per_epoch = n;
        StatusOr<Priced> p = Price(op, staged);
        if (!p.ok()) return p.status();
        const int64_t then = peak(*p);
        if (then > capacity_) continue;
        fixed = true;
        if (log_.Apply(ops,
                       "receive " + std::to_string(n) +
                           " remote partials per exchange phase",
                       "all at once needs " + Thousands(now) + " B on a tile, " +
                           "more than " + Thousands(capacity_) + "; " +
                           std::to_string(p->notes.reduce_epochs) +
                           " epochs need " + Thousands(then),
                       {current->cost.cycles, p->cost.cycles, now, then})) {
          choice = staged;
          current = std::move(p);
        }
      }
      if (!fixed) {
        log_.Reject(ops, "stage remote partials over several exchange phases",
                    "even one partial per phase leaves a tile above " +
                        Thousands(capacity_) + " B: emit-device will report it",
                    {current->cost.cycles, current->cost.cycles, now, now});
      }
    }
  }

  // ---- the record
  const OpNotes& n = current->notes;
  auto r = std::make_unique<fb::ReductionT>();
  r->partials = g.k;
  r->direct_seed_read = choice.seed_in_place && n.seeds_in_place > 0;
  r->direct_final_write = choice.direct_final_write && n.direct_writes > 0;
  auto scratch = [&](fb::ScratchRole role, fb::DType dtype, BufferKind kind,
                     bool elided, std::string reason) {
    auto s = std::make_unique<fb::ScratchBufferT>();
    s->role = role;
    s->dtype = dtype;
    s->bytes_per_tile = current->kind_bytes.count(kind) ? current->kind_bytes[kind] : 0;
    s->elided = elided;
    s->reason = std::move(reason);
    r->scratch.push_back(std::move(s));
  };
  scratch(fb::ScratchRole::Initial, fb::DType::F32, BufferKind::kInitial,
          n.seed_copies == 0,
          std::to_string(n.seeds_in_place) + " seeds read in place, " +
              std::to_string(n.seed_copies) + " copied" +
              (n.split_partials ? " (split partials)" : "") +
              (n.no_seed ? ", " + std::to_string(n.no_seed) + " ranges without a local seed"
                         : std::string()));
  {
    auto s = std::make_unique<fb::ScratchBufferT>();
    s->role = fb::ScratchRole::RemotePartials;
    s->dtype = fb::DType::F32;
    s->bytes_per_tile = current->kind_bytes.count(BufferKind::kRemote)
                            ? current->kind_bytes[BufferKind::kRemote]
                            : 0;
    s->reason = Count(n.reduce_epochs, "epoch");
    r->scratch.push_back(std::move(s));
  }
  scratch(fb::ScratchRole::Result, C->dtype, BufferKind::kResult,
          n.result_copies == 0,
          std::to_string(n.direct_writes) + " ranges written directly, " +
              std::to_string(n.result_copies) + " through a result copy" +
              (n.reduce_epochs > 1 ? "; includes an F32 accumulator per range"
                                   : ""));
  const int per = choice.partials_per_epoch > 0 ? choice.partials_per_epoch
                                                : g.k - 1;
  int remaining = g.k - 1;
  for (size_t e = 0; e < current->partial_stages.size(); ++e) {
    auto st = std::make_unique<fb::ReductionStageT>();
    st->epoch = static_cast<int>(e);
    st->partials = std::min(per, remaining);
    remaining -= st->partials;
    st->bytes_per_tile = current->partial_stages[e].bytes_per_tile;
    r->stages.push_back(std::move(st));
  }
  op.reduction = std::move(r);
  return Status::Ok();
}

Status Reducer::Statistics(size_t index) {
  fb::OperationT& op = *module_.ops[index];
  StatusOr<Priced> p = Price(op, ReductionChoice{});
  if (!p.ok()) return p.status();
  const OpNotes& n = p->notes;
  if (n.moment_partials == 0) {
    op.reduction.reset();
    return Status::Ok();
  }
  const bool layer_norm = op.kind == fb::OpKind::LayerNorm;
  const int per_range = n.ranges > 0 ? (n.moment_partials + n.ranges - 1) / n.ranges : 0;
  log_.Info({op.id}, "combine row statistics from column slices",
            std::to_string(n.moment_partials) + " partial moments (mean, M2 per "
            "row) combined into " + std::to_string(n.ranges) +
                " row ranges with Chan's formula in column order" +
                (layer_norm ? " on every slice of a row (all-gather), so each "
                              "slice is normalized with identical statistics"
                            : " on the moments' owners") +
                "; seeds read in place, results written directly",
            {0, p->cost.cycles, 0, p->scratch});
  auto r = std::make_unique<fb::ReductionT>();
  r->partials = per_range;
  r->direct_seed_read = true;
  r->direct_final_write = !layer_norm;
  auto scratch = [&](fb::ScratchRole role, BufferKind kind, bool elided,
                     std::string reason) {
    auto s = std::make_unique<fb::ScratchBufferT>();
    s->role = role;
    s->dtype = fb::DType::F32;
    s->bytes_per_tile = p->kind_bytes.count(kind) ? p->kind_bytes[kind] : 0;
    s->elided = elided;
    s->reason = std::move(reason);
    r->scratch.push_back(std::move(s));
  };
  scratch(fb::ScratchRole::Initial, BufferKind::kPartial, true,
          "each tile's own partial is read in place");
  scratch(fb::ScratchRole::RemotePartials, BufferKind::kRemote, false,
          "the other slices' partials of the same rows");
  scratch(fb::ScratchRole::Result, BufferKind::kResult, !layer_norm,
          layer_norm ? "whole-row statistics for normalize on each slice"
                     : "combined straight into the moments value");
  auto st = std::make_unique<fb::ReductionStageT>();
  st->epoch = 0;
  st->partials = std::max(per_range - 1, 0);
  st->bytes_per_tile = p->partial_stages.empty() ? 0 : p->partial_stages[0].bytes_per_tile;
  r->stages.push_back(std::move(st));
  op.reduction = std::move(r);
  return Status::Ok();
}

Status Reducer::Run() {
  for (size_t i = 0; i < module_.ops.size(); ++i) {
    fb::OperationT& op = *module_.ops[i];
    if (op.kind == fb::OpKind::MatMul) {
      TILEC_RETURN_IF_ERROR(Gemm(i));
    } else if (op.kind == fb::OpKind::LayerNorm ||
               op.kind == fb::OpKind::Moments ||
               (op.kind == fb::OpKind::Fused && op.results.size() == 2)) {
      TILEC_RETURN_IF_ERROR(Statistics(i));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<bool> ExpandReducePass::Transform(fb::ModuleT* module,
                                           passes::DecisionLog* log) {
  if (!module->target) return Status::BadInput("module has no target description");
  for (const auto& v : module->values) {
    if (!v->ownership) {
      return Status::BadInput("value %" + std::to_string(v->id) + " (" +
                              v->name +
                              ") has no ownership: run plan-ownership first");
    }
  }
  StatusOr<kernels::CostModel> model =
      kernels::CostModel::Create(*module->target);
  if (!model.ok()) {
    return Status::BadInput("target '" + module->target->name +
                            "': " + model.status().message());
  }
  Reducer reducer(module, options_, *model, log);
  TILEC_RETURN_IF_ERROR(reducer.Run());
  return true;
}

}  // namespace tilec::lower
