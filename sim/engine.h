// The simulator's engine (sim/simulator.h's Simulate and
// VerifyDeviceProgram): the plans it makes of a program and the Engine
// class, whose checks, exchange, repeats, execution and reports live in the
// sim/engine_*.cc files. Private to the simulator library.

#ifndef TILEC_SIM_ENGINE_H_
#define TILEC_SIM_ENGINE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "formats/basics.h"
#include "formats/print.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"
#include "kernels/numerics.h"
#include "sim/simulator.h"

namespace tilec::sim::engine {

using kernels::CostModel;
using kernels::DType;
using kernels::KernelPath;
using kernels::Operand;

inline std::string BufferText(uint32_t id) { return "buffer #" + std::to_string(id); }

inline std::string IndexText(const std::vector<int64_t>& index) {
  std::string out = "[";
  for (size_t i = 0; i < index.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(index[i]);
  }
  return out + "]";
}

// Row-major multi-index of a flat element number.
inline std::vector<int64_t> Unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return index;
}

struct BufferInfo {
  const fb::BufferT* buffer = nullptr;
  DType dtype = DType::kF32;
  int scale_exp = 0;
  int element_bytes = 1;
};

struct ArgPlan {
  uint32_t buffer = 0;
  int64_t addr = 0;  // tile address of the slice
  int64_t bytes = 0;
  DType dtype = DType::kF32;
  int scale_exp = 0;
};

struct ComputePlan {
  const fb::ComputeT* compute = nullptr;
  int index = 0;  // within the superstep, for messages and error order
  std::vector<ArgPlan> args;
};

struct TransferPlan {
  const fb::TransferT* transfer = nullptr;
  int64_t src_addr = 0;   // of piece 0
  int64_t bytes = 0;      // of each piece
  int64_t rows = 1;       // pieces
  int64_t src_pitch = 0;  // 0 when rows == 1
  int64_t dst_pitch = 0;
  struct Destination {
    int tile = 0;
    int64_t addr = 0;
  };
  std::vector<Destination> destinations;
};

struct StepPlan {
  std::vector<int> tiles;                       // tiles with compute, sorted
  std::vector<std::vector<ComputePlan>> computes;  // per entry of `tiles`
  std::vector<TransferPlan> transfers;
};

struct FragmentPlan {
  int tile = 0;
  uint32_t buffer = 0;
  int64_t addr = 0;
  DType dtype = DType::kF32;
  int scale_exp = 0;
  std::vector<int64_t> begin;
  std::vector<int64_t> end;
};

struct BindingPlan {
  const fb::ValueT* value = nullptr;
  std::vector<int64_t> shape;  // what the fragments index
  int64_t elements = 1;        // of `shape`
  // HostBinding.patch > 0: the host writes Patchify(value) (shape the
  // patches), from host data of value_elements elements.
  int patch = 0;
  int64_t value_elements = 1;
  std::vector<FragmentPlan> fragments;
};

// What CountCycles gathers across supersteps for the per-op, slow-path
// and busiest-tile reports.
struct CycleTally {
  CycleTally(int tiles, int steps)
      : tile_compute(tiles, 0),
        tile_exchange(tiles, 0),
        tile_calls(tiles, 0),
        step_compute(steps, std::vector<int64_t>(tiles, 0)),
        step_exchange(steps, std::vector<int64_t>(tiles, 0)) {}

  // The op's report, made on first use.
  OpReport& Op(uint32_t id) {
    OpReport& o = ops[id];
    o.op = id;
    return o;
  }

  std::vector<int64_t> tile_compute, tile_exchange, tile_calls;
  // Per superstep and tile, for the busiest tiles' trace tracks.
  std::vector<std::vector<int64_t>> step_compute, step_exchange;
  std::map<uint32_t, OpReport> ops;
  std::map<std::string, SlowPathReport> slow;
};

inline std::string StepWhere(int s, int tile, uint32_t op) {
  return "superstep " + std::to_string(s) + " tile " + std::to_string(tile) +
         " op " + std::to_string(op);
}

// Where a transfer is, as message text made only when a check fails: every
// transfer and destination of every superstep is checked, and making the
// text up front took about a tenth of a cycles-only run.
struct TransferWhere {
  int s = 0;
  int t = 0;
  const fb::TransferT* tr = nullptr;
  std::string operator()() const {
    return StepWhere(s, static_cast<int>(tr->src_tile), tr->op) +
           " transfer " + std::to_string(t);
  }
};

class Engine {
 public:
  Engine(const fb::ModuleT& module, const SimOptions& options)
      : module_(module), options_(options) {}

  // Every check of the program against its target and graph; no data.
  Status Check();
  // Checks first unless Check succeeded already. The inputs are freed once
  // they are in tile memory.
  Status Run(HostTensors inputs, SimResult* result);

 private:
  // ---- checking (no data touched)
  Status CheckTarget();
  Status CheckBuffers();
  Status CheckBindings(bool outputs);
  // A binding whose host writes the patches of an image input.
  static Status PatchBinding(const std::string& where, bool outputs, int patch,
                             BindingPlan* plan);
  Status CheckSuperstep(int s);
  Status CheckCompute(int s, int index, ComputePlan* plan);
  Status CheckCodeEntries();
  Status CheckCodeSizes();
  Status CheckIterationUpdates();
  // No two buffers share tile memory while both are live (after every
  // superstep is checked: it reads the program's references as valid).
  Status CheckBufferLifetimes() const;
  Status CheckTransfers(int s);
  kernels::PhaseTraffic TrafficOf(int s) const;
  Status CheckSchedule(int s);
  // One transfer's source, pieces and destinations, planned into *tp.
  Status CheckTransfer(int s, int t, TransferPlan* tp);
  Status CheckTransferSource(const TransferWhere& where,
                             const fb::TransferT& tr, const BufferInfo** src);
  Status PlanTransferPieces(const TransferWhere& where, const fb::TransferT& tr,
                            const BufferInfo& src, TransferPlan* tp);
  Status CheckTransferDestination(const TransferWhere& where,
                                  const fb::TransferT& tr, int d,
                                  const BufferInfo& src, TransferPlan* tp);
  Status CheckBindingFragment(const std::string& where,
                              const BindingPlan& binding,
                              const fb::FragmentT& fragment,
                              FragmentPlan* plan);
  Status CheckOutputCoverage(const BindingPlan& binding, const std::string& where);
  Status ArgSlice(const std::string& where, int tile, int arg,
                  const fb::BufferSliceT& slice, ArgPlan* plan);
  const BufferInfo* FindBuffer(uint32_t id) const;
  int64_t ElementOf(int64_t addr) const;
  bool ShareElement(const ArgPlan& a, const ArgPlan& b) const;

  // ---- repeats (docs/repeat.md)
  // One superstep as run: outside repeats (repeat -1) or in an iteration.
  struct RunStep {
    int superstep = 0;
    int repeat = -1;
    int iteration = -1;
  };
  using Renames = std::vector<std::pair<uint32_t, uint32_t>>;
  // Checks DeviceProgram.repeats and lays out schedule_.
  Status CheckRepeats();
  Status CheckRenames(const std::string& where,
                      const fb::RepeatIterationT& iteration, Renames* renames);
  // Plans (and checks) superstep rs.superstep with rs's renames, unless its
  // plan is already right for them.
  Status PlanStep(const RunStep& rs);
  // PlanStep for every run step, as Check needs them: the supersteps on
  // options_.threads threads, each one's run steps in order (a step's plan
  // is its own), and the error of the first run step that fails.
  Status PlanEveryRunStep();
  // After planning superstep s of a repeat for an iteration: keeps its
  // computes' cycles if it is the first planned, else marks it in
  // timing_varies_ if they differ from the first's (a slow path that
  // depends on where the renamed buffers lie).
  void NoteIterationTiming(int s);
  // Run must plan rs's superstep again: to execute it, or, counting cycles
  // only, where its cycles depend on the iteration. Check planned every
  // iteration once; a step planned for another iteration keeps its
  // transfers, their schedule and, unless marked, its computes' cycles.
  bool MustPlanToRun(const RunStep& rs) const;

  // ---- execution
  // Allocates every tile's memory, then writes the host's inputs into it
  // one binding at a time, each freed once written.
  Status AllocateAndWriteInputs(HostTensors inputs);
  // A binding's host data, taken out of `inputs` or made by
  // SimOptions::host_data, and checked against the value (patched where the
  // host patchifies).
  Status TakeHostData(const BindingPlan& b, HostTensors* inputs,
                      std::vector<float>* data) const;
  // Appends the distinct boxes of b's fragments, encoded from `data`, to
  // `boxes`; fragment_box gets each fragment's box.
  void EncodeBinding(const BindingPlan& b, const std::vector<float>& data,
                     std::vector<std::vector<uint8_t>>* boxes,
                     std::vector<size_t>* fragment_box) const;
  Status RunComputePhase(int s);
  void RunExchangePhase(int s);
  Status ReadOutputs(SimResult* result);

  // ---- costs
  // Counts run step k (schedule_[k]) into the tally and the report.
  void CountStep(size_t k, CycleTally* tally, int64_t* clock, SimResult* r);
  void FinishCounts(CycleTally* tally, int64_t clock, SimResult* r);
  void CountComputePhase(size_t k, int s, CycleTally* tally,
                         SuperstepReport* sr, SimResult* r);
  void AttributeSlowestTile(int s, CycleTally* tally,
                            SuperstepReport* sr) const;
  void CountExchangePhase(size_t k, int s, CycleTally* tally,
                          SuperstepReport* sr, SimResult* r);
  // Superstep s's transfers summed by op, in op order.
  struct OpTraffic {
    uint32_t op = 0;
    int64_t transfers = 0, pieces = 0, bytes_sent = 0, bytes_received = 0;
  };
  // Made once per superstep: every iteration moves the same rows of the
  // same sizes (renames move addresses), and a repeat's body runs the sums
  // over its transfers once per iteration otherwise (so400m: 18.7 M).
  const std::vector<OpTraffic>& StepTraffic(int s);
  void CountIterationUpdate(int s, CycleTally* tally,
                            SuperstepReport* sr) const;
  void ReportOps(CycleTally* tally, SimResult* r) const;
  void ReportSlowestTiles(const CycleTally& tally, SimResult* r) const;
  void ReportPeakMemory(SimResult* r) const;
  void ReportCode(SimResult* r) const;

  const fb::ModuleT& module_;
  const SimOptions options_;
  bool checked_ = false;  // Check succeeded: Run does not repeat it
  const fb::TargetT* target_ = nullptr;
  const fb::DeviceProgramT* program_ = nullptr;
  std::unique_ptr<CostModel> model_;
  int tiles_ = 0;
  int64_t sram_bytes_ = 0;
  int64_t standard_end_ = 0;
  kernels::ExchangeModel exchange_model_;
  kernels::CodeModel code_model_;
  // What each superstep's verified exchange schedule costs and needs.
  struct StepSchedule {
    bool checked = false;
    int64_t scheduled = 0;
    int64_t bound = 0;
    std::vector<std::pair<int, int64_t>> tile_end;  // tiles taking part
  };
  std::vector<StepSchedule> schedules_;
  // Per superstep of a repeat body, before each iteration after the first:
  // the slowest tile's address update and the op it is charged to.
  struct StepUpdate {
    int64_t cycles = 0;
    int tile = -1;
    uint32_t op = 0;
  };
  std::vector<StepUpdate> update_cycles_;

  std::unordered_map<uint32_t, BufferInfo> buffers_;
  std::unordered_map<uint32_t, const fb::ValueT*> values_;
  std::unordered_map<uint32_t, const fb::OperationT*> ops_;
  std::vector<int64_t> tile_extent_;  // highest buffer end per tile
  std::vector<StepPlan> steps_;
  // The supersteps in the order they run, repeats unrolled.
  std::vector<RunStep> schedule_;
  std::vector<std::vector<Renames>> renames_;  // [repeat][iteration]
  std::unordered_set<uint32_t> renamed_ids_;   // every rename's `from`
  // While a thread plans a step: its renames, and whether FindBuffer met
  // a renamed buffer. Per thread, so that Check plans supersteps on
  // several.
  struct Planning {
    const Renames* renames = nullptr;
    bool touched_renamed = false;
  };
  static thread_local Planning planning_;
  std::vector<char> step_renamed_;  // superstep names a renamed buffer
  std::vector<int> planned_for_;    // iteration its plan is for
  static constexpr int kUnplanned = -2;  // in planned_for_: not yet planned
  std::vector<BindingPlan> input_plans_;
  std::vector<BindingPlan> output_plans_;

  // Cycles of each compute, by superstep and then compute index.
  std::vector<std::vector<int64_t>> compute_cycles_;
  std::vector<std::vector<int64_t>> compute_extra_;  // slow-path surcharge
  std::vector<std::vector<int64_t>> compute_macs_;
  std::vector<std::optional<std::vector<OpTraffic>>> step_traffic_;
  // A repeated superstep's computes' cycles, surcharges and MACs in the
  // first iteration planned (empty elsewhere), and whether another
  // iteration's differ.
  struct ComputeTiming {
    std::vector<int64_t> cycles, extra, macs;
  };
  std::vector<ComputeTiming> first_timing_;
  std::vector<char> timing_varies_;

  std::vector<std::vector<uint8_t>> memory_;  // per tile
};

// Runs fn(i) for i in [0, n) on up to `threads` threads (the caller's
// included). Callers give each i its own memory, so the result does not
// depend on the thread count or the schedule.
template <typename Fn>
void ParallelFor(size_t n, int threads, Fn fn) {
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    for (size_t i; (i = next.fetch_add(1)) < n;) fn(i);
  };
  const size_t count = std::min<size_t>(std::max(threads, 1), n);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

// Calls fn(flat index of the row's first element in the value, elements in
// the row, row number within the box) for every innermost row of the box.
template <typename Fn>
void ForEachRow(const std::vector<int64_t>& shape,
                const std::vector<int64_t>& begin,
                const std::vector<int64_t>& end, Fn fn) {
  const size_t rank = shape.size();
  if (rank == 0) {
    fn(int64_t{0}, int64_t{1}, int64_t{0});
    return;
  }
  for (size_t d = 0; d < rank; ++d) {
    if (end[d] <= begin[d]) return;
  }
  const int64_t row = end[rank - 1] - begin[rank - 1];
  std::vector<int64_t> index(begin.begin(), begin.end() - 1);
  for (int64_t r = 0;; ++r) {
    int64_t flat = 0;
    for (size_t d = 0; d + 1 < rank; ++d) flat = flat * shape[d] + index[d];
    flat = flat * shape[rank - 1] + begin[rank - 1];
    fn(flat, row, r);
    // Odometer over the outer dimensions.
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++index[d] < end[d]) break;
      index[d] = begin[d];
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

}  // namespace tilec::sim::engine

#endif  // TILEC_SIM_ENGINE_H_
