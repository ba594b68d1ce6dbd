// The simulator engine's repeats (docs/repeat.md): the renames of each
// iteration, the run order with repeats unrolled, re-planning a superstep
// for an iteration, and the address updates between iterations.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "formats/print.h"
#include "kernels/exchange_schedule.h"
#include "sim/engine.h"

namespace tilec::sim::engine {

Status Engine::CheckRenames(const std::string& where,
                            const fb::RepeatIterationT& iteration,
                            Renames* renames) {
  for (size_t i = 0; i < iteration.renames.size(); ++i) {
    const fb::BufferRename& r = iteration.renames[i];
    const std::string rwhere = where + " rename " + std::to_string(i) + " (" +
                               BufferText(r.from()) + " -> " +
                               BufferText(r.to()) + ")";
    auto from = buffers_.find(r.from());
    auto to = buffers_.find(r.to());
    if (from == buffers_.end() || to == buffers_.end()) {
      return Status::BadInput(rwhere + ": names a buffer that does not exist");
    }
    const fb::BufferT& a = *from->second.buffer;
    const fb::BufferT& b = *to->second.buffer;
    if (a.tile != b.tile || a.bytes != b.bytes || a.dtype != b.dtype) {
      return Status::BadInput(rwhere + ": the buffers differ in tile, bytes or "
                              "dtype (tile " + std::to_string(a.tile) + "/" +
                              std::to_string(b.tile) + ", " +
                              std::to_string(a.bytes) + "/" +
                              std::to_string(b.bytes) + " bytes)");
    }
    if (!renames->empty() && renames->back().first >= r.from()) {
      return Status::BadInput(rwhere + ": renames must be sorted by `from`, "
                              "each buffer once");
    }
    renames->emplace_back(r.from(), r.to());
    renamed_ids_.insert(r.from());
  }
  return Status::Ok();
}

Status Engine::CheckRepeats() {
  const int steps = static_cast<int>(program_->supersteps.size());
  int next = 0;  // the first superstep not yet in the schedule
  auto run_plain_until = [&](int end) {
    for (; next < end; ++next) schedule_.push_back({next, -1, -1});
  };
  for (size_t k = 0; k < program_->repeats.size(); ++k) {
    const fb::SuperstepRepeatT* r = program_->repeats[k].get();
    const std::string where = "repeat " + std::to_string(k);
    if (r == nullptr) return Status::BadInput(where + " is null");
    const int64_t first = r->first, end = first + int64_t{r->count};
    if (r->count == 0 || first < next || end > steps) {
      return Status::BadInput(
          where + ": supersteps [" + std::to_string(first) + ", " +
          std::to_string(end) + ") are empty, outside the program's " +
          std::to_string(steps) + " or not after the repeat before it");
    }
    if (r->iterations.empty()) {
      return Status::BadInput(where + " has no iterations");
    }
    run_plain_until(static_cast<int>(first));
    std::vector<Renames> renames(r->iterations.size());
    for (size_t i = 0; i < r->iterations.size(); ++i) {
      const std::string iwhere = where + " iteration " + std::to_string(i);
      if (!r->iterations[i]) return Status::BadInput(iwhere + " is null");
      TILEC_RETURN_IF_ERROR(
          CheckRenames(iwhere, *r->iterations[i], &renames[i]));
      for (int s = static_cast<int>(first); s < end; ++s) {
        schedule_.push_back({s, static_cast<int>(k), static_cast<int>(i)});
      }
    }
    renames_.push_back(std::move(renames));
    next = static_cast<int>(end);
  }
  run_plain_until(steps);
  return Status::Ok();
}

Status Engine::PlanStep(const RunStep& rs) {
  const int s = rs.superstep;
  if (planned_for_[s] != kUnplanned &&
      (!step_renamed_[s] || planned_for_[s] == rs.iteration)) {
    return Status::Ok();
  }
  planning_ = {rs.repeat < 0 ? nullptr : &renames_[rs.repeat][rs.iteration],
               false};
  Status st = CheckSuperstep(s);
  const bool touched_renamed = planning_.touched_renamed;
  planning_ = {};
  if (!st.ok()) {
    if (rs.repeat < 0) return st;
    return st.WithContext("repeat " + std::to_string(rs.repeat) +
                          " iteration " + std::to_string(rs.iteration));
  }
  step_renamed_[s] = step_renamed_[s] || touched_renamed;
  if (rs.repeat >= 0) NoteIterationTiming(s);
  planned_for_[s] = rs.iteration;
  return Status::Ok();
}

thread_local Engine::Planning Engine::planning_;

Status Engine::PlanEveryRunStep() {
  std::vector<std::vector<size_t>> runs(program_->supersteps.size());
  for (size_t k = 0; k < schedule_.size(); ++k) {
    runs[schedule_[k].superstep].push_back(k);
  }
  // Per superstep: its first failing run step, and why.
  std::vector<std::pair<size_t, Status>> failed(
      runs.size(), {schedule_.size(), Status::Ok()});
  ParallelFor(runs.size(), options_.threads, [&](size_t s) {
    for (size_t k : runs[s]) {
      Status st = PlanStep(schedule_[k]);
      if (!st.ok()) {
        failed[s] = {k, std::move(st)};
        return;
      }
    }
  });
  const auto first = std::min_element(
      failed.begin(), failed.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  return first == failed.end() ? Status::Ok() : first->second;
}

void Engine::NoteIterationTiming(int s) {
  ComputeTiming& first = first_timing_[s];
  if (planned_for_[s] == kUnplanned) {
    first = {compute_cycles_[s], compute_extra_[s], compute_macs_[s]};
  } else if (compute_cycles_[s] != first.cycles ||
             compute_extra_[s] != first.extra ||
             compute_macs_[s] != first.macs) {
    timing_varies_[s] = 1;
  }
}

bool Engine::MustPlanToRun(const RunStep& rs) const {
  return options_.execute || timing_varies_[rs.superstep];
}

// Every (superstep, tile) of a repeat body whose addresses change between
// iterations (kernels::RepeatAddressChanges) must be updated before each
// iteration after the first, as SuperstepRepeat.updates says: patched, or
// by a base register where one serves. Keeps each superstep's cost.
Status Engine::CheckIterationUpdates() {
  update_cycles_.assign(program_->supersteps.size(), {});
  for (size_t k = 0; k < program_->repeats.size(); ++k) {
    const fb::SuperstepRepeatT& r = *program_->repeats[k];
    const std::vector<kernels::AddressChange> changes =
        kernels::RepeatAddressChanges(*program_, k);
    const std::string where = "repeat " + std::to_string(k) + " updates";
    if (r.updates.size() != changes.size()) {
      return Status::BadInput(
          where + ": lists " + std::to_string(r.updates.size()) +
          " (superstep, tile) pairs; the body changes the addresses of " +
          std::to_string(changes.size()));
    }
    for (size_t u = 0; u < changes.size(); ++u) {
      const kernels::AddressChange& c = changes[u];
      const fb::IterationUpdate& up = r.updates[u];
      const std::string at = where + ": superstep " +
                             std::to_string(c.superstep) + " tile " +
                             std::to_string(c.tile);
      if (up.superstep() != c.superstep || up.tile() != c.tile ||
          int64_t{up.words()} != c.words) {
        return Status::BadInput(
            at + ": expected " + std::to_string(c.words) +
            " address words here, in (superstep, tile) order; the program "
            "lists superstep " + std::to_string(up.superstep()) + " tile " +
            std::to_string(up.tile()) + " with " + std::to_string(up.words()));
      }
      if (up.method() > fb::AddressUpdate::MAX) {
        return Status::BadInput(at + ": unknown update method");
      }
      if (up.method() == fb::AddressUpdate::BaseRegister &&
          !c.one_base_serves) {
        return Status::BadInput(at + ": a base register cannot serve it: its "
                                     "renamed buffers move by different "
                                     "amounts between iterations");
      }
      const int64_t cycles =
          kernels::AddressUpdateCycles(*target_, up.method(), c.words);
      StepUpdate& su = update_cycles_[c.superstep];
      if (cycles > su.cycles) {
        su = {cycles, static_cast<int>(c.tile), c.op};
      }
    }
  }
  return Status::Ok();
}

}  // namespace tilec::sim::engine
