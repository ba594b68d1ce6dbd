// emit-device's Emitter (emit_device.h describes the steps) and the state
// its steps share, declared once for the files that define them:
// emit_device.cc (the driver: lowering every op, repeats), emit_schedule.cc
// (supersteps), emit_allocate.cc (code sizing, lifetimes, addresses) and
// emit_build.cc (the device program and the decisions about it). Included
// only by those files.

#ifndef TILEC_PASSES_LOWER_EMITTER_H_
#define TILEC_PASSES_LOWER_EMITTER_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "passes/core/decisions.h"
#include "passes/lower/allocate.h"
#include "passes/lower/emit_device.h"
#include "passes/lower/lowering.h"
#include "passes/lower/program.h"
#include "passes/lower/repeat_lowering.h"

namespace tilec::lower {

// A lifetime bound beyond every allocation slot.
constexpr int64_t kForever = std::numeric_limits<int64_t>::max() / 4;

// An exchange phase's schedule as its packets' starts (ExchangeCost), kept
// with its price so that the program's superstep of exactly those
// transfers is not scheduled again (kernels::ScheduleFromStarts); shared by
// the prices that are the same schedule. Null: none kept.
using KeptStarts = std::shared_ptr<const std::vector<uint32_t>>;
KeptStarts Keep(std::vector<uint32_t> starts);

// One lowered op and where its phases went.
struct OpWork {
  const fb::OperationT* op = nullptr;
  OpProgram program;
  std::vector<std::vector<int64_t>> call_cycles;  // per phase, per call
  std::vector<int64_t> alone;                     // per phase, own superstep
  std::vector<KeptStarts> alone_starts;           // per phase, alone's
  std::vector<int> step;                          // per phase
  // alone and alone_starts hold their prices once the first
  // `priced_aside` phases PhasesPricedAside was given are priced.
  size_t priced_aside = 0;
};

// Exchange phases priced on a thread of their own (CostOfExchange), while
// the emitter goes on lowering the ops after them: the phases of an op
// lowered without a choice are priced only for Schedule, which runs after
// every op is lowered. Their prices are the same whichever thread makes
// them.
class PhasesPricedAside {
 public:
  explicit PhasesPricedAside(const kernels::CostModel& model) : model_(model) {}
  PhasesPricedAside(const PhasesPricedAside&) = delete;
  PhasesPricedAside& operator=(const PhasesPricedAside&) = delete;
  ~PhasesPricedAside() { Finish(); }

  // Prices exchange phase `phase` into *cycles and *starts; all three stay
  // where they are, untouched by the caller, until they are priced.
  // Returns how many phases have been added so far, this one included.
  size_t Add(const Phase* phase, int64_t* cycles, KeptStarts* starts);
  // Returns once the first `count` phases added are priced (phases are
  // priced in the order they were added).
  void WaitForFirst(size_t count);
  // Returns once every phase added is priced.
  void Finish();

 private:
  struct Job {
    const Phase* phase;
    int64_t* cycles;
    KeptStarts* starts;
  };
  void PriceUntilFinished();

  const kernels::CostModel& model_;
  std::mutex mutex_;
  std::condition_variable added_;
  std::condition_variable priced_;
  std::deque<Job> jobs_;
  size_t added_count_ = 0;
  size_t priced_count_ = 0;
  bool finishing_ = false;
  std::thread thread_;  // from the first Add
};

// What a superstep holds so far, for pricing a merge.
struct StepLoad {
  std::vector<int64_t> compute;  // per tile
  std::vector<const VTransfer*> transfers;  // its exchange phase, in order
  // Their cycles (CostOfExchange), -1 until priced: a superstep is priced
  // again for every later op that could share it. The schedule's starts
  // beside them.
  int64_t exchange_cycles = -1;
  KeptStarts exchange_starts;
  // The cycles PriceMerge found with one more phase's transfers appended to
  // the first `priced_base`: that phase placed here right after costs them.
  const Phase* priced_phase = nullptr;
  size_t priced_base = 0;
  int64_t priced_cycles = -1;
  KeptStarts priced_starts;
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

// Binary kernel calls sent to the slow path, per op: calls, extra cycles.
using SlowCalls = std::map<uint32_t, std::pair<int64_t, int64_t>>;

class Emitter {
 public:
  Emitter(fb::ModuleT* module, const EmitOptions& options,
          const kernels::CostModel& model, passes::DecisionLog* log)
      : module_(*module), options_(options), model_(model),
        lowering_(*module, model, LoweringOptions{options.alias_in_place, false}),
        log_(*log) {
    tiles_ = module->target->tiles;
    map_ = MemoryMap::FromTarget(*module->target);
  }

  Status Run(EmitSummary* summary);

 private:
  Status LowerAll();
  Status PriceAlone(OpWork* w);
  // One way of lowering an op, on a copy of the lowering state, with its
  // phases' costs; the chosen one becomes the lowering (LowerAll).
  struct PricedLowering {
    Lowering state;
    OpProgram program;
    std::vector<int64_t> alone;  // per phase, its own superstep
    std::vector<KeptStarts> alone_starts;
    int64_t cycles = 0;
  };
  // The ways priced for the op being lowered, by (in place, K pieces), and
  // their exchanges' prices: most phases are the same in every way.
  struct PricedWays {
    std::map<std::pair<bool, bool>, PricedLowering> ways;
    ExchangePrices exchanges;
  };
  StatusOr<PricedLowering*> Price(const fb::OperationT& op, bool in_place,
                                  bool k_pieces, PricedWays* priced) const;
  StatusOr<bool> ChooseInPlace(const fb::OperationT& op, PricedWays* priced);
  StatusOr<bool> ChooseKPieces(const fb::OperationT& op, bool alias,
                               PricedWays* priced);
  Status LowerOp(const fb::OperationT& op, bool alias, bool k_pieces,
                 PricedWays* priced);
  // Places every op's phases; `share` lets ops share supersteps. Decisions
  // are collected in `events` (applied through the log afterwards).
  struct ShareEvent {
    uint32_t op;
    std::string action, reason;
    passes::Numbers numbers;
    bool shared = true;  // false: merged would cost more, kept apart
  };
  void Schedule(bool share, int64_t remaining, std::vector<ShareEvent>* events);
  // Schedule and Allocate, sharing supersteps where memory allows: the
  // shared ops whose buffers are live where a tile runs out of memory are
  // kept to supersteps of their own (kept_apart_) and the program is
  // scheduled again; when none is, no op shares.
  Status ScheduleWithinMemory(int64_t remaining,
                              std::vector<ShareEvent>* events,
                              std::string* failure, bool* fits);
  // The ops of `events` that own a buffer live where allocation failed, or
  // the buffer that did not fit.
  std::set<uint32_t> SharedOpsAtFailure(
      const std::vector<ShareEvent>& events) const;
  // Schedule's phases, per op in order.
  void PassReadinessThrough(const OpWork& w, ScheduleState* st) const;
  int EarliestStep(const OpWork& w, const std::vector<int>& offset,
                   const ScheduleState& st) const;
  int ChooseSharedStart(const OpWork& w, const std::vector<int>& offset,
                        int earliest, int fresh, int64_t limit,
                        ScheduleState* st, std::vector<ShareEvent>* events);
  passes::Numbers PriceMerge(const OpWork& w, const std::vector<int>& offset,
                             int earliest, ScheduleState* st,
                             std::vector<int>* shared_steps) const;
  void PriceMergedExchange(const StepLoad& l, const KeptStarts& alone_starts,
                           StepLoad* merged) const;
  std::set<uint32_t> OpsInSteps(const OpWork& w,
                                const std::vector<int>& steps) const;
  void PlacePhases(int start, const std::vector<int>& offset, OpWork* w,
                   ScheduleState* st) const;
  void MarkResultsReady(const OpWork& w, ScheduleState* st) const;
  // On failure, failure_ops_ are the ops owning the buffer that did not
  // fit and the buffers live there, and failure_summary_ the message
  // without its list of live buffers (thousands of characters on a whole
  // model).
  Status Allocate(std::string* failure_message, bool* fits);
  // Allocate's phases. Allocation slots: the compute of op r (in work_
  // order) in superstep s is slot s * SlotsPerStep() + r; the superstep's
  // exchange is its last slot.
  int64_t SlotsPerStep() const;
  // first_ and last_: the slots where each buffer is first and last used.
  void ComputeLifetimes();
  std::vector<std::vector<AllocBuffer>> BuffersPerTile() const;
  std::vector<std::vector<AllocRule>> RulesPerTile() const;
  // How a tile was placed where the default (lifetime order from the
  // bottom) failed.
  enum class Fallback { kNone, kAroundBoundary, kLargestFirst };
  struct TileAllocation {
    bool fits = false;
    Fallback fallback = Fallback::kNone;
    AllocResult result;
    AllocFailure failure;
  };
  std::vector<TileAllocation> PlaceTiles(
      const std::vector<std::vector<AllocBuffer>>& per_tile,
      const std::vector<std::vector<AllocRule>>& rules) const;
  std::string OutOfMemorySummary(int tile, const AllocFailure& failure) const;
  std::string OutOfMemoryMessage(int tile, const AllocFailure& failure) const;
  std::string ShortfallText(const AllocFailure& failure) const;
  std::string SlotText(int64_t slot) const;
  void TakePlacement(int tile, const std::vector<AllocBuffer>& buffers,
                     const std::vector<AllocRule>& rules,
                     const AllocResult& result);
  Fallback AllocateHarder(const MemoryMap& map,
                          const std::vector<AllocBuffer>& buffers,
                          const std::vector<AllocRule>& rules,
                          AllocResult* result) const;
  // Code in tile memory (docs/device-program.md, "Memory"): each tile's
  // runtime, program code and exchange tables for the supersteps as
  // scheduled, in whole standard elements below its tensors. Infeasible
  // when a tile's code does not fit in standard memory.
  Status SizeCode();
  std::vector<const VTransfer*> TransfersOf(int superstep) const;
  // The emitter's last step: it gives up each superstep's calls and
  // transfers once they are in the program.
  void Build(EmitSummary* summary);
  // Build's phases: the program in order, then the decisions about it.
  std::vector<int64_t> EmitBuffers(fb::DeviceProgramT* program) const;
  void ReleaseStep(int s);
  std::unique_ptr<fb::ExchangeScheduleT> ScheduleStep(
      int s, std::span<const VTransfer* const> transfers) const;
  void EmitSupersteps(const std::vector<int64_t>& id_of,
                      fb::DeviceProgramT* program, SlowCalls* slow_calls,
                      EmitSummary* sum);
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
  int64_t ExchangeCost(StepLoad* load) const;

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
  passes::DecisionLog& log_;
  int tiles_ = 0;
  MemoryMap map_;
  std::vector<OpWork> work_;
  int steps_ = 0;
  // Per superstep as Schedule left it: its exchange's schedule where one
  // was priced for exactly its transfers (null: none).
  std::vector<KeptStarts> step_starts_;
  std::set<uint32_t> kept_apart_;  // ops Schedule may not share (memory)
  // Allocation results.
  std::set<uint32_t> failure_ops_;
  std::string failure_summary_;
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
  int largest_first_tiles_ = 0;
  // Last, so that it finishes first: its phases are in work_.
  PhasesPricedAside priced_aside_{model_};
};

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_EMITTER_H_
