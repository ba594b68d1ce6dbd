#include "sim/simulator.h"

#include <utility>

#include "sim/engine.h"

namespace tilec::sim {
namespace engine {

Status Engine::Check() {
  TILEC_RETURN_IF_ERROR(CheckTarget());
  TILEC_RETURN_IF_ERROR(CheckCodeEntries());
  TILEC_RETURN_IF_ERROR(CheckBuffers());
  TILEC_RETURN_IF_ERROR(CheckRepeats());
  TILEC_RETURN_IF_ERROR(CheckBindings(/*outputs=*/false));
  const int steps = static_cast<int>(program_->supersteps.size());
  steps_.resize(steps);
  compute_cycles_.resize(steps);
  compute_extra_.resize(steps);
  compute_macs_.resize(steps);
  step_renamed_.assign(steps, 0);
  planned_for_.assign(steps, kUnplanned);
  first_timing_.assign(steps, {});
  step_traffic_.assign(steps, std::nullopt);
  timing_varies_.assign(steps, 0);
  schedules_.assign(steps, {});
  TILEC_RETURN_IF_ERROR(PlanEveryRunStep());
  TILEC_RETURN_IF_ERROR(CheckBufferLifetimes());
  TILEC_RETURN_IF_ERROR(CheckCodeSizes());
  TILEC_RETURN_IF_ERROR(CheckIterationUpdates());
  TILEC_RETURN_IF_ERROR(CheckBindings(/*outputs=*/true));
  checked_ = true;
  return Status::Ok();
}

Status Engine::Run(HostTensors inputs, SimResult* result) {
  if (!checked_) TILEC_RETURN_IF_ERROR(Check());
  SimResult r;
  r.target = target_->name;
  r.tiles = tiles_;
  r.clock_hz = target_->clock_hz;
  ReportCode(&r);
  for (const auto& rep : program_->repeats) {
    r.repeats.push_back({static_cast<int>(rep->first),
                         static_cast<int>(rep->count),
                         std::vector<int64_t>(rep->iterations.size(), 0)});
  }
  if (options_.execute) {
    TILEC_RETURN_IF_ERROR(AllocateAndWriteInputs(std::move(inputs)));
  }
  CycleTally tally(tiles_, static_cast<int>(schedule_.size()));
  int64_t clock = 0;
  for (size_t k = 0; k < schedule_.size(); ++k) {
    const RunStep& rs = schedule_[k];
    if (MustPlanToRun(rs)) TILEC_RETURN_IF_ERROR(PlanStep(rs));
    if (options_.execute) {
      Status st = RunComputePhase(rs.superstep);
      if (!st.ok() && rs.repeat >= 0) {
        st = st.WithContext("repeat " + std::to_string(rs.repeat) +
                            " iteration " + std::to_string(rs.iteration));
      }
      TILEC_RETURN_IF_ERROR(st);
      RunExchangePhase(rs.superstep);
    }
    CountStep(k, &tally, &clock, &r);
  }
  if (options_.execute) TILEC_RETURN_IF_ERROR(ReadOutputs(&r));
  FinishCounts(&tally, clock, &r);
  *result = std::move(r);
  return Status::Ok();
}

}  // namespace engine

Simulator::Simulator(const fb::ModuleT& module, const SimOptions& options)
    : engine_(std::make_unique<engine::Engine>(module, options)) {}

Simulator::~Simulator() = default;

Status Simulator::Verify() { return engine_->Check(); }

Status Simulator::Run(const HostTensors& inputs, SimResult* result) {
  return engine_->Run(HostTensors(inputs), result);
}

Status Simulator::Run(HostTensors&& inputs, SimResult* result) {
  return engine_->Run(std::move(inputs), result);
}

Status Simulate(const fb::ModuleT& module, const HostTensors& inputs,
                const SimOptions& options, SimResult* result) {
  return Simulator(module, options).Run(inputs, result);
}

Status VerifyDeviceProgram(const fb::ModuleT& module) {
  SimOptions options;
  options.execute = false;
  engine::Engine engine(module, options);
  return engine.Check();
}

}  // namespace tilec::sim
