#include "passes/lower/expand_reduce.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <compare>
#include <iostream>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "formats/target.h"
#include "formats/print.h"
#include "kernels/cost.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "passes/core/decisions.h"
#include "passes/core/ownership.h"
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

std::unique_ptr<fb::ScratchBufferT> Scratch(fb::ScratchRole role,
                                            fb::DType dtype, int64_t bytes,
                                            bool elided, std::string reason) {
  auto s = std::make_unique<fb::ScratchBufferT>();
  s->role = role;
  s->dtype = dtype;
  s->bytes_per_tile = bytes;
  s->elided = elided;
  s->reason = std::move(reason);
  return s;
}

// Whether op reduces row statistics over column slices where it is split
// so (Reducer::Statistics): a LayerNorm, Moments, fused moments.
bool ReducesStatistics(const fb::OperationT& op) {
  return op.kind == fb::OpKind::LayerNorm || op.kind == fb::OpKind::Moments ||
         (op.kind == fb::OpKind::Fused && op.results.size() == 2);
}

class Reducer {
 public:
  Reducer(fb::ModuleT* module, const ExpandReduceOptions& options,
          const kernels::CostModel& model, DecisionLog* log)
      : module_(*module), options_(options), model_(model), log_(*log) {
    tiles_ = module->target->tiles;
    capacity_ = ir::MaxTileTensorBytes(*module->target);
  }

  Status Run();

 private:
  // A lowering to price: the op (by index), the reduction, and whether its
  // staging is Complete instead of the recipe's (LogStaging's panel).
  struct PriceKey {
    size_t index = 0;
    fb::DType partials = fb::DType::F32;
    int partials_per_epoch = 0;
    bool complete = false;
    auto operator<=>(const PriceKey&) const = default;
  };
  // The op's price: PriceAhead's if it made it (a K-split GEMM asks for
  // its price as planned twice), else lowered here.
  StatusOr<Priced> Price(size_t index, const ReductionChoice& choice,
                         bool complete = false);
  StatusOr<Priced> Lower(const PriceKey& key) const;
  // Prices, on two threads, the lowerings the decisions are sure to ask
  // for: every reducing op as planned, a staged GEMM's Complete panel and
  // a K-split GEMM's partials in the result's 16-bit dtype. A price
  // depends on its op, its choice and the graph's values alone, none of
  // which a decision changes (they fill each op's own reduction), so the
  // decisions are the ones pricing each when asked makes.
  void PriceAhead();
  // Bytes per tile of every value live while op `index` runs (weights are
  // resident), without the op's scratch.
  std::vector<int64_t> LiveBytes(size_t index) const;
  Status Gemm(size_t index);
  Status LogStaging(size_t index, const GemmGrid& g, const Priced& as_planned);
  Status RecordConversion(fb::OperationT* op, const GemmGrid& g,
                          const Priced& as_planned);
  StatusOr<Priced> ChoosePartials(size_t index, const GemmGrid& g,
                                  ReductionChoice* choice);
  Status ChooseEpochs(const fb::OperationT& op, const GemmGrid& g,
                      size_t index, ReductionChoice* choice, Priced* current);
  void RecordReduction(fb::OperationT* op, const GemmGrid& g,
                       const ReductionChoice& choice, const Priced& current);
  const fb::ValueT* Value(uint32_t id) const {
    for (const auto& v : module_.values) {
      if (v->id == id) return v.get();
    }
    return nullptr;
  }
  // LayerNorm over split rows, Moments, fused moments over column slices.
  Status Statistics(size_t index);

  fb::ModuleT& module_;
  const ExpandReduceOptions& options_;
  kernels::CostModel model_;
  DecisionLog& log_;
  int tiles_ = 0;
  int64_t capacity_ = 0;
  std::map<PriceKey, StatusOr<Priced>> ahead_;  // PriceAhead's
};

StatusOr<Priced> Reducer::Price(size_t index, const ReductionChoice& choice,
                                bool complete) {
  const PriceKey key{index, choice.partials, choice.partials_per_epoch,
                     complete};
  auto it = ahead_.find(key);
  if (it == ahead_.end()) return Lower(key);
  return it->second;
}

void Reducer::PriceAhead() {
  std::vector<PriceKey> keys;
  for (size_t i = 0; i < module_.ops.size(); ++i) {
    const fb::OperationT& op = *module_.ops[i];
    if (ReducesStatistics(op)) {
      keys.push_back({i});
      continue;
    }
    if (op.kind != fb::OpKind::MatMul || !op.recipe ||
        op.recipe->kind != fb::RecipeKind::Gemm) {
      continue;
    }
    StatusOr<GemmGrid> g = ReadGemmGrid(module_, op);
    if (!g.ok()) continue;  // Gemm reports it
    keys.push_back({i});
    if (g->staged) keys.push_back({.index = i, .complete = true});
    const fb::DType narrow =
        passes::PartialsDType(*g, Value(op.results[0])->dtype, true);
    if (g->k > 1 && narrow != fb::DType::F32) {
      keys.push_back({.index = i,
                      .partials = narrow,
                      .partials_per_epoch = options_.partials_per_epoch});
    }
  }
  std::vector<std::optional<StatusOr<Priced>>> priced(keys.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next++) < keys.size();) priced[k] = Lower(keys[k]);
  };
  {
    std::jthread second(work);
    work();
  }
  for (size_t k = 0; k < keys.size(); ++k) {
    ahead_.emplace(keys[k], std::move(*priced[k]));
  }
}

StatusOr<Priced> Reducer::Lower(const PriceKey& key) const {
  const fb::OperationT& op = *module_.ops[key.index];
  const ReductionChoice choice{key.partials, key.partials_per_epoch};
  fb::OperationT copy;
  const fb::OperationT* target = &op;
  if (key.complete) {
    copy.id = op.id;
    copy.kind = op.kind;
    copy.name = op.name;
    copy.operands = op.operands;
    copy.results = op.results;
    copy.recipe = std::make_unique<fb::RecipeT>(*op.recipe);
    copy.recipe->layout = std::make_unique<fb::OwnershipT>(*op.recipe->layout);
    copy.recipe->staging = fb::Staging::Complete;
    target = &copy;
  }
  Lowering lowering(module_, model_, LoweringOptions{true, true});
  StatusOr<OpProgram> program = lowering.Lower(*target, choice);
  if (!program.ok()) return program.status();
  VLOG(1) << "priced op " << op.id << " " << op.name << " with "
          << ir::DTypeText(choice.partials) << " partials, "
          << choice.partials_per_epoch << " partials per epoch"
          << (key.complete ? " (Complete staging)" : "");
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
  StatusOr<Priced> as_planned = Price(index, ReductionChoice{});
  if (!as_planned.ok()) return as_planned.status();
  TILEC_RETURN_IF_ERROR(LogStaging(index, g, *as_planned));
  if (g.k == 1) return RecordConversion(&op, g, *as_planned);
  ReductionChoice choice;
  choice.partials_per_epoch = options_.partials_per_epoch;
  StatusOr<Priced> current = ChoosePartials(index, g, &choice);
  if (!current.ok()) return current.status();
  TILEC_RETURN_IF_ERROR(ChooseEpochs(op, g, index, &choice, &*current));
  RecordReduction(&op, g, choice, *current);
  return Status::Ok();
}

// How the left operand's staging is lowered, against one Complete panel.
Status Reducer::LogStaging(size_t index, const GemmGrid& g,
                           const Priced& as_planned) {
  const fb::OperationT& op = *module_.ops[index];
  const std::vector<uint32_t> ops = {op.id};
  if (!g.staged) {
    log_.Info(ops, "lower staging Complete",
              "left operand panel in " +
                  Count(as_planned.notes.stage_phases, "exchange phase") +
                  ", " + Thousands(as_planned.notes.stage_bytes_per_tile) +
                  " B per tile",
              {0, as_planned.cost.cycles, 0,
               as_planned.notes.stage_bytes_per_tile});
    return Status::Ok();
  }
  StatusOr<Priced> panel = Price(index, ReductionChoice{}, /*complete=*/true);
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
                Count(as_planned.notes.stage_phases, "exchange phase") + ", " +
                Count(std::min(chunks_per_tile, 2), "buffer") + " of " +
                Thousands(as_planned.notes.stage_bytes_per_tile /
                          std::min(chunks_per_tile, 2)) +
                " B per tile; Complete: 1 phase, one panel of " +
                Thousands(panel->notes.stage_bytes_per_tile) +
                " B (numbers: Complete -> as planned)",
            {panel->cost.cycles, as_planned.cost.cycles,
             panel->notes.stage_bytes_per_tile,
             as_planned.notes.stage_bytes_per_tile});
  return Status::Ok();
}

// k = 1: no reduction, except a one-partial one where staged calls
// accumulate in F32 and the accumulator is converted into the output.
Status Reducer::RecordConversion(fb::OperationT* op, const GemmGrid& g,
                                 const Priced& as_planned) {
  op->reduction.reset();
  const fb::ValueT* C = Value(op->results[0]);
  if (!g.staged || C->dtype == fb::DType::F32) return Status::Ok();
  const int64_t bm = g.rows.Largest(), bn = g.cols.Largest();
  std::vector<kernels::Operand> io = {
      {nullptr, 0, kernels::DType::kF32, 0},
      {nullptr, 0, *kernels::DTypeFromFb(C->dtype), C->fp8_scale_exp}};
  const std::vector<int64_t> cast_params = {bm, bn}, reduce_params = {bm * bn};
  StatusOr<int64_t> cast =
      kernels::Cycles(model_, kernels::names::kCast, io, cast_params, {});
  StatusOr<int64_t> reduce = kernels::Cycles(
      model_, kernels::names::kReducePartials, io, reduce_params, {});
  if (!cast.ok()) return cast.status();
  if (!reduce.ok()) return reduce.status();
  log_.Info({op->id}, "convert the accumulator with " + as_planned.notes.converter,
            "staged K chunks accumulate in F32; one " + std::to_string(bm) +
                "x" + std::to_string(bn) + " block: cast " + Thousands(*cast) +
                " cycles, reduce_partials with one partial " +
                Thousands(*reduce) + " (numbers: cast -> chosen)",
            {*cast, std::min(*cast, *reduce), 0, 0});
  auto r = std::make_unique<fb::ReductionT>();
  r->partials = 1;
  r->direct_seed_read = true;
  r->direct_final_write = true;
  r->scratch.push_back(Scratch(fb::ScratchRole::Initial, fb::DType::F32,
                               as_planned.kind_bytes.count(BufferKind::kPartial)
                                   ? as_planned.kind_bytes.at(BufferKind::kPartial)
                                   : 0,
                               false, "F32 accumulator of the staged K chunks"));
  r->scratch.push_back(Scratch(fb::ScratchRole::Result, C->dtype, 0, true,
                               "converted straight into the output block"));
  op->reduction = std::move(r);
  return Status::Ok();
}

// K split: partials in the result's 16-bit dtype where every tile writes
// its partial with one call and that is cheaper (half the exchange), else
// F32.
StatusOr<Priced> Reducer::ChoosePartials(size_t index, const GemmGrid& g,
                                         ReductionChoice* choice) {
  const fb::OperationT& op = *module_.ops[index];
  const std::vector<uint32_t> ops = {op.id};
  StatusOr<Priced> wide = Price(index, *choice);
  if (!wide.ok()) return wide.status();
  const fb::DType result = Value(op.results[0])->dtype;
  const fb::DType narrow = passes::PartialsDType(g, result, true);
  const std::string action =
      "keep the " + Count(g.k, "partial") + " in " + ir::DTypeText(narrow);
  if (narrow == fb::DType::F32) {
    log_.Info(ops, "keep the " + Count(g.k, "partial") + " in f32",
              g.staged ? "staged calls accumulate in F32"
                       : "the result is " + ir::DTypeText(result),
              wide->Of());
    return wide;
  }
  ReductionChoice half = *choice;
  half.partials = narrow;
  StatusOr<Priced> p = Price(index, half);
  if (!p.ok()) return p.status();
  if (!options_.allow_16bit_partials) {
    log_.Reject(ops, action, "disabled by --f16_partials=false",
                Compare(*wide, *p));
    return wide;
  }
  if (p->cost.cycles > wide->cost.cycles) {
    log_.Reject(ops, action,
                "rejected by cost: before " + Thousands(wide->cost.cycles) +
                    ", after " + Thousands(p->cost.cycles),
                Compare(*wide, *p));
    return wide;
  }
  const std::string reason =
      "one call per tile writes its " + std::to_string(g.rows.Largest()) +
      "x" + std::to_string(g.cols.Largest()) +
      " partial rounded once; half the partials' exchange of f32: before " +
      Thousands(wide->cost.cycles) + ", after " + Thousands(p->cost.cycles);
  if (!log_.Apply(ops, action, reason, Compare(*wide, *p))) return wide;
  *choice = half;
  return p;
}

// All remote partials in one exchange phase unless memory says otherwise.
Status Reducer::ChooseEpochs(const fb::OperationT& op, const GemmGrid& g,
                             size_t index, ReductionChoice* choice,
                             Priced* current) {
  const std::vector<uint32_t> ops = {op.id};
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
    log_.Info(ops,
              "receive at most " + std::to_string(options_.partials_per_epoch) +
                  " remote partials per exchange phase",
              "requested by --partials_per_epoch; " +
                  std::to_string(current->notes.reduce_epochs) +
                  " epochs; peak live bytes " + Thousands(now) + " of " +
                  Thousands(capacity_),
              current->Of());
    return Status::Ok();
  }
  if (now <= capacity_) {
    log_.Info(ops,
              "receive all " + Count(g.k - 1, "remote partial") +
                  " in one exchange phase",
              "fits: peak live bytes on a tile " + Thousands(now) + " of " +
                  Thousands(capacity_),
              {0, current->cost.cycles, 0, now});
    return Status::Ok();
  }
  for (int n = g.k - 2; n >= 1; --n) {
    ReductionChoice staged = *choice;
    staged.partials_per_epoch = n;
    StatusOr<Priced> p = Price(index, staged);
    if (!p.ok()) return p.status();
    const int64_t then = peak(*p);
    if (then > capacity_) continue;
    if (log_.Apply(ops,
                   "receive " + std::to_string(n) +
                       " remote partials per exchange phase",
                   "all at once needs " + Thousands(now) + " B on a tile, " +
                       "more than " + Thousands(capacity_) + "; " +
                       std::to_string(p->notes.reduce_epochs) +
                       " epochs need " + Thousands(then),
                   {current->cost.cycles, p->cost.cycles, now, then})) {
      *choice = staged;
      *current = std::move(*p);
    }
    return Status::Ok();
  }
  log_.Reject(ops, "stage remote partials over several exchange phases",
              "even one partial per phase leaves a tile above " +
                  Thousands(capacity_) + " B: emit-device will report it",
              {current->cost.cycles, current->cost.cycles, now, now});
  return Status::Ok();
}

// Every tile reduces its rows of its block: its own partial read in place,
// the result written straight into the output.
void Reducer::RecordReduction(fb::OperationT* op, const GemmGrid& g,
                              const ReductionChoice& choice,
                              const Priced& current) {
  const OpNotes& n = current.notes;
  auto bytes = [&](BufferKind kind) {
    return current.kind_bytes.count(kind) ? current.kind_bytes.at(kind) : 0;
  };
  auto r = std::make_unique<fb::ReductionT>();
  r->partials = g.k;
  r->direct_seed_read = true;
  r->direct_final_write = true;
  r->scratch.push_back(Scratch(
      fb::ScratchRole::Initial, choice.partials, 0, true,
      "each tile's own rows of its partial, read in place (" +
          Count(n.seeds_in_place, "tile") + ")"));
  r->scratch.push_back(Scratch(fb::ScratchRole::RemotePartials, choice.partials,
                               bytes(BufferKind::kRemote), false,
                               Count(n.reduce_epochs, "epoch")));
  r->scratch.push_back(Scratch(
      fb::ScratchRole::Result, Value(op->results[0])->dtype,
      bytes(BufferKind::kResult), n.reduce_epochs == 1,
      "reduced straight into the output" +
          std::string(n.reduce_epochs > 1 ? "; an F32 accumulator between epochs"
                                          : "")));
  const int per = choice.partials_per_epoch > 0 ? choice.partials_per_epoch
                                                : g.k - 1;
  int remaining = g.k - 1;
  for (size_t e = 0; e < current.partial_stages.size(); ++e) {
    auto st = std::make_unique<fb::ReductionStageT>();
    st->epoch = static_cast<int>(e);
    st->partials = std::min(per, remaining);
    remaining -= st->partials;
    st->bytes_per_tile = current.partial_stages[e].bytes_per_tile;
    r->stages.push_back(std::move(st));
  }
  op->reduction = std::move(r);
}

Status Reducer::Statistics(size_t index) {
  fb::OperationT& op = *module_.ops[index];
  StatusOr<Priced> p = Price(index, ReductionChoice{});
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
  auto bytes = [&](BufferKind kind) {
    return p->kind_bytes.count(kind) ? p->kind_bytes.at(kind) : 0;
  };
  r->scratch.push_back(Scratch(fb::ScratchRole::Initial, fb::DType::F32,
                               bytes(BufferKind::kPartial), true,
                               "each tile's own partial is read in place"));
  r->scratch.push_back(Scratch(fb::ScratchRole::RemotePartials, fb::DType::F32,
                               bytes(BufferKind::kRemote), false,
                               "the other slices' partials of the same rows"));
  r->scratch.push_back(Scratch(
      fb::ScratchRole::Result, fb::DType::F32, bytes(BufferKind::kResult),
      !layer_norm,
      layer_norm ? "whole-row statistics for normalize on each slice"
                 : "combined straight into the moments value"));
  auto st = std::make_unique<fb::ReductionStageT>();
  st->epoch = 0;
  st->partials = std::max(per_range - 1, 0);
  st->bytes_per_tile = p->partial_stages.empty() ? 0 : p->partial_stages[0].bytes_per_tile;
  r->stages.push_back(std::move(st));
  op.reduction = std::move(r);
  return Status::Ok();
}

Status Reducer::Run() {
  PriceAhead();
  for (size_t i = 0; i < module_.ops.size(); ++i) {
    fb::OperationT& op = *module_.ops[i];
    if (op.kind == fb::OpKind::MatMul) {
      TILEC_RETURN_IF_ERROR(Gemm(i));
    } else if (ReducesStatistics(op)) {
      TILEC_RETURN_IF_ERROR(Statistics(i));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<bool> ExpandReducePass::Transform(fb::ModuleT* module,
                                           passes::DecisionLog* log) {
  if (!module->target) return Status::BadInput("module has no target description");
  TILEC_RETURN_IF_ERROR(CheckPlanned(*module));
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
