// emit-device's output: the device program (buffers at their addresses,
// supersteps with their exchange schedules, repeats, code, host bindings),
// its predicted cycles, and the decisions about it in the pass log.

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <thread>

#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "passes/core/decisions.h"
#include "passes/lower/emitter.h"

namespace tilec::lower {
namespace {

using passes::Count;
using passes::Thousands;

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

}  // namespace

void Emitter::Build(EmitSummary* summary) {
  auto program = std::make_unique<fb::DeviceProgramT>();
  const std::vector<int64_t> id_of = EmitBuffers(program.get());
  SlowCalls slow_calls;
  EmitSummary sum;
  EmitSupersteps(id_of, program.get(), &slow_calls, &sum);
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
  if (largest_first_tiles_ > 0) {
    log_.Info({}, "buffers placed largest first",
              Count(largest_first_tiles_, "tile") +
                  ": first fit in lifetime order, from the bottom or around "
                  "the interleaved boundary, left no gap for a buffer "
                  "(allocate.h)",
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

// A superstep's objects and figures depend on its own phases alone: two
// threads emit them, each superstep's figures and slow calls apart, added
// in superstep order afterwards (the same sums as one thread's).
void Emitter::EmitSupersteps(const std::vector<int64_t>& id_of,
                             fb::DeviceProgramT* program, SlowCalls* slow_calls,
                             EmitSummary* sum) {
  std::vector<std::unique_ptr<fb::SuperstepT>> steps(steps_);
  std::vector<EmitSummary> figures(steps_);
  std::vector<SlowCalls> slow(steps_);
  std::atomic<int> next{0};
  auto emit = [&] {
    for (int s; (s = next++) < steps_;) {
      steps[s] = EmitSuperstep(s, id_of, &slow[s], &figures[s]);
      ReleaseStep(s);
    }
  };
  {
    std::jthread second(emit);
    emit();
  }
  for (int s = 0; s < steps_; ++s) {
    program->supersteps.push_back(std::move(steps[s]));
    const EmitSummary& f = figures[s];
    sum->compute_cycles += f.compute_cycles;
    sum->exchange_cycles += f.exchange_cycles;
    sum->exchange_bound_cycles += f.exchange_bound_cycles;
    sum->exchange_scheduled_cycles += f.exchange_scheduled_cycles;
    sum->exchange_phases += f.exchange_phases;
    sum->bytes_received += f.bytes_received;
    for (const auto& [op, calls] : slow[s]) {
      (*slow_calls)[op].first += calls.first;
      (*slow_calls)[op].second += calls.second;
    }
  }
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
    step->schedule = ScheduleStep(s, transfers);
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

// Frees what superstep s's phases hold once the program has them (the
// phases stay, empty): the program's objects then take the memory the
// emitter's gave up, instead of adding as much again beside it (so400m:
// 868,066 transfers to 4,478,311 destinations).
void Emitter::ReleaseStep(int s) {
  for (OpWork& w : work_) {
    for (size_t i = 0; i < w.program.phases.size(); ++i) {
      if (w.step[i] != s) continue;
      Phase& ph = w.program.phases[i];
      std::vector<VCall>().swap(ph.calls);
      std::vector<VTransfer>().swap(ph.transfers);
      std::vector<int64_t>().swap(w.call_cycles[i]);
      w.alone_starts[i].reset();
    }
  }
  step_starts_[s].reset();
}

// Superstep s's exchange of `transfers` (in program order) as placed: the
// schedule Schedule priced for exactly these transfers where it kept one,
// else scheduled here. Where every buffer they name lies on a word
// boundary, each piece spans the words it did when priced (at offset 0),
// so the traffic and its schedule are the same.
std::unique_ptr<fb::ExchangeScheduleT> Emitter::ScheduleStep(
    int s, std::span<const VTransfer* const> transfers) const {
  const kernels::PhaseTraffic traffic = TrafficOf(model_, transfers, offset_);
  const KeptStarts& priced = step_starts_[s];
  bool on_words = true;
  for (const VTransfer* t : transfers) {
    on_words = on_words && offset_[t->src.buffer] % 4 == 0;
    for (const VDestination& d : t->destinations) {
      on_words = on_words && offset_[d.buffer] % 4 == 0;
    }
  }
  if (priced && on_words && priced->size() == traffic.packets().size()) {
    return std::make_unique<fb::ExchangeScheduleT>(
        kernels::ScheduleFromStarts(traffic, *priced));
  }
  VLOG(1) << "superstep " << s << ": no schedule kept for its "
          << transfers.size() << " transfers, scheduled again";
  return std::make_unique<fb::ExchangeScheduleT>(
      kernels::SchedulePhase(traffic));
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
  out->destinations.reserve(t.destinations.size());
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
    const int64_t first = w.step.empty() ? -1 : w.step.front();
    const int64_t last = w.step.empty() ? -1 : w.step.back();
    // The op alone: its phases' costs as LowerAll priced them (CostOfOp).
    int64_t cycles = 0;
    for (int64_t c : w.alone) cycles += c;
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
    if (n.steps > 1) {
      what += "; rows in " +
              Count(n.steps, n.interleaved_steps ? "interleaved serial step"
                                                 : "serial step") +
              ", each reusing the same buffers";
    }
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

}  // namespace tilec::lower
