// emit-device's driver: every op lowered in program order (with the
// in-place and K-piece choices priced both ways), repeats' bodies, then
// scheduling, allocation and the program (emitter.h names the files).

#include "passes/lower/emit_device.h"

#include <glog/logging.h>

#include <algorithm>
#include <vector>

#include "formats/allocator.h"
#include "kernels/cost.h"
#include "passes/core/decisions.h"
#include "passes/lower/emitter.h"
#include "passes/lower/lowering.h"

namespace tilec::lower {
namespace {

using passes::Numbers;
using passes::Thousands;

}  // namespace

size_t PhasesPricedAside::Add(const Phase* phase, int64_t* cycles,
                              KeptStarts* starts) {
  std::lock_guard<std::mutex> lock(mutex_);
  CHECK(!finishing_) << "a phase added after Finish";
  jobs_.push_back({phase, cycles, starts});
  if (!thread_.joinable()) {
    thread_ = std::thread([this] { PriceUntilFinished(); });
  }
  added_.notify_one();
  return ++added_count_;
}

void PhasesPricedAside::WaitForFirst(size_t count) {
  std::unique_lock<std::mutex> lock(mutex_);
  CHECK_LE(count, added_count_);
  priced_.wait(lock, [&] { return priced_count_ >= count; });
}

void PhasesPricedAside::Finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finishing_ = true;
  }
  added_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void PhasesPricedAside::PriceUntilFinished() {
  std::vector<const VTransfer*> transfers;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      added_.wait(lock, [this] { return finishing_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    transfers.clear();
    for (const VTransfer& t : job.phase->transfers) transfers.push_back(&t);
    ExchangeCost cost = CostOfExchange(model_, transfers);
    *job.cycles = cost.cycles;
    *job.starts = Keep(std::move(cost.starts));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++priced_count_;
    }
    priced_.notify_all();
  }
}

StatusOr<Emitter::PricedLowering*> Emitter::Price(
    const fb::OperationT& op, bool in_place, bool k_pieces,
    PricedWays* priced) const {
  auto found = priced->ways.find({in_place, k_pieces});
  if (found != priced->ways.end()) return &found->second;
  PricedLowering way{lowering_, {}, {}, {}, 0};
  StatusOr<OpProgram> p = way.state.Lower(
      op, ChoiceFromReduction(op.reduction.get()), in_place, k_pieces);
  if (!p.ok()) return p.status();
  for (const Phase& ph : p->phases) {
    StatusOr<PhaseCost> c = CostOfPhase(model_, way.state.buffers(), ph,
                                        tiles_, &priced->exchanges);
    if (!c.ok()) return c.status();
    way.alone.push_back(c->cycles);
    way.alone_starts.push_back(Keep(std::move(c->starts)));
    way.cycles += c->cycles;
  }
  way.program = std::move(*p);
  return &priced->ways
              .emplace(std::make_pair(in_place, k_pieces), std::move(way))
              .first->second;
}

// Whether to use the op's operand in place, priced both ways on the op
// alone, its operands stored as the ops before it left them.
StatusOr<bool> Emitter::ChooseInPlace(const fb::OperationT& op,
                                      PricedWays* priced) {
  StatusOr<int> aliasable = lowering_.AliasableTiles(op);
  if (!aliasable.ok()) return aliasable.status();
  if (!options_.alias_in_place || *aliasable == 0) {
    return options_.alias_in_place;
  }
  Numbers numbers;
  for (bool in_place : {false, true}) {
    StatusOr<PricedLowering*> p = Price(op, in_place, false, priced);
    if (!p.ok()) return p.status();
    (in_place ? numbers.cycles_after : numbers.cycles_before) = (*p)->cycles;
    (in_place ? numbers.bytes_after : numbers.bytes_before) =
        (*p)->state.ScratchBytesPerTile(op.id);
  }
  const std::string what = op.kind == fb::OpKind::MatMul
                               ? "use the left operand in place"
                               : "use the source buffer in place";
  const bool alias = log_.Apply(
      {op.id}, what,
      std::to_string(*aliasable) +
          " tiles already hold exactly the block they need, contiguous "
          "and in the right order: no staging copy or transfer",
      numbers);
  priced->ways.erase({!alias, false});
  return alias;
}

// K pieces in staged panels: per tile they trade GEMM calls for row copies;
// whether the op gains depends on its slowest tiles, so the op is priced
// both ways, on the real storage of the left operand (where it is stored
// in pieces, K pieces save a copy per row of each piece).
StatusOr<bool> Emitter::ChooseKPieces(const fb::OperationT& op, bool alias,
                                      PricedWays* priced) {
  if (op.kind != fb::OpKind::MatMul) return false;
  Numbers numbers;
  int pieced = 0;
  for (bool on : {false, true}) {
    StatusOr<PricedLowering*> p = Price(op, alias, on, priced);
    if (!p.ok()) return p.status();
    (on ? numbers.cycles_after : numbers.cycles_before) = (*p)->cycles;
    (on ? numbers.bytes_after : numbers.bytes_before) =
        (*p)->state.ScratchBytesPerTile(op.id);
    if (on) pieced = (*p)->state.notes(op.id).k_pieced_tiles;
  }
  const std::string action =
      "cut staged panels into K pieces at locally held columns";
  if (pieced == 0) return false;  // nothing to decide: no tile would gain
  if (numbers.cycles_after < numbers.cycles_before) {
    return log_.Apply(
        {op.id}, action,
        std::to_string(pieced) +
            " tiles copy their local part of the left operand in one "
            "call per piece instead of one per row, for extra GEMM calls",
        numbers);
  }
  log_.Reject({op.id}, action,
              std::to_string(pieced) +
                  " tiles would gain, but the op's slowest phases do "
                  "not: rejected by cost, before " +
                  Thousands(numbers.cycles_before) + ", after " +
                  Thousands(numbers.cycles_after),
              numbers);
  return false;
}

// Lowers `op` the chosen way: the priced copy when there is one (the same
// lowering), else on the lowering itself.
Status Emitter::LowerOp(const fb::OperationT& op, bool alias, bool k_pieces,
                        PricedWays* priced) {
  OpWork w;
  w.op = &op;
  auto chosen = priced->ways.find({alias, k_pieces});
  if (chosen != priced->ways.end()) {
    lowering_ = std::move(chosen->second.state);
    w.program = std::move(chosen->second.program);
    w.alone = std::move(chosen->second.alone);
    w.alone_starts = std::move(chosen->second.alone_starts);
  } else {
    StatusOr<OpProgram> p = lowering_.Lower(
        op, ChoiceFromReduction(op.reduction.get()), alias, k_pieces);
    if (!p.ok()) return p.status();
    w.program = std::move(*p);
    TILEC_RETURN_IF_ERROR(PriceAlone(&w));
  }
  priced->ways.clear();
  for (const Phase& ph : w.program.phases) {
    std::vector<int64_t> cycles;
    for (const VCall& c : ph.calls) {
      StatusOr<int64_t> cc = CallCycles(model_, lowering_.buffers(), c);
      if (!cc.ok()) {
        return Status::Internal("op " + std::to_string(c.op) + " " +
                                c.kernel + ": " + cc.status().message());
      }
      cycles.push_back(*cc);
    }
    w.call_cycles.push_back(std::move(cycles));
  }
  VLOG(1) << "lowered op " << op.id << " " << op.name << ": "
          << w.program.phases.size() << " phases, "
          << lowering_.buffers().size() << " buffers so far";
  work_.push_back(std::move(w));
  return Status::Ok();
}

// The cycles of each of w's phases on a superstep of its own: compute here,
// exchanges aside (PhasesPricedAside; w->priced_aside says when they are
// in). Moving w keeps the phases and the prices' places (the vectors'
// elements stay where they are).
Status Emitter::PriceAlone(OpWork* w) {
  const std::vector<Phase>& phases = w->program.phases;
  w->alone.assign(phases.size(), 0);
  w->alone_starts.assign(phases.size(), nullptr);
  for (size_t i = 0; i < phases.size(); ++i) {
    if (phases[i].kind == Phase::Kind::kExchange &&
        !phases[i].transfers.empty()) {
      w->priced_aside =
          priced_aside_.Add(&phases[i], &w->alone[i], &w->alone_starts[i]);
      continue;
    }
    StatusOr<PhaseCost> pc =
        CostOfPhase(model_, lowering_.buffers(), phases[i], tiles_);
    if (!pc.ok()) return pc.status();
    w->alone[i] = pc->cycles;
    w->alone_starts[i] = Keep(std::move(pc->starts));
  }
  return Status::Ok();
}

Status Emitter::LowerAll() {
  for (const auto& op : module_.ops) {
    if (op->kind == fb::OpKind::MatMul && op->recipe &&
        op->recipe->k_split > 1 && !op->reduction) {
      return Status::BadInput("op " + std::to_string(op->id) + " (" + op->name +
                              ") has k_split=" +
                              std::to_string(op->recipe->k_split) +
                              " but no reduction: run expand-reduce first");
    }
    PricedWays priced;
    StatusOr<bool> alias = ChooseInPlace(*op, &priced);
    if (!alias.ok()) return alias.status();
    StatusOr<bool> k_pieces = ChooseKPieces(*op, *alias, &priced);
    if (!k_pieces.ok()) return k_pieces.status();
    TILEC_RETURN_IF_ERROR(LowerOp(*op, *alias, *k_pieces, &priced));
  }
  return Status::Ok();
}

Status Emitter::FindBodies() {
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(module_);
  if (!bodies.ok()) return bodies.status();
  body_of_.assign(module_.ops.size(), -1);
  for (size_t k = 0; k < bodies->size(); ++k) {
    const ir::RepeatBody& body = (*bodies)[k];
    for (size_t r = body.begin; r < body.end; ++r) {
      body_of_[r] = static_cast<int>(k);
    }
  }
  bodies_.clear();
  for (const ir::RepeatBody& body : *bodies) {
    BodyLowering b;
    b.body = body;
    bodies_.push_back(std::move(b));
    // Each iteration leaves its result where the next one reads it.
    lowering_.StoreIn(body.repeat->carried_out, body.repeat->carried_in);
  }
  return Status::Ok();
}

Status Emitter::LowerRepeats() {
  for (BodyLowering& b : bodies_) {
    StatusOr<BodyLowering> lowered = LowerRepeat(b.body, &lowering_);
    if (!lowered.ok()) return lowered.status();
    b = std::move(*lowered);
  }
  return Status::Ok();
}

std::set<uint32_t> Emitter::SharedOpsAtFailure(
    const std::vector<ShareEvent>& events) const {
  std::set<uint32_t> ops;
  for (const ShareEvent& e : events) {
    if (e.shared && failure_ops_.count(e.op)) ops.insert(e.op);
  }
  return ops;
}

Status Emitter::ScheduleWithinMemory(int64_t remaining,
                                     std::vector<ShareEvent>* events,
                                     std::string* failure, bool* fits) {
  const bool share = options_.share_supersteps;
  for (;;) {
    events->clear();
    Schedule(share, remaining, events);
    TILEC_RETURN_IF_ERROR(Allocate(failure, fits));
    if (*fits || !share || events->empty()) return Status::Ok();
    std::set<uint32_t> apart = SharedOpsAtFailure(*events);
    for (uint32_t op : kept_apart_) apart.erase(op);
    if (apart.empty()) break;
    kept_apart_.insert(apart.begin(), apart.end());
    std::string ids;
    for (uint32_t op : apart) {
      ids += (ids.empty() ? "" : ",") + std::to_string(op);
    }
    log_.Reject(std::vector<uint32_t>(apart.begin(), apart.end()),
                "keep ops (" + ids + ") in supersteps of their own",
                "memory does not fit with them sharing (" +
                    failure_summary_ + ")",
                {0, 0, 0, 0});
  }
  log_.Reject({}, "share supersteps between ops",
              "memory does not fit with shared supersteps (" + *failure +
                  "); rebuilt with one op per superstep",
              {0, 0, 0, 0});
  events->clear();
  Schedule(false, remaining, events);
  return Allocate(failure, fits);
}

Status Emitter::Run(EmitSummary* summary) {
  TILEC_RETURN_IF_ERROR(FindBodies());
  TILEC_RETURN_IF_ERROR(LowerAll());
  TILEC_RETURN_IF_ERROR(LowerRepeats());
  std::vector<ShareEvent> events;
  std::string failure;
  bool fits = false;
  // Schedule waits for each op's prices as it comes to the op.
  TILEC_RETURN_IF_ERROR(
      ScheduleWithinMemory(log_.remaining(), &events, &failure, &fits));
  priced_aside_.Finish();
  if (!fits) return Status::Infeasible(failure);
  const bool shared =
      options_.share_supersteps &&
      std::any_of(events.begin(), events.end(),
                  [](const ShareEvent& e) { return e.shared; });
  for (const ShareEvent& e : events) {
    if (e.shared) {
      log_.Apply({e.op}, e.action, e.reason, e.numbers);
    } else {
      log_.Reject({e.op}, e.action, e.reason, e.numbers);
    }
  }
  EmitSummary sum;
  Build(&sum);
  sum.shared = shared;
  if (summary) *summary = sum;
  return Status::Ok();
}

StatusOr<bool> EmitDevicePass::Transform(fb::ModuleT* module,
                                         passes::DecisionLog* log) {
  if (!module->target) {
    return Status::BadInput("module has no target description");
  }
  TILEC_RETURN_IF_ERROR(CheckPlanned(*module));
  StatusOr<kernels::CostModel> model = kernels::CostModel::Create(*module->target);
  if (!model.ok()) {
    return Status::BadInput("target '" + module->target->name +
                            "': " + model.status().message());
  }
  {
    Emitter emitter(module, options_, *model, log);
    TILEC_RETURN_IF_ERROR(emitter.Run(&summary_));
  }
  // The emitter's data (hundreds of MB on a whole model) was freed in small
  // blocks among the program's: give the free pages back before the
  // program is packed beside it.
  ReleaseFreedMemory();
  return true;
}

}  // namespace tilec::lower
