#include "passes/lower/emit_device.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "formats/print.h"
#include "kernels/cost.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "passes/lower/allocate.h"
#include "passes/core/decisions.h"
#include "passes/lower/lowering.h"
#include "passes/lower/program.h"
#include "passes/lower/repeat_lowering.h"

namespace tilec::lower {
namespace {

using passes::Count;
using passes::DecisionLog;
using passes::Numbers;
using passes::Thousands;

constexpr int64_t kForever = std::numeric_limits<int64_t>::max() / 4;

std::string OpText(const fb::OperationT& op) {
  return "(" + std::to_string(op.id) + ") " + op.name;
}

// Binary elementwise kernels (MemoryRule::kBinaryInputs in the registry):
// their two inputs should be in different memory elements.
bool IsBinaryKernel(const std::string& kernel) {
  const kernels::KernelInfo* info = kernels::FindKernel(kernel);
  return info != nullptr &&
         info->memory_rule == kernels::MemoryRule::kBinaryInputs;
}

// One lowered op and where its phases went.
struct OpWork {
  const fb::OperationT* op = nullptr;
  OpProgram program;
  std::vector<std::vector<int64_t>> call_cycles;  // per phase, per call
  std::vector<int64_t> alone;                     // per phase, own superstep
  std::vector<int> step;                          // per phase
};

// What a superstep holds so far, for pricing a merge.
struct StepLoad {
  std::vector<int64_t> compute;  // per tile
  std::vector<const VTransfer*> transfers;  // its exchange phase, in order
  bool has_compute = false;
  bool has_exchange = false;
};

// Schedule's state as it walks the ops in order: when each value is ready,
// what each superstep holds, how many sharing decisions were taken.
struct ScheduleState {
  explicit ScheduleState(int tiles) : tiles(tiles) {}
  // The load of superstep `s`, created empty on first use.
  StepLoad& Load(int s) {
    while (static_cast<int>(loads.size()) <= s) {
      StepLoad l;
      l.compute.assign(tiles, 0);
      loads.push_back(std::move(l));
    }
    return loads[s];
  }
  int tiles;
  std::map<uint32_t, int> ready_c, ready_x;  // missing: ready at 0
  std::vector<StepLoad> loads;
  int last_used = -1;
  int64_t budget_used = 0;
};

int ReadyAt(const std::map<uint32_t, int>& ready, uint32_t value) {
  auto it = ready.find(value);
  return it == ready.end() ? 0 : it->second;
}

// Superstep offsets of the phases relative to the first: an exchange right
// after a compute shares its superstep.
std::vector<int> PhaseOffsets(const std::vector<Phase>& phases) {
  std::vector<int> offset(phases.size(), 0);
  for (size_t i = 1; i < phases.size(); ++i) {
    const bool prev_compute = phases[i - 1].kind == Phase::Kind::kCompute;
    const bool cur_exchange = phases[i].kind == Phase::Kind::kExchange;
    offset[i] = offset[i - 1] + (prev_compute && cur_exchange ? 0 : 1);
  }
  return offset;
}

// Adds `transfers` to a superstep's exchange phase.
void AddTransfers(const std::vector<VTransfer>& transfers, StepLoad* load) {
  for (const VTransfer& t : transfers) load->transfers.push_back(&t);
}

// Binary kernel calls sent to the slow path, per op: calls, extra cycles.
using SlowCalls = std::map<uint32_t, std::pair<int64_t, int64_t>>;

std::unique_ptr<fb::BufferSliceT> EmitSlice(const VSlice& s,
                                            const std::vector<int64_t>& id_of) {
  auto out = std::make_unique<fb::BufferSliceT>();
  out->buffer = static_cast<uint32_t>(id_of[s.buffer]);
  out->offset = static_cast<uint32_t>(s.offset);
  out->bytes = static_cast<uint32_t>(s.bytes);
  return out;
}

// `call` with its arguments in the buffers an iteration's renames give.
VCall Renamed(const VCall& call, const std::map<int, int>& renames) {
  VCall out = call;
  for (VSlice& a : out.args) {
    auto it = renames.find(a.buffer);
    if (it != renames.end()) a.buffer = it->second;
  }
  return out;
}

class Emitter {
 public:
  Emitter(fb::ModuleT* module, const EmitOptions& options,
          const kernels::CostModel& model, DecisionLog* log)
      : module_(*module), options_(options), model_(model),
        lowering_(*module, model, LoweringOptions{options.alias_in_place, false}),
        log_(*log) {
    tiles_ = module->target->tiles;
    map_ = MemoryMap::FromTarget(*module->target);
  }

  Status Run(EmitSummary* summary);

 private:
  Status LowerAll();
  // Places every op's phases; `share` lets ops share supersteps. Decisions
  // are collected in `events` (applied through the log afterwards).
  struct ShareEvent {
    uint32_t op;
    std::string action, reason;
    Numbers numbers;
  };
  void Schedule(bool share, int64_t remaining, std::vector<ShareEvent>* events);
  // Schedule's phases, per op in order.
  void PassReadinessThrough(const OpWork& w, ScheduleState* st) const;
  int EarliestStep(const OpWork& w, const ScheduleState& st) const;
  int ChooseSharedStart(const OpWork& w, const std::vector<int>& offset,
                        int earliest, int fresh, int64_t limit,
                        ScheduleState* st, std::vector<ShareEvent>* events);
  Numbers PriceMerge(const OpWork& w, const std::vector<int>& offset,
                     int earliest, ScheduleState* st,
                     std::vector<int>* shared_steps) const;
  std::set<uint32_t> OpsInSteps(const OpWork& w,
                                const std::vector<int>& steps) const;
  void PlacePhases(int start, const std::vector<int>& offset, OpWork* w,
                   ScheduleState* st) const;
  void MarkResultsReady(const OpWork& w, ScheduleState* st) const;
  Status Allocate(std::string* failure_message, bool* fits);
  bool AllocateAroundBoundary(const MemoryMap& map,
                              const std::vector<AllocBuffer>& buffers,
                              const std::vector<AllocRule>& rules,
                              AllocResult* result) const;
  // Code in tile memory (docs/device-program.md, "Memory"): each tile's
  // runtime, program code and exchange tables for the supersteps as
  // scheduled, in whole standard elements below its tensors. Infeasible
  // when a tile's code does not fit in standard memory.
  Status SizeCode();
  std::vector<const VTransfer*> TransfersOf(int superstep) const;
  void Build(EmitSummary* summary);
  // Build's phases: the program in order, then the decisions about it.
  std::vector<int64_t> EmitBuffers(fb::DeviceProgramT* program) const;
  std::unique_ptr<fb::SuperstepT> EmitSuperstep(
      int s, const std::vector<int64_t>& id_of, SlowCalls* slow_calls,
      EmitSummary* sum) const;
  bool SharesElement(const VSlice& a, const VSlice& b) const;
  int64_t PlacedCallCycles(const VCall& call, int64_t cycles,
                           SlowCalls* slow_calls) const;
  std::unique_ptr<fb::ComputeT> EmitCompute(
      const VCall& call, const std::vector<int64_t>& id_of) const;
  std::unique_ptr<fb::TransferT> EmitTransfer(
      const VTransfer& t, const std::vector<int64_t>& id_of,
      EmitSummary* sum) const;
  std::unique_ptr<fb::HostBindingT> Bind(
      const fb::ValueT& v, const std::vector<int64_t>& id_of) const;
  void EmitHostBindings(const std::vector<int64_t>& id_of,
                        fb::DeviceProgramT* program) const;
  void SummarizePeakAndPlan(EmitSummary* sum) const;
  // Per repeat, how each (superstep, tile) whose addresses change between
  // iterations is updated: a base register where one serves, else a patch.
  void ChooseAddressUpdates(fb::DeviceProgramT* program, EmitSummary* sum);
  void EmitCode(fb::DeviceProgramT* program, EmitSummary* sum) const;
  void LogLoweredOps();
  std::string DescribeLowering(const OpWork& w);
  void LogSlowCalls(const SlowCalls& slow_calls);
  void LogMemoryReuse();

  int64_t ComputeMax(const std::vector<int64_t>& per_tile) const {
    int64_t m = 0;
    for (int64_t v : per_tile) m = std::max(m, v);
    return m;
  }
  int64_t ExchangeCost(const StepLoad& load) const;

  // Repeats (docs/repeat.md): each body's lowering, and per op (in work_
  // order) the body it is in, -1 outside bodies.
  Status FindBodies();
  Status LowerRepeats();
  int RunsOf(int superstep) const;
  const std::map<int, int>* IterationRenames(int superstep, int i) const;
  void LogRepeats();
  std::vector<BodyLowering> bodies_;
  std::vector<int> body_of_;

  fb::ModuleT& module_;
  const EmitOptions& options_;
  kernels::CostModel model_;
  Lowering lowering_;
  DecisionLog& log_;
  int tiles_ = 0;
  MemoryMap map_;
  std::vector<OpWork> work_;
  int steps_ = 0;
  // Allocation results.
  std::vector<int64_t> offset_;     // per virtual buffer, -1 if unused
  std::vector<int64_t> first_, last_;  // lifetimes in slots
  std::set<std::pair<int, int>> slow_pairs_;  // soft rules not honoured
  std::vector<int64_t> tile_peak_;
  struct TileCodeBytes {
    int64_t runtime = 0, program = 0, exchange = 0, reserved = 0;
  };
  std::vector<TileCodeBytes> code_;  // per tile, for the supersteps as placed
  // Tiles whose data from before the program went around the boundary of
  // standard and interleaved memory (allocate.h).
  int boundary_tiles_ = 0;
};

int64_t Emitter::ExchangeCost(const StepLoad& l) const {
  if (!l.has_exchange) return 0;
  return CostOfExchange(model_, l.transfers).cycles;
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
    bool alias = options_.alias_in_place;
    StatusOr<int> aliasable = lowering_.AliasableTiles(*op);
    if (!aliasable.ok()) return aliasable.status();
    if (alias && *aliasable > 0) {
      // Price both ways on the op alone, its operands stored as the ops
      // before it left them.
      Numbers numbers;
      for (bool in_place : {false, true}) {
        Lowering pricing = lowering_;
        StatusOr<OpProgram> p = pricing.Lower(
            *op, ChoiceFromReduction(op->reduction.get()), in_place, false);
        if (!p.ok()) return p.status();
        StatusOr<ProgramCost> c =
            CostOfOp(model_, pricing.buffers(), *p, tiles_);
        if (!c.ok()) return c.status();
        (in_place ? numbers.cycles_after : numbers.cycles_before) = c->cycles;
        (in_place ? numbers.bytes_after : numbers.bytes_before) =
            pricing.ScratchBytesPerTile(op->id);
      }
      const std::string what = op->kind == fb::OpKind::MatMul
                                   ? "use the left operand in place"
                                   : "use the source buffer in place";
      alias = log_.Apply(
          {op->id}, what,
          std::to_string(*aliasable) +
              " tiles already hold exactly the block they need, contiguous "
              "and in the right order: no staging copy or transfer",
          numbers);
    }
    // K pieces in staged panels: per tile they trade GEMM calls for row
    // copies; whether the op gains depends on its slowest tiles, so price
    // the op both ways.
    bool k_pieces = false;
    if (op->kind == fb::OpKind::MatMul) {
      Numbers numbers;
      int pieced = 0;
      for (bool on : {false, true}) {
        // On the real storage of the left operand: where it is stored in
        // pieces, K pieces save a copy per row of each piece.
        Lowering pricing = lowering_;
        StatusOr<OpProgram> p = pricing.Lower(
            *op, ChoiceFromReduction(op->reduction.get()), alias, on);
        if (!p.ok()) return p.status();
        StatusOr<ProgramCost> c = CostOfOp(model_, pricing.buffers(), *p, tiles_);
        if (!c.ok()) return c.status();
        (on ? numbers.cycles_after : numbers.cycles_before) = c->cycles;
        (on ? numbers.bytes_after : numbers.bytes_before) =
            pricing.ScratchBytesPerTile(op->id);
        if (on) pieced = pricing.notes(op->id).k_pieced_tiles;
      }
      const std::string action =
          "cut staged panels into K pieces at locally held columns";
      if (pieced == 0) {
        // Nothing to decide: no tile would gain.
      } else if (numbers.cycles_after < numbers.cycles_before) {
        k_pieces = log_.Apply(
            {op->id}, action,
            std::to_string(pieced) +
                " tiles copy their local part of the left operand in one "
                "call per piece instead of one per row, for extra GEMM calls",
            numbers);
      } else {
        log_.Reject({op->id}, action,
                    std::to_string(pieced) +
                        " tiles would gain, but the op's slowest phases do "
                        "not: rejected by cost, before " +
                        Thousands(numbers.cycles_before) + ", after " +
                        Thousands(numbers.cycles_after),
                    numbers);
      }
    }
    OpWork w;
    w.op = op.get();
    StatusOr<OpProgram> p = lowering_.Lower(
        *op, ChoiceFromReduction(op->reduction.get()), alias, k_pieces);
    if (!p.ok()) return p.status();
    w.program = std::move(*p);
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
      StatusOr<PhaseCost> pc =
          CostOfPhase(model_, lowering_.buffers(), ph, tiles_);
      if (!pc.ok()) return pc.status();
      w.alone.push_back(pc->cycles);
    }
    VLOG(1) << "lowered op " << op->id << " " << op->name << ": "
            << w.program.phases.size() << " phases, "
            << lowering_.buffers().size() << " buffers so far";
    work_.push_back(std::move(w));
  }
  return Status::Ok();
}

void Emitter::Schedule(bool share, int64_t remaining,
                       std::vector<ShareEvent>* events) {
  ScheduleState st(tiles_);
  // Nothing shares a superstep across a body's edges: the body's
  // supersteps run once per iteration.
  int region = -1, floor = 0;
  for (size_t r = 0; r < work_.size(); ++r) {
    OpWork& w = work_[r];
    if (body_of_[r] != region) {
      floor = st.last_used + 1;
      if (region >= 0) bodies_[region].last_step = st.last_used;
      region = body_of_[r];
      if (region >= 0) bodies_[region].first_step = floor;
    }
    const std::vector<Phase>& phases = w.program.phases;
    w.step.assign(phases.size(), 0);
    if (phases.empty()) {
      PassReadinessThrough(w, &st);
      continue;
    }
    const std::vector<int> offset = PhaseOffsets(phases);
    const int earliest = std::max(EarliestStep(w, st), floor);
    const int fresh = std::max(earliest, st.last_used + 1);
    int start = fresh;
    if (share && earliest < fresh) {
      start = ChooseSharedStart(w, offset, earliest, fresh, remaining, &st,
                                events);
    }
    PlacePhases(start, offset, &w, &st);
    MarkResultsReady(w, &st);
  }
  if (region >= 0) bodies_[region].last_step = st.last_used;
  steps_ = st.last_used + 1;
}

// Fully in place: results are ready when the operands are.
void Emitter::PassReadinessThrough(const OpWork& w, ScheduleState* st) const {
  int rc = 0, rx = 0;
  for (uint32_t v : w.program.reads) {
    rc = std::max(rc, ReadyAt(st->ready_c, v));
    rx = std::max(rx, ReadyAt(st->ready_x, v));
  }
  for (uint32_t v : w.program.writes) {
    st->ready_c[v] = rc;
    st->ready_x[v] = rx;
  }
}

// The first superstep where all operands are ready for the op's first phase.
int Emitter::EarliestStep(const OpWork& w, const ScheduleState& st) const {
  const bool first_compute =
      w.program.phases[0].kind == Phase::Kind::kCompute;
  int earliest = 0;
  for (uint32_t v : w.program.reads) {
    earliest = std::max(earliest, first_compute ? ReadyAt(st.ready_c, v)
                                                : ReadyAt(st.ready_x, v));
  }
  return earliest;
}

// Starts the op at `earliest` (sharing used supersteps) if the decision
// budget allows it, else at `fresh`; a proposed share becomes an event.
int Emitter::ChooseSharedStart(const OpWork& w, const std::vector<int>& offset,
                               int earliest, int fresh, int64_t limit,
                               ScheduleState* st,
                               std::vector<ShareEvent>* events) {
  std::vector<int> shared_steps;
  const Numbers numbers =
      PriceMerge(w, offset, earliest, st, &shared_steps);
  const std::set<uint32_t> with = OpsInSteps(w, shared_steps);
  std::string steps_text, with_text;
  for (int s : shared_steps) {
    steps_text += (steps_text.empty() ? "" : ",") + std::to_string(s);
  }
  for (uint32_t id : with) {
    with_text += (with_text.empty() ? "" : ",") + std::to_string(id);
  }
  ShareEvent e;
  e.op = w.op->id;
  e.action = "share supersteps " + steps_text + " with ops (" + with_text + ")";
  e.reason = "operands ready in superstep " + std::to_string(earliest) +
             ", " + std::to_string(fresh - earliest) +
             " supersteps before the program's end; merged phases cost "
             "their slowest tile, never more than apart";
  e.numbers = numbers;
  if (shared_steps.empty()) return earliest;  // only empty slots of used steps
  int start = fresh;
  const bool allowed = limit < 0 || st->budget_used < limit;
  if (allowed) {
    ++st->budget_used;
    start = earliest;
  }
  events->push_back(e);
  return start;
}

// Prices the merge of every phase that lands in a used superstep when the
// op starts at `earliest`; the used supersteps go to `shared_steps`.
Numbers Emitter::PriceMerge(const OpWork& w, const std::vector<int>& offset,
                            int earliest, ScheduleState* st,
                            std::vector<int>* shared_steps) const {
  const std::vector<Phase>& phases = w.program.phases;
  Numbers numbers;
  for (size_t i = 0; i < phases.size(); ++i) {
    const int s = earliest + offset[i];
    if (s > st->last_used) continue;
    StepLoad& l = st->Load(s);
    const Phase& ph = phases[i];
    if (ph.kind == Phase::Kind::kCompute) {
      if (!l.has_compute) continue;
      std::vector<int64_t> merged = l.compute;
      for (size_t c = 0; c < ph.calls.size(); ++c) {
        merged[ph.calls[c].tile] += w.call_cycles[i][c];
      }
      numbers.cycles_before += ComputeMax(l.compute) + w.alone[i];
      numbers.cycles_after += ComputeMax(merged);
    } else {
      if (!l.has_exchange) continue;
      StepLoad merged = l;
      AddTransfers(ph.transfers, &merged);
      numbers.cycles_before += ExchangeCost(l) + w.alone[i];
      numbers.cycles_after += ExchangeCost(merged);
    }
    if (shared_steps->empty() || shared_steps->back() != s) {
      shared_steps->push_back(s);
    }
  }
  return numbers;
}

// The ids of the ops scheduled before `w` with a phase in one of `steps`.
std::set<uint32_t> Emitter::OpsInSteps(const OpWork& w,
                                       const std::vector<int>& steps) const {
  std::set<uint32_t> with;
  for (const OpWork& other : work_) {
    if (&other == &w) break;
    for (size_t i = 0; i < other.step.size(); ++i) {
      if (std::find(steps.begin(), steps.end(), other.step[i]) != steps.end()) {
        with.insert(other.op->id);
      }
    }
  }
  return with;
}

// Puts the op's phases from superstep `start` on and adds their load.
void Emitter::PlacePhases(int start, const std::vector<int>& offset,
                          OpWork* w, ScheduleState* st) const {
  const std::vector<Phase>& phases = w->program.phases;
  for (size_t i = 0; i < phases.size(); ++i) {
    const int s = start + offset[i];
    w->step[i] = s;
    StepLoad& l = st->Load(s);
    const Phase& ph = phases[i];
    if (ph.kind == Phase::Kind::kCompute) {
      l.has_compute = true;
      for (size_t c = 0; c < ph.calls.size(); ++c) {
        l.compute[ph.calls[c].tile] += w->call_cycles[i][c];
      }
    } else {
      l.has_exchange = l.has_exchange || !ph.transfers.empty();
      AddTransfers(ph.transfers, &l);
    }
    st->last_used = std::max(st->last_used, s);
  }
}

// Records the superstep from which the op's results count as ready: its
// last superstep after a final compute, the next one after an exchange.
void Emitter::MarkResultsReady(const OpWork& w, ScheduleState* st) const {
  const int end = w.step.back();
  const bool last_compute =
      w.program.phases.back().kind == Phase::Kind::kCompute;
  for (uint32_t v : w.program.writes) {
    st->ready_c[v] = last_compute ? end : end + 1;
    st->ready_x[v] = last_compute ? end : end + 1;
  }
}

// A tile where first fit from the bottom fails: the data from before the
// program packed around the interleaved boundary, the lowest floor (of
// eight steps over standard memory) that fits.
bool Emitter::AllocateAroundBoundary(const MemoryMap& map,
                                     const std::vector<AllocBuffer>& buffers,
                                     const std::vector<AllocRule>& rules,
                                     AllocResult* result) const {
  for (int step = 0; step <= 8; ++step) {
    AllocFailure ignored;
    const int64_t floor = map.AlignDown(
        map.base + (map.standard_end - map.base) * step / 8);
    if (AllocateTile(map, buffers, rules, result, &ignored, floor)) {
      return true;
    }
  }
  return false;
}

// The transfers of superstep `s` in the order EmitSuperstep emits them.
std::vector<const VTransfer*> Emitter::TransfersOf(int s) const {
  std::vector<const VTransfer*> transfers;
  for (const OpWork& w : work_) {
    for (size_t i = 0; i < w.program.phases.size(); ++i) {
      if (w.step[i] != s) continue;
      for (const VTransfer& t : w.program.phases[i].transfers) {
        transfers.push_back(&t);
      }
    }
  }
  return transfers;
}

Status Emitter::SizeCode() {
  const kernels::CodeModel code = kernels::CodeModel::FromTarget(*module_.target);
  code_.assign(tiles_, TileCodeBytes{});
  std::vector<char> takes_part(tiles_, 0);
  std::vector<int64_t> exchange(tiles_, 0);
  for (int s = 0; s < steps_; ++s) {
    std::fill(takes_part.begin(), takes_part.end(), 0);
    for (const OpWork& w : work_) {
      for (size_t i = 0; i < w.program.phases.size(); ++i) {
        if (w.step[i] != s) continue;
        for (const VCall& c : w.program.phases[i].calls) {
          code_[c.tile].program += code.CallBytes(static_cast<int64_t>(
              c.args.size() + c.params.size() + c.fparams.size()));
          takes_part[c.tile] = 1;
        }
      }
    }
    const std::vector<const VTransfer*> transfers = TransfersOf(s);
    for (const VTransfer* t : transfers) {
      takes_part[t->src_tile] = 1;
      for (const VDestination& d : t->destinations) takes_part[d.tile] = 1;
    }
    if (!transfers.empty()) {
      kernels::AddExchangeCodeBytes(code, TrafficOf(model_, transfers),
                                    &exchange);
    }
    for (int t = 0; t < tiles_; ++t) {
      if (takes_part[t]) code_[t].program += code.per_superstep;
    }
  }
  for (int t = 0; t < tiles_; ++t) {
    TileCodeBytes& c = code_[t];
    c.runtime = code.runtime;
    c.exchange = exchange[t];
    c.reserved = ir::CodeRegionBytes(*module_.target,
                                     c.runtime + c.program + c.exchange);
    if (c.reserved > map_.standard_end) {
      return Status::Infeasible(
          "tile " + std::to_string(t) + ": " +
          Thousands(c.runtime + c.program + c.exchange) +
          " B of code (runtime " + Thousands(c.runtime) + ", program " +
          Thousands(c.program) + ", exchange tables " + Thousands(c.exchange) +
          ") do not fit in the " + Thousands(map_.standard_end) +
          " B of standard memory that code lives in");
    }
  }
  return Status::Ok();
}

Status Emitter::Allocate(std::string* failure_message, bool* fits) {
  TILEC_RETURN_IF_ERROR(SizeCode());
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  const int64_t nops = static_cast<int64_t>(work_.size());
  const int64_t per_step = nops + 1;
  first_.assign(buffers.size(), kForever);
  last_.assign(buffers.size(), -kForever);
  auto touch = [&](int b, int64_t slot) {
    first_[b] = std::min(first_[b], slot);
    last_[b] = std::max(last_[b], slot);
  };
  for (size_t r = 0; r < work_.size(); ++r) {
    const OpWork& w = work_[r];
    for (size_t i = 0; i < w.program.phases.size(); ++i) {
      const Phase& ph = w.program.phases[i];
      const int64_t s = w.step[i];
      if (ph.kind == Phase::Kind::kCompute) {
        const int64_t slot = s * per_step + static_cast<int64_t>(r);
        for (const VCall& c : ph.calls) {
          for (const VSlice& a : c.args) touch(a.buffer, slot);
        }
      } else {
        const int64_t slot = s * per_step + nops;
        for (const VTransfer& t : ph.transfers) {
          touch(t.src.buffer, slot);
          for (const VDestination& d : t.destinations) touch(d.buffer, slot);
        }
      }
    }
  }
  std::set<int> host_read;
  for (const auto& v : module_.values) {
    if (v->role != fb::ValueRole::Output) continue;
    for (int t : lowering_.TilesOf(v->id)) {
      host_read.insert(lowering_.Find(v->id, t)->buffer);
    }
  }
  for (const VBuffer& b : buffers) {
    if (b.host_written || b.resident) first_[b.id] = -1;
    if (b.resident || host_read.count(b.id)) last_[b.id] = kForever;
    if (first_[b.id] == kForever && last_[b.id] != -kForever) first_[b.id] = -1;
  }
  for (const BodyLowering& b : bodies_) {
    KeepBodyDataLive(b, b.first_step * per_step,
                     (b.last_step + 1) * per_step - 1, &first_, &last_);
  }
  std::vector<std::vector<AllocBuffer>> per_tile(tiles_);
  for (const VBuffer& b : buffers) {
    if (first_[b.id] > last_[b.id]) continue;  // never used
    AllocBuffer a;
    a.id = b.id;
    a.bytes = b.bytes;
    a.start = first_[b.id];
    a.end = last_[b.id];
    a.interleaved = b.interleaved;
    per_tile[b.tile].push_back(a);
  }
  std::vector<std::vector<AllocRule>> rules(tiles_);
  const std::vector<ElementRule>& element_rules = lowering_.rules();
  for (const ElementRule& r : element_rules) {
    rules[buffers[r.a].tile].push_back({r.a, r.b, r.hard});
  }
  for (const BodyLowering& b : bodies_) AddRenamedRules(b, buffers, &rules);
  offset_.assign(buffers.size(), -1);
  tile_peak_.assign(tiles_, 0);
  boundary_tiles_ = 0;
  slow_pairs_.clear();
  // Each tile's buffers are placed on their own, so two threads place
  // tiles in any order and the results are taken in tile order below, as
  // one thread would: the same offsets, and the first tile that does not
  // fit is the one reported (tiles after it are not needed).
  struct TileAllocation {
    bool fits = false, around_boundary = false;
    AllocResult result;
    AllocFailure failure;
  };
  std::vector<TileAllocation> placed(tiles_);
  std::atomic<int> next_tile{0}, first_unfit{tiles_};
  auto place_tiles = [&] {
    for (int t = next_tile++; t < tiles_; t = next_tile++) {
      if (per_tile[t].empty() || t > first_unfit) continue;
      TileAllocation& a = placed[t];
      MemoryMap map = map_;
      map.base = code_[t].reserved;
      a.fits = AllocateTile(map, per_tile[t], rules[t], &a.result, &a.failure);
      if (!a.fits) {
        a.fits = a.around_boundary =
            AllocateAroundBoundary(map, per_tile[t], rules[t], &a.result);
      }
      if (!a.fits) {
        int seen = first_unfit;
        while (t < seen && !first_unfit.compare_exchange_weak(seen, t)) {
        }
      }
    }
  };
  {
    std::thread second(place_tiles);
    place_tiles();
    second.join();
  }
  for (int t = 0; t < tiles_; ++t) {
    if (per_tile[t].empty()) continue;
    const AllocResult& result = placed[t].result;
    const AllocFailure& failure = placed[t].failure;
    if (placed[t].around_boundary) ++boundary_tiles_;
    if (!placed[t].fits) {
      *fits = false;
      auto where = [&](int64_t slot) -> std::string {
        if (slot < 0) return "the program start (host data)";
        const int64_t s = slot / per_step, r = slot % per_step;
        if (r == nops) return "superstep " + std::to_string(s) + " exchange";
        return "superstep " + std::to_string(s) + " compute of op " +
               std::to_string(work_[r].op->id) + " " + work_[r].op->name;
      };
      const VBuffer& b = buffers[failure.buffer];
      std::vector<int> live = failure.live;
      std::sort(live.begin(), live.end(), [&](int x, int y) {
        return buffers[x].bytes != buffers[y].bytes
                   ? buffers[x].bytes > buffers[y].bytes
                   : x < y;
      });
      std::string live_text;
      for (int id : live) {
        const VBuffer& l = buffers[id];
        live_text += (live_text.empty() ? "" : "; ") + std::string("\"") +
                     l.name + "\" op " + std::to_string(l.op) + " " +
                     BufferKindName(l.kind) + " " + Thousands(l.bytes) + " B";
      }
      *failure_message =
          "tile " + std::to_string(t) + " is out of memory at " +
          where(failure.slot) + ": buffer \"" + b.name + "\" (op " +
          std::to_string(b.op) + ", " + BufferKindName(b.kind) + ", " +
          Thousands(failure.bytes) + " B" +
          (failure.interleaved ? ", interleaved memory" : "") +
          ") does not fit; live buffers " + Thousands(failure.live_bytes) +
          " B of " + Thousands(failure.region_bytes) +
          " B, largest free gap " + Thousands(failure.largest_gap) +
          " B, shortfall " +
          Thousands(std::max<int64_t>(failure.bytes - failure.largest_gap, 0)) +
          " B; live: " + live_text;
      return Status::Ok();
    }
    for (size_t i = 0; i < per_tile[t].size(); ++i) {
      offset_[per_tile[t][i].id] = result.offsets[i];
    }
    for (int r : result.soft_dropped) {
      slow_pairs_.insert({rules[t][r].a, rules[t][r].b});
    }
    tile_peak_[t] = result.peak;
    VLOG(2) << "tile " << t << ": " << per_tile[t].size()
            << " buffers, highest end " << result.peak << " B, "
            << result.soft_dropped.size() << " soft rules dropped";
  }
  *fits = true;
  return Status::Ok();
}

void Emitter::Build(EmitSummary* summary) {
  auto program = std::make_unique<fb::DeviceProgramT>();
  const std::vector<int64_t> id_of = EmitBuffers(program.get());
  SlowCalls slow_calls;
  EmitSummary sum;
  for (int s = 0; s < steps_; ++s) {
    program->supersteps.push_back(EmitSuperstep(s, id_of, &slow_calls, &sum));
  }
  for (const BodyLowering& b : bodies_) {
    program->repeats.push_back(EmitRepeat(b, id_of));
  }
  ChooseAddressUpdates(program.get(), &sum);
  EmitCode(program.get(), &sum);
  sum.predicted_cycles =
      sum.compute_cycles + sum.exchange_cycles + sum.update_cycles;
  sum.supersteps = steps_;
  EmitHostBindings(id_of, program.get());
  SummarizePeakAndPlan(&sum);
  LogLoweredOps();
  LogRepeats();
  LogSlowCalls(slow_calls);
  LogMemoryReuse();
  if (boundary_tiles_ > 0) {
    log_.Info({}, "data placed before the program around the interleaved "
                  "boundary",
              Count(boundary_tiles_, "tile") +
                  ": first fit from the bottom left no room for a buffer "
                  "that must not share an interleaved element (allocate.h)",
              {0, 0, 0, 0});
  }
  log_.Info({}, "program",
            Count(sum.supersteps, "superstep") + ", " +
                Count(sum.exchange_phases, "exchange phase") + ", " +
                Thousands(sum.bytes_received) + " B received; cycles: "
                "before = planner estimate (sum over ops), after = predicted "
                "simulator count",
            {sum.planner_cycles, sum.predicted_cycles, 0, sum.peak_bytes});
  module_.program = std::move(program);
  if (summary) *summary = sum;
}

void Emitter::ChooseAddressUpdates(fb::DeviceProgramT* program,
                                   EmitSummary* sum) {
  const fb::TargetT& target = *module_.target;
  for (size_t k = 0; k < program->repeats.size(); ++k) {
    fb::SuperstepRepeatT& repeat = *program->repeats[k];
    std::map<uint32_t, int64_t> chosen, patched;  // per superstep: slowest
    int bases = 0;
    int64_t patch_words = 0;
    for (const kernels::AddressChange& c :
         kernels::RepeatAddressChanges(*program, k)) {
      const fb::AddressUpdate method = c.one_base_serves
                                           ? fb::AddressUpdate::BaseRegister
                                           : fb::AddressUpdate::Patch;
      repeat.updates.emplace_back(c.superstep, c.tile,
                                  static_cast<uint32_t>(c.words), method);
      bases += c.one_base_serves;
      if (!c.one_base_serves) patch_words += c.words;
      int64_t& slowest = chosen[c.superstep];
      slowest = std::max(slowest,
                         kernels::AddressUpdateCycles(target, method, c.words));
      int64_t& all_patched = patched[c.superstep];
      all_patched = std::max(
          all_patched,
          kernels::AddressUpdateCycles(target, fb::AddressUpdate::Patch, c.words));
    }
    if (repeat.updates.empty()) continue;
    int64_t per_iteration = 0, per_iteration_patched = 0;
    for (const auto& [step, cycles] : chosen) per_iteration += cycles;
    for (const auto& [step, cycles] : patched) per_iteration_patched += cycles;
    const int64_t later = static_cast<int64_t>(repeat.iterations.size()) - 1;
    sum->update_cycles += later * per_iteration;
    log_.Info({}, "repeat " + std::to_string(k) + " address updates",
              Count(static_cast<int64_t>(repeat.updates.size()),
                    "(superstep, tile) pair") +
                  " name buffers that change between iterations: " +
                  std::to_string(bases) +
                  " by a base register where one base serves, the rest by "
                  "patching " + Thousands(patch_words) +
                  " address words; cycles per iteration after the first: "
                  "before = all patched, after = as chosen",
              {per_iteration_patched, per_iteration, 0, 0});
  }
}

void Emitter::EmitCode(fb::DeviceProgramT* program, EmitSummary* sum) const {
  for (int t = 0; t < tiles_; ++t) {
    const TileCodeBytes& c = code_[t];
    program->code.emplace_back(static_cast<uint32_t>(t),
                               static_cast<uint32_t>(c.runtime),
                               static_cast<uint32_t>(c.program),
                               static_cast<uint32_t>(c.exchange),
                               static_cast<uint32_t>(c.reserved));
    sum->code_bytes_max =
        std::max(sum->code_bytes_max, c.runtime + c.program + c.exchange);
    sum->exchange_code_bytes_max =
        std::max(sum->exchange_code_bytes_max, c.exchange);
    sum->tensor_bytes = std::min(
        sum->tensor_bytes < 0 ? map_.capacity : sum->tensor_bytes,
        map_.capacity - c.reserved);
  }
}

// Emits every used virtual buffer in order; returns each one's program
// buffer id (-1 if unused).
std::vector<int64_t> Emitter::EmitBuffers(fb::DeviceProgramT* program) const {
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  std::vector<int64_t> id_of(buffers.size(), -1);
  for (const VBuffer& b : buffers) {
    if (offset_[b.id] < 0) continue;
    id_of[b.id] = static_cast<int64_t>(program->buffers.size());
    auto out = std::make_unique<fb::BufferT>();
    out->id = static_cast<uint32_t>(id_of[b.id]);
    out->tile = static_cast<uint32_t>(b.tile);
    out->offset = static_cast<uint32_t>(offset_[b.id]);
    out->bytes = static_cast<uint32_t>(b.bytes);
    out->dtype = b.dtype;
    out->fp8_scale_exp = b.scale_exp;
    out->value = b.value;
    out->op = b.op;
    out->name = b.name;
    program->buffers.push_back(std::move(out));
  }
  return id_of;
}

// Emits the phases placed in superstep `s`, in op order, and adds the
// superstep's cycles to `sum`.
std::unique_ptr<fb::SuperstepT> Emitter::EmitSuperstep(
    int s, const std::vector<int64_t>& id_of, SlowCalls* slow_calls,
    EmitSummary* sum) const {
  auto step = std::make_unique<fb::SuperstepT>();
  std::vector<int64_t> compute(tiles_, 0);
  std::vector<const VTransfer*> transfers;
  std::string label;
  // The calls as every iteration runs them: cycles depend on the addresses
  // an iteration's renames give (the slow path of binary kernels).
  std::vector<std::pair<const VCall*, int64_t>> calls;
  const int64_t received_before = sum->bytes_received;
  for (const OpWork& w : work_) {
    for (size_t i = 0; i < w.program.phases.size(); ++i) {
      if (w.step[i] != s) continue;
      const Phase& ph = w.program.phases[i];
      label += (label.empty() ? "" : " ") + std::to_string(w.op->id) + ":" +
               ph.label;
      for (size_t c = 0; c < ph.calls.size(); ++c) {
        calls.emplace_back(&ph.calls[c], w.call_cycles[i][c]);
        step->compute.push_back(EmitCompute(ph.calls[c], id_of));
      }
      for (const VTransfer& t : ph.transfers) {
        step->exchange.push_back(EmitTransfer(t, id_of, sum));
        transfers.push_back(&t);
      }
    }
  }
  step->label = label;
  const int runs = RunsOf(s);
  int64_t e = 0;
  if (!transfers.empty()) {
    step->schedule = std::make_unique<fb::ExchangeScheduleT>(
        kernels::SchedulePhase(TrafficOf(model_, transfers, offset_)));
    e = step->schedule->length + model_.sync_cycles();
    sum->exchange_bound_cycles += runs * int64_t{step->schedule->bound};
    sum->exchange_scheduled_cycles += runs * int64_t{step->schedule->length};
  }
  for (int run = 0; run < runs; ++run) {
    std::fill(compute.begin(), compute.end(), 0);
    const std::map<int, int>* renames = IterationRenames(s, run);
    for (const auto& [call, cycles] : calls) {
      compute[call->tile] += PlacedCallCycles(
          renames ? Renamed(*call, *renames) : *call, cycles, slow_calls);
    }
    sum->compute_cycles += ComputeMax(compute);
    sum->exchange_cycles += e;
    sum->exchange_phases += !transfers.empty();
  }
  sum->bytes_received += (runs - 1) * (sum->bytes_received - received_before);
  return step;
}

// The body a superstep is in runs once per iteration.
int Emitter::RunsOf(int superstep) const {
  for (const BodyLowering& b : bodies_) {
    if (superstep >= b.first_step && superstep <= b.last_step) {
      return static_cast<int>(b.renames.size());
    }
  }
  return 1;
}

const std::map<int, int>* Emitter::IterationRenames(int superstep,
                                                    int i) const {
  for (const BodyLowering& b : bodies_) {
    if (superstep >= b.first_step && superstep <= b.last_step &&
        !b.renames[i].empty()) {
      return &b.renames[i];
    }
  }
  return nullptr;
}

// Whether two slices touch a common memory element.
bool Emitter::SharesElement(const VSlice& a, const VSlice& b) const {
  if (a.bytes == 0 || b.bytes == 0) return false;
  const int64_t a0 = offset_[a.buffer] + a.offset, b0 = offset_[b.buffer] + b.offset;
  return map_.ElementOf(a0) <= map_.ElementOf(b0 + b.bytes - 1) &&
         map_.ElementOf(b0) <= map_.ElementOf(a0 + a.bytes - 1);
}

// A call's cycles as placed: a binary kernel whose inputs ended up in one
// memory element runs the slow path, counted in `slow_calls`.
int64_t Emitter::PlacedCallCycles(const VCall& call, int64_t cycles,
                                  SlowCalls* slow_calls) const {
  if (!IsBinaryKernel(call.kernel) ||
      !SharesElement(call.args[0], call.args[1])) {
    return cycles;
  }
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  std::vector<kernels::Operand> operands;
  for (const VSlice& a : call.args) {
    operands.push_back(kernels::Operand{
        nullptr, static_cast<size_t>(a.bytes),
        *kernels::DTypeFromFb(buffers[a.buffer].dtype),
        buffers[a.buffer].scale_exp});
  }
  StatusOr<int64_t> slow =
      kernels::Cycles(model_, call.kernel, operands, call.params,
                      call.fparams, kernels::KernelPath::kSlow);
  if (!slow.ok()) return cycles;
  auto& sc = (*slow_calls)[call.op];
  ++sc.first;
  sc.second += *slow - cycles;
  return *slow;
}

std::unique_ptr<fb::ComputeT> Emitter::EmitCompute(
    const VCall& call, const std::vector<int64_t>& id_of) const {
  auto out = std::make_unique<fb::ComputeT>();
  out->tile = static_cast<uint32_t>(call.tile);
  out->kernel = call.kernel;
  for (const VSlice& a : call.args) out->args.push_back(EmitSlice(a, id_of));
  out->params = call.params;
  out->fparams = call.fparams;
  out->op = call.op;
  return out;
}

std::unique_ptr<fb::TransferT> Emitter::EmitTransfer(
    const VTransfer& t, const std::vector<int64_t>& id_of,
    EmitSummary* sum) const {
  auto out = std::make_unique<fb::TransferT>();
  out->src_tile = static_cast<uint32_t>(t.src_tile);
  out->src_buffer = static_cast<uint32_t>(id_of[t.src.buffer]);
  out->src_offset = static_cast<uint32_t>(t.src.offset);
  out->bytes = static_cast<uint32_t>(t.src.bytes);
  out->dtype = t.dtype;
  out->op = t.op;
  out->rows = static_cast<uint32_t>(t.rows);
  out->src_pitch = static_cast<uint32_t>(t.src_pitch);
  out->dst_pitch = static_cast<uint32_t>(t.dst_pitch);
  for (const VDestination& d : t.destinations) {
    auto dst = std::make_unique<fb::DestinationT>();
    dst->tile = static_cast<uint32_t>(d.tile);
    dst->buffer = static_cast<uint32_t>(id_of[d.buffer]);
    dst->offset = static_cast<uint32_t>(d.offset);
    out->destinations.push_back(std::move(dst));
    sum->bytes_received += t.Bytes();
  }
  return out;
}

// Where the host finds value `v` on the device: one fragment per segment.
std::unique_ptr<fb::HostBindingT> Emitter::Bind(
    const fb::ValueT& v, const std::vector<int64_t>& id_of) const {
  auto hb = std::make_unique<fb::HostBindingT>();
  hb->value = v.id;
  const int eb = ir::DTypeBytes(v.dtype);
  for (int t : lowering_.TilesOf(v.id)) {
    const Storage* s = lowering_.Find(v.id, t);
    if (offset_[s->buffer] < 0) continue;
    for (const Segment& seg : s->segments) {
      auto f = std::make_unique<fb::FragmentT>();
      f->tile = static_cast<uint32_t>(t);
      f->buffer = static_cast<uint32_t>(id_of[s->buffer]);
      f->offset = static_cast<uint32_t>(seg.offset * eb);
      f->begin.assign(seg.box.begin.begin(), seg.box.begin.begin() + seg.box.rank);
      f->end.assign(seg.box.end.begin(), seg.box.end.begin() + seg.box.rank);
      hb->fragments.push_back(std::move(f));
    }
  }
  return hb;
}

void Emitter::EmitHostBindings(const std::vector<int64_t>& id_of,
                               fb::DeviceProgramT* program) const {
  for (const auto& v : module_.values) {
    if ((v->role == fb::ValueRole::Input || v->role == fb::ValueRole::Weight) &&
        !lowering_.TilesOf(v->id).empty()) {
      program->inputs.push_back(Bind(*v, id_of));
    }
  }
  // The host writes the patches of an image input (a host op's result) in
  // their planned ownership: the input's binding carries the transform.
  for (const auto& op : module_.ops) {
    if (!IsHostOp(*op)) continue;
    std::unique_ptr<fb::HostBindingT> hb =
        Bind(*lowering_.value(op->results[0]), id_of);
    hb->value = op->operands[0];
    hb->patch = op->patch;
    program->inputs.push_back(std::move(hb));
  }
  for (const auto& v : module_.values) {
    if (v->role == fb::ValueRole::Output) {
      program->outputs.push_back(Bind(*v, id_of));
    }
  }
}

// The tile with the highest buffer end, and the planner's total estimate.
void Emitter::SummarizePeakAndPlan(EmitSummary* sum) const {
  for (int t = 0; t < tiles_; ++t) {
    if (tile_peak_[t] > sum->peak_bytes) {
      sum->peak_bytes = tile_peak_[t];
      sum->peak_tile = t;
    }
  }
  for (size_t r = 0; r < module_.ops.size(); ++r) {
    const fb::OperationT& op = *module_.ops[r];
    if (!op.estimate) continue;
    const int64_t runs =
        body_of_[r] < 0 ? 1 : bodies_[body_of_[r]].body.repeat->count;
    sum->planner_cycles += runs * op.estimate->cycles;
  }
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

void Emitter::LogRepeats() {
  for (const BodyLowering& b : bodies_) {
    const fb::RepeatT& r = *b.body.repeat;
    std::vector<uint32_t> ops;
    for (size_t i = b.body.begin; i < b.body.end; ++i) {
      ops.push_back(module_.ops[i]->id);
    }
    size_t renames = 0;
    for (const auto& it : b.renames) renames += it.size();
    log_.Info(ops, "repeat the body's supersteps",
              "supersteps " + std::to_string(b.first_step) + ".." +
                  std::to_string(b.last_step) + " run " +
                  Count(r.count, "time") + ": the twins' buffers and the "
                  "carried value's are renamed per iteration (" +
                  Thousands(static_cast<int64_t>(renames)) +
                  " renames in all), so the program holds the body once",
              {0, 0, 0, 0});
  }
}

// One decision per op: how it was lowered and where it landed.
void Emitter::LogLoweredOps() {
  for (const OpWork& w : work_) {
    StatusOr<ProgramCost> alone =
        CostOfOp(model_, lowering_.buffers(), w.program, tiles_);
    const int64_t first = w.step.empty() ? -1 : w.step.front();
    const int64_t last = w.step.empty() ? -1 : w.step.back();
    const int64_t cycles = alone.ok() ? alone->cycles : 0;
    log_.Info({w.op->id}, "lowered " + OpText(*w.op),
              DescribeLowering(w) + "; supersteps " + std::to_string(first) +
                  ".." + std::to_string(last) + (w.op->estimate
                      ? "; planner estimate " + Thousands(w.op->estimate->cycles)
                      : std::string()),
              {w.op->estimate ? w.op->estimate->cycles : 0, cycles,
               w.op->estimate ? w.op->estimate->peak_bytes : 0,
               lowering_.ScratchBytesPerTile(w.op->id)});
  }
}

// The lowering's notes for one op, as the decision's reason text.
std::string Emitter::DescribeLowering(const OpWork& w) {
  const OpNotes& n = lowering_.notes(w.op->id);
  std::string what = Count(n.tiles, "tile") + ", " +
                     Count(static_cast<int64_t>(w.program.phases.size()), "phase");
  if (w.op->kind == fb::OpKind::MatMul) {
    what += "; left operand in place on " + std::to_string(n.aliased_tiles) +
            " tiles, staged on " + std::to_string(n.staged_tiles) + " in " +
            Count(n.stage_phases, "exchange phase") + " (" +
            Thousands(n.stage_bytes_per_tile) + " B per tile)";
    if (n.ranges > 0) {
      what += "; " + Count(n.ranges, "tile") + " reduce their rows of " +
              n.partials + " partials in " +
              Count(n.reduce_epochs, "reduction epoch");
    }
    if (!n.converter.empty()) what += "; accumulator -> output by " + n.converter;
  } else if (n.aliased_tiles > 0) {
    what += ", in place on " + std::to_string(n.aliased_tiles) + " tiles";
  }
  if (n.local_copy_runs > 0) {
    what += ", " + std::to_string(n.local_copy_runs) + " local copies";
  }
  return what;
}

void Emitter::LogSlowCalls(const SlowCalls& slow_calls) {
  for (const auto& [op, sc] : slow_calls) {
    log_.Reject({op}, "binary kernel inputs in different memory elements",
                std::to_string(sc.first) +
                    " calls have both inputs in one element: no placement "
                    "left them apart (slow path)",
                {0, sc.second, 0, 0});
  }
}

// Memory reuse on the tile with the most buffer bytes: their sum (every
// buffer kept for the whole program) against the most bytes live at once
// (what lifetime-based placement needs).
void Emitter::LogMemoryReuse() {
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  std::vector<int64_t> total(tiles_, 0);
  for (const VBuffer& b : buffers) {
    if (offset_[b.id] >= 0) total[b.tile] += map_.AlignUp(b.bytes);
  }
  const int busiest = static_cast<int>(
      std::max_element(total.begin(), total.end()) - total.begin());
  std::vector<std::pair<int64_t, int64_t>> events;  // slot, +/- bytes
  for (const VBuffer& b : buffers) {
    if (b.tile != busiest || offset_[b.id] < 0) continue;
    events.push_back({first_[b.id], map_.AlignUp(b.bytes)});
    events.push_back({last_[b.id] == kForever ? kForever : last_[b.id] + 1,
                      -map_.AlignUp(b.bytes)});
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, most = 0;
  for (const auto& [slot, delta] : events) {
    live += delta;
    most = std::max(most, live);
  }
  log_.Info({}, "reuse dead buffers' memory",
            "tile " + std::to_string(busiest) +
                " (most buffer bytes): bytes of all its buffers -> most "
                "bytes live at once; highest buffer end " +
                Thousands(tile_peak_[busiest]) + " B",
            {0, 0, total[busiest], most});
}

Status Emitter::Run(EmitSummary* summary) {
  TILEC_RETURN_IF_ERROR(FindBodies());
  TILEC_RETURN_IF_ERROR(LowerAll());
  TILEC_RETURN_IF_ERROR(LowerRepeats());
  std::vector<ShareEvent> events;
  const int64_t remaining = log_.limited()
                                ? log_.max_decisions() - log_.applied()
                                : -1;
  Schedule(options_.share_supersteps, remaining, &events);
  std::string failure;
  bool fits = false;
  TILEC_RETURN_IF_ERROR(Allocate(&failure, &fits));
  bool shared = options_.share_supersteps && !events.empty();
  if (!fits && shared) {
    log_.Reject({}, "share supersteps between ops",
                "memory does not fit with shared supersteps (" + failure +
                    "); rebuilt with one op per superstep",
                {0, 0, 0, 0});
    events.clear();
    shared = false;
    Schedule(false, remaining, &events);
    TILEC_RETURN_IF_ERROR(Allocate(&failure, &fits));
  }
  if (!fits) return Status::Infeasible(failure);
  for (const ShareEvent& e : events) {
    log_.Apply({e.op}, e.action, e.reason, e.numbers);
  }
  EmitSummary sum;
  Build(&sum);
  sum.shared = shared;
  if (summary) *summary = sum;
  return Status::Ok();
}

}  // namespace

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
  Emitter emitter(module, options_, *model, log);
  TILEC_RETURN_IF_ERROR(emitter.Run(&summary_));
  return true;
}

}  // namespace tilec::lower
