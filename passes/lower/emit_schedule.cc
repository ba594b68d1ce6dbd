// emit-device's supersteps: each op's phases placed as soon as their
// operands are ready, sharing supersteps with earlier ops where the
// decision budget allows (emit_device.h, step 2).

#include <algorithm>
#include <map>
#include <set>

#include "passes/lower/emitter.h"

namespace tilec::lower {
namespace {

using passes::Numbers;

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
  if (!transfers.empty()) {
    load->exchange_cycles = -1;
    load->exchange_starts.reset();
  }
}

}  // namespace

KeptStarts Keep(std::vector<uint32_t> starts) {
  return std::make_shared<const std::vector<uint32_t>>(std::move(starts));
}

int64_t Emitter::ExchangeCost(StepLoad* l) const {
  if (!l->has_exchange) return 0;
  if (l->exchange_cycles < 0) {
    lower::ExchangeCost cost = CostOfExchange(model_, l->transfers);
    l->exchange_cycles = cost.cycles;
    l->exchange_starts = Keep(std::move(cost.starts));
  }
  return l->exchange_cycles;
}

void Emitter::Schedule(bool share, int64_t remaining,
                       std::vector<ShareEvent>* events) {
  ScheduleState st(tiles_);
  // Nothing shares a superstep across a body's edges: the body's
  // supersteps run once per iteration.
  int region = -1, floor = 0;
  for (size_t r = 0; r < work_.size(); ++r) {
    OpWork& w = work_[r];
    priced_aside_.WaitForFirst(w.priced_aside);
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
    const int earliest = std::max(EarliestStep(w, offset, st), floor);
    const int fresh = std::max(earliest, st.last_used + 1);
    int start = fresh;
    if (share && earliest < fresh && !kept_apart_.count(w.op->id)) {
      start = ChooseSharedStart(w, offset, earliest, fresh, remaining, &st,
                                events);
    }
    PlacePhases(start, offset, &w, &st);
    MarkResultsReady(w, &st);
  }
  if (region >= 0) bodies_[region].last_step = st.last_used;
  steps_ = st.last_used + 1;
  step_starts_.assign(steps_, nullptr);
  for (int s = 0; s < steps_ && s < static_cast<int>(st.loads.size()); ++s) {
    if (st.loads[s].exchange_cycles >= 0) {
      step_starts_[s] = std::move(st.loads[s].exchange_starts);
    }
  }
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

// The first superstep the op can start at, its phases consecutive from
// there: each phase reads the operands it touches no earlier than they are
// ready, so a staging phase need not wait for an operand that only a later
// phase reads (the attention context can stage v while its probabilities
// are made). An operand no phase touches counts for the first phase.
int Emitter::EarliestStep(const OpWork& w, const std::vector<int>& offset,
                          const ScheduleState& st) const {
  const std::vector<uint32_t>& reads = w.program.reads;
  const std::vector<VBuffer>& buffers = lowering_.buffers();
  std::vector<char> touched(reads.size(), 0);
  int earliest = 0;
  auto read = [&](int buffer, size_t phase) {
    const int64_t value = buffers[buffer].value;
    if (value < 0) return;
    const auto it = std::find(reads.begin(), reads.end(), value);
    if (it == reads.end()) return;
    touched[it - reads.begin()] = 1;
    const bool compute =
        w.program.phases[phase].kind == Phase::Kind::kCompute;
    const int ready = ReadyAt(compute ? st.ready_c : st.ready_x,
                              static_cast<uint32_t>(value));
    earliest = std::max(earliest, ready - offset[phase]);
  };
  for (size_t i = 0; i < w.program.phases.size(); ++i) {
    const Phase& ph = w.program.phases[i];
    for (const VCall& c : ph.calls) {
      for (const VSlice& a : c.args) read(a.buffer, i);
    }
    for (const VTransfer& t : ph.transfers) read(t.src.buffer, i);
  }
  const bool first_compute =
      w.program.phases[0].kind == Phase::Kind::kCompute;
  for (size_t r = 0; r < reads.size(); ++r) {
    if (touched[r]) continue;
    earliest = std::max(earliest, first_compute
                                      ? ReadyAt(st.ready_c, reads[r])
                                      : ReadyAt(st.ready_x, reads[r]));
  }
  return earliest;
}

// Starts the op at `earliest` (sharing used supersteps) if merged its
// phases cost no more than apart and the decision budget allows it, else at
// `fresh`; a proposed share becomes an event. A merged exchange is priced
// at most at its parts back to back (PriceMergedExchange), so only one
// priced without both schedules could cost more.
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
  e.numbers = numbers;
  e.shared = numbers.cycles_after <= numbers.cycles_before;
  const std::string ready = "operands ready in superstep " +
                            std::to_string(earliest) + ", " +
                            std::to_string(fresh - earliest) +
                            " supersteps before the program's end; ";
  e.reason = ready + (e.shared ? "merged phases cost their slowest tile, "
                                 "never more than apart"
                               : "merged phases would cost more than apart: "
                                 "the op starts a superstep of its own");
  if (shared_steps.empty()) return earliest;  // only empty slots of used steps
  int start = fresh;
  const bool allowed = limit < 0 || st->budget_used < limit;
  if (e.shared && allowed) {
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
      numbers.cycles_before += ExchangeCost(&l) + w.alone[i];
      PriceMergedExchange(l, w.alone_starts[i], &merged);
      numbers.cycles_after += merged.exchange_cycles;
      l.priced_phase = &ph;
      l.priced_base = l.transfers.size();
      l.priced_cycles = merged.exchange_cycles;
      l.priced_starts = merged.exchange_starts;
    }
    if (shared_steps->empty() || shared_steps->back() != s) {
      shared_steps->push_back(s);
    }
  }
  return numbers;
}

// Prices `merged`, `l` with one more phase whose own schedule starts its
// packets at `alone_starts`: CostOfMergedExchange where both schedules
// are known.
void Emitter::PriceMergedExchange(const StepLoad& l,
                                  const KeptStarts& alone_starts,
                                  StepLoad* merged) const {
  if (!l.exchange_starts || !alone_starts || l.transfers.empty()) {
    ExchangeCost(merged);
    return;
  }
  lower::ExchangeCost cost = CostOfMergedExchange(
      model_, merged->transfers, *l.exchange_starts,
      l.exchange_cycles - model_.sync_cycles(), *alone_starts);
  merged->exchange_cycles = cost.cycles;
  merged->exchange_starts = Keep(std::move(cost.starts));
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
      const bool priced = l.priced_phase == &ph &&
                          l.priced_base == l.transfers.size();
      const bool alone = l.transfers.empty();
      AddTransfers(ph.transfers, &l);
      if (priced && l.has_exchange) {
        l.exchange_cycles = l.priced_cycles;
        l.exchange_starts = l.priced_starts;
      }
      // The phase in an exchange of its own costs what LowerAll priced.
      if (alone && l.has_exchange) {
        l.exchange_cycles = w->alone[i];
        l.exchange_starts = w->alone_starts[i];
      }
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

}  // namespace tilec::lower
