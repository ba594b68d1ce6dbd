#include "sim/simulator.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"
#include "kernels/numerics.h"
#include "sim/patchify.h"
#include "kernels/registry.h"

namespace tilec::sim {
namespace {

using kernels::CostModel;
using kernels::DType;
using kernels::KernelPath;
using kernels::Operand;

// The registry says which memory rules apply to a kernel's operands; the
// target's formula says what the slow path costs.
kernels::MemoryRule RuleOf(const std::string& kernel) {
  const kernels::KernelInfo* info = kernels::FindKernel(kernel);
  return info ? info->memory_rule : kernels::MemoryRule::kNone;
}

std::string BufferText(uint32_t id) { return "buffer #" + std::to_string(id); }

std::string IndexText(const std::vector<int64_t>& index) {
  std::string out = "[";
  for (size_t i = 0; i < index.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(index[i]);
  }
  return out + "]";
}

// Row-major multi-index of a flat element number.
std::vector<int64_t> Unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return index;
}

// Largest-remainder apportionment of `amount` over `weights` (>= 0, sum >
// 0): shares sum exactly to amount; leftover units go to the largest
// remainders, ties to the lower index, so the split is deterministic.
std::vector<int64_t> Apportion(int64_t amount,
                               const std::vector<int64_t>& weights) {
  std::vector<int64_t> shares(weights.size(), 0);
  __int128 total = 0;
  for (int64_t w : weights) total += w;
  if (total <= 0 || amount <= 0) return shares;
  std::vector<std::pair<__int128, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const __int128 scaled = static_cast<__int128>(amount) * weights[i];
    shares[i] = static_cast<int64_t>(scaled / total);
    given += shares[i];
    remainders.push_back({scaled % total, i});
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < amount; ++i, ++given) {
    ++shares[remainders[i % remainders.size()].second];
  }
  return shares;
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

class Engine {
 public:
  Engine(const fb::ModuleT& module, const SimOptions& options)
      : module_(module), options_(options) {}

  // Every check of the program against its target and graph; no data.
  Status Check();
  Status Run(const HostTensors& inputs, SimResult* result);

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
  Status CheckTransfers(int s);
  kernels::PhaseTraffic TrafficOf(int s) const;
  Status CheckSchedule(int s);
  // One transfer's source, pieces and destinations, planned into *tp.
  Status CheckTransfer(int s, int t, TransferPlan* tp);
  Status CheckTransferSource(const std::string& where, const fb::TransferT& tr,
                             const BufferInfo** src);
  Status PlanTransferPieces(const std::string& where, const fb::TransferT& tr,
                            const BufferInfo& src, TransferPlan* tp);
  Status CheckTransferDestination(const std::string& where,
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

  // ---- execution
  // Allocates every tile's memory and writes the host's inputs into it.
  Status AllocateAndWriteInputs(const HostTensors& inputs);
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
                          SuperstepReport* sr, SimResult* r) const;
  void CountIterationUpdate(int s, CycleTally* tally,
                            SuperstepReport* sr) const;
  void ReportOps(CycleTally* tally, SimResult* r) const;
  void ReportSlowestTiles(const CycleTally& tally, SimResult* r) const;
  void ReportPeakMemory(SimResult* r) const;
  void ReportCode(SimResult* r) const;

  const fb::ModuleT& module_;
  const SimOptions options_;
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
  const Renames* active_renames_ = nullptr;    // while planning a step
  mutable bool touched_renamed_ = false;       // FindBuffer saw a `from`
  std::vector<char> step_renamed_;  // superstep names a renamed buffer
  std::vector<int> planned_for_;    // iteration its plan is for
  std::vector<BindingPlan> input_plans_;
  std::vector<BindingPlan> output_plans_;

  // Cycles of each compute, by superstep and then compute index.
  std::vector<std::vector<int64_t>> compute_cycles_;
  std::vector<std::vector<int64_t>> compute_extra_;  // slow-path surcharge
  std::vector<std::vector<int64_t>> compute_macs_;

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

std::string StepWhere(int s, int tile, uint32_t op) {
  return "superstep " + std::to_string(s) + " tile " + std::to_string(tile) +
         " op " + std::to_string(op);
}

// ---------------------------------------------------------------- checks

Status Engine::CheckTarget() {
  if (!module_.target) {
    return Status::BadInput("module has no target description");
  }
  target_ = module_.target.get();
  if (!module_.program) {
    return Status::BadInput(
        "module has no device program (emit-device writes one)");
  }
  program_ = module_.program.get();
  kernels::StatusOr<CostModel> model = CostModel::Create(*target_);
  if (!model.ok()) {
    return Status::BadInput("target '" + target_->name +
                            "': " + model.status().message());
  }
  model_ = std::make_unique<CostModel>(*model);
  tiles_ = target_->tiles;
  sram_bytes_ = target_->sram_bytes;
  if (target_->element_bytes <= 0 || target_->interleaved_element_bytes <= 0 ||
      target_->standard_elements < 0) {
    return Status::BadInput("target '" + target_->name +
                            "': memory elements must have positive sizes");
  }
  standard_end_ = std::min<int64_t>(
      sram_bytes_,
      int64_t{target_->standard_elements} * target_->element_bytes);
  exchange_model_ = kernels::ExchangeModel::FromTarget(*target_);
  code_model_ = kernels::CodeModel::FromTarget(*target_);
  for (const auto& v : module_.values) {
    if (v) values_[v->id] = v.get();
  }
  for (const auto& op : module_.ops) {
    if (op) ops_[op->id] = op.get();
  }
  return Status::Ok();
}

Status Engine::CheckBuffers() {
  tile_extent_.assign(tiles_, 0);
  for (size_t i = 0; i < program_->buffers.size(); ++i) {
    const fb::BufferT* b = program_->buffers[i].get();
    if (b == nullptr) {
      return Status::BadInput("buffer entry " + std::to_string(i) + " is null");
    }
    const std::string where = BufferText(b->id) + " \"" + b->name +
                              "\" on tile " + std::to_string(b->tile) +
                              (b->op >= 0 ? " (op " + std::to_string(b->op) + ")"
                                          : std::string());
    if (buffers_.count(b->id)) {
      return Status::BadInput(where + ": buffer id is used twice");
    }
    if (b->tile >= static_cast<uint32_t>(tiles_)) {
      return Status::BadInput(where + ": tile out of range (target has " +
                              std::to_string(tiles_) + " tiles)");
    }
    if (b->offset % static_cast<uint32_t>(target_->alignment) != 0) {
      return Status::BadInput(where + ": offset " + std::to_string(b->offset) +
                              " is not aligned to " +
                              std::to_string(target_->alignment) + " bytes");
    }
    const int64_t end = int64_t{b->offset} + b->bytes;
    const int64_t code_end = program_->code[b->tile].reserved_bytes();
    if (b->offset < code_end || end > sram_bytes_) {
      return Status::BadInput(
          where + ": bytes [" + std::to_string(b->offset) + ", " +
          std::to_string(end) + ") are outside the tile's tensor memory [" +
          std::to_string(code_end) + ", " + std::to_string(sram_bytes_) +
          ") (code lies below " + std::to_string(code_end) + ")");
    }
    kernels::StatusOr<DType> dtype = kernels::DTypeFromFb(b->dtype);
    if (!dtype.ok()) {
      return Status::BadInput(where + ": " + dtype.status().message());
    }
    if (ir::StorageScaleExp(b->dtype, b->fp8_scale_exp) != b->fp8_scale_exp) {
      return Status::BadInput(where + ": fp8_scale_exp " +
                              std::to_string(b->fp8_scale_exp) +
                              " on a " + std::string(kernels::DTypeName(*dtype)) +
                              " buffer (FP8 only)");
    }
    BufferInfo info;
    info.buffer = b;
    info.dtype = *dtype;
    info.scale_exp = b->fp8_scale_exp;
    info.element_bytes = kernels::DTypeBytes(*dtype);
    buffers_[b->id] = info;
    tile_extent_[b->tile] = std::max(tile_extent_[b->tile], end);
  }
  return Status::Ok();
}

const BufferInfo* Engine::FindBuffer(uint32_t id) const {
  if (!renamed_ids_.empty() && renamed_ids_.count(id)) {
    touched_renamed_ = true;
    if (active_renames_ != nullptr) {
      auto r = std::lower_bound(active_renames_->begin(),
                                active_renames_->end(),
                                std::make_pair(id, uint32_t{0}));
      if (r != active_renames_->end() && r->first == id) id = r->second;
    }
  }
  auto it = buffers_.find(id);
  return it == buffers_.end() ? nullptr : &it->second;
}

int64_t Engine::ElementOf(int64_t addr) const {
  if (addr < standard_end_) return addr / target_->element_bytes;
  return target_->standard_elements +
         (addr - standard_end_) / target_->interleaved_element_bytes;
}

bool Engine::ShareElement(const ArgPlan& a, const ArgPlan& b) const {
  if (a.bytes == 0 || b.bytes == 0) return false;
  const int64_t a0 = ElementOf(a.addr), a1 = ElementOf(a.addr + a.bytes - 1);
  const int64_t b0 = ElementOf(b.addr), b1 = ElementOf(b.addr + b.bytes - 1);
  return a0 <= b1 && b0 <= a1;
}

Status Engine::ArgSlice(const std::string& where, int tile, int arg,
                        const fb::BufferSliceT& slice, ArgPlan* plan) {
  const std::string what = where + ": arg " + std::to_string(arg) + " " +
                           BufferText(slice.buffer);
  const BufferInfo* info = FindBuffer(slice.buffer);
  if (info == nullptr) return Status::BadInput(what + " does not exist");
  const fb::BufferT& b = *info->buffer;
  if (b.tile != static_cast<uint32_t>(tile)) {
    return Status::BadInput(what + " lives on tile " + std::to_string(b.tile));
  }
  const int64_t end = int64_t{slice.offset} + slice.bytes;
  if (end > b.bytes) {
    return Status::BadInput(what + ": slice [" + std::to_string(slice.offset) +
                            ", " + std::to_string(end) +
                            ") is outside the buffer's " +
                            std::to_string(b.bytes) + " bytes");
  }
  if (slice.offset % info->element_bytes != 0) {
    return Status::BadInput(
        what + ": slice offset " + std::to_string(slice.offset) +
        " is not a whole number of " +
        std::string(kernels::DTypeName(info->dtype)) + " elements");
  }
  plan->buffer = slice.buffer;
  plan->addr = int64_t{b.offset} + slice.offset;
  plan->bytes = slice.bytes;
  plan->dtype = info->dtype;
  plan->scale_exp = info->scale_exp;
  return Status::Ok();
}

Status Engine::CheckCompute(int s, int index, ComputePlan* plan) {
  const fb::ComputeT& c = *plan->compute;
  const std::string where = StepWhere(s, static_cast<int>(c.tile), c.op) +
                            " compute " + std::to_string(index) + " (" +
                            c.kernel + ")";
  if (c.tile >= static_cast<uint32_t>(tiles_)) {
    return Status::BadInput(where + ": tile out of range (target has " +
                            std::to_string(tiles_) + " tiles)");
  }
  for (size_t a = 0; a < c.args.size(); ++a) {
    if (!c.args[a]) {
      return Status::BadInput(where + ": arg " + std::to_string(a) + " is null");
    }
    ArgPlan arg;
    TILEC_RETURN_IF_ERROR(ArgSlice(where, static_cast<int>(c.tile),
                                   static_cast<int>(a), *c.args[a], &arg));
    plan->args.push_back(arg);
  }
  // Operands for the registry's cost function: dtypes and count only.
  std::vector<Operand> operands;
  for (const ArgPlan& a : plan->args) {
    operands.push_back(Operand{nullptr, static_cast<size_t>(a.bytes), a.dtype,
                               a.scale_exp});
  }
  auto args_text = [&]() {
    std::string text;
    for (const ArgPlan& a : plan->args) {
      text += (text.empty() ? "" : ", ") + BufferText(a.buffer);
    }
    return text;
  };
  kernels::StatusOr<int64_t> fast =
      kernels::Cycles(*model_, c.kernel, operands, c.params, c.fparams);
  if (!fast.ok()) {
    return Status::BadInput(where + " on " + args_text() + ": " +
                            fast.status().message());
  }
  int64_t cycles = *fast;
  int64_t extra = 0;
  int64_t macs = 0;
  const kernels::MemoryRule rule = RuleOf(c.kernel);
  if (rule == kernels::MemoryRule::kGemmAccumulator) {
    const ArgPlan& a = plan->args[0];
    const ArgPlan& out = plan->args[2];
    if (out.bytes > 0 && out.addr < standard_end_) {
      return Status::BadInput(
          where + ": output C " + BufferText(out.buffer) + " at [" +
          std::to_string(out.addr) + ", " + std::to_string(out.addr + out.bytes) +
          ") is not in interleaved memory (which starts at " +
          std::to_string(standard_end_) + ")");
    }
    if (ShareElement(a, out)) {
      return Status::BadInput(
          where + ": output C " + BufferText(out.buffer) +
          " shares memory element " + std::to_string(ElementOf(out.addr)) +
          (ElementOf(out.addr + out.bytes - 1) != ElementOf(out.addr)
               ? "-" + std::to_string(ElementOf(out.addr + out.bytes - 1))
               : std::string()) +
          " with left operand A " + BufferText(a.buffer));
    }
    // Saturating: absurd shapes are rejected by the kernel when it runs.
    const __int128 product = static_cast<__int128>(c.params[0]) *
                             c.params[1] * c.params[2];
    macs = product > INT64_MAX ? INT64_MAX : static_cast<int64_t>(product);
  }
  if (rule == kernels::MemoryRule::kBinaryInputs && plan->args.size() >= 2 &&
      ShareElement(plan->args[0], plan->args[1])) {
    kernels::StatusOr<int64_t> slow = kernels::Cycles(
        *model_, c.kernel, operands, c.params, c.fparams, KernelPath::kSlow);
    if (!slow.ok()) {
      return Status::BadInput(where + " on " + args_text() + ": " +
                              slow.status().message());
    }
    extra = *slow - cycles;
    cycles = *slow;
    // Marks the call as slow even when the formula charges nothing extra.
    if (extra == 0) extra = -1;
  }
  compute_cycles_[s][index] = cycles;
  compute_extra_[s][index] = extra;
  compute_macs_[s][index] = macs;
  return Status::Ok();
}

namespace {

// The first piece of a transfer (rows pieces of `bytes`, `pitch` apart from
// `offset`) that does not end within `buffer_bytes`, or -1 when all do.
int64_t FirstPieceOutside(int64_t offset, int64_t pitch, int64_t rows,
                          int64_t bytes, int64_t buffer_bytes) {
  if (offset + bytes > buffer_bytes) return 0;
  if (rows <= 1 || pitch == 0) return -1;
  const int64_t first = (buffer_bytes - offset - bytes) / pitch + 1;
  return first < rows ? first : -1;
}

// "bytes [a, b) are" for a single piece; "piece i of R (bytes [a, b)) is"
// for a strided transfer.
std::string PieceText(int64_t rows, int64_t piece, int64_t begin,
                      int64_t bytes) {
  const std::string range = "bytes [" + std::to_string(begin) + ", " +
                            std::to_string(begin + bytes) + ")";
  if (rows <= 1) return range + " are";
  return "piece " + std::to_string(piece) + " of " + std::to_string(rows) +
         " (" + range + ") is";
}

// Sets bits [begin, end) of `bits`; true if any of them was set already.
bool TestAndSet(std::vector<uint64_t>& bits, int64_t begin, int64_t end) {
  const int64_t w0 = begin >> 6, w1 = (end - 1) >> 6;
  const uint64_t m0 = ~uint64_t{0} << (begin & 63);
  const uint64_t m1 = ~uint64_t{0} >> (63 - ((end - 1) & 63));
  if (w0 == w1) {
    const uint64_t m = m0 & m1;
    const bool hit = (bits[w0] & m) != 0;
    bits[w0] |= m;
    return hit;
  }
  bool hit = (bits[w0] & m0) != 0;
  bits[w0] |= m0;
  for (int64_t w = w0 + 1; w < w1; ++w) {
    hit = hit || bits[w] != 0;
    bits[w] = ~uint64_t{0};
  }
  hit = hit || (bits[w1] & m1) != 0;
  bits[w1] |= m1;
  return hit;
}

// One destination of one transfer: `rows` pieces from `addr` on `tile`.
struct TransferWrite {
  int tile;
  int64_t addr;  // of piece 0
  int transfer, destination;
  uint32_t buffer;
};

// The message for two writes of the same tile bytes. writes[begin, ...) are
// one tile's writes in program order, and piece `hit_piece` of
// writes[hit_write] is the first piece that found a byte written before:
// it is named with the earliest piece before it that it overlaps. Pieces are
// walked, never collected, so a transfer of 2^31 rows costs no memory.
Status OverlapError(int s, const fb::SuperstepT& step, const StepPlan& plan,
                    const std::vector<TransferWrite>& writes, size_t begin,
                    size_t hit_write, int64_t hit_piece) {
  const TransferWrite& second = writes[hit_write];
  const TransferPlan& second_plan = plan.transfers[second.transfer];
  const int64_t b0 = second.addr + hit_piece * second_plan.dst_pitch;
  const int64_t b1 = b0 + second_plan.bytes;
  for (size_t w = begin; w <= hit_write; ++w) {
    const TransferWrite& first = writes[w];
    const TransferPlan& tp = plan.transfers[first.transfer];
    const int64_t pieces = w == hit_write ? hit_piece : tp.rows;
    for (int64_t i = 0; i < pieces; ++i) {
      const int64_t a0 = first.addr + i * tp.dst_pitch;
      const int64_t a1 = a0 + tp.bytes;
      if (a1 <= b0 || b1 <= a0) continue;
      const fb::TransferT& tr = *step.exchange[second.transfer];
      const fb::TransferT& tr1 = *step.exchange[first.transfer];
      std::string message =
          StepWhere(s, second.tile, tr.op) + " transfer " +
          std::to_string(second.transfer) + " destination " +
          std::to_string(second.destination) +
          (tr.rows > 1 ? " piece " + std::to_string(hit_piece) : "") + " " +
          BufferText(second.buffer) + ": writes tile bytes [" +
          std::to_string(std::max(a0, b0)) + ", " +
          std::to_string(std::min(a1, b1)) + ") that ";
      if (w == hit_write) {
        message += "its piece " + std::to_string(i) +
                   " also writes (dst_pitch " + std::to_string(tr.dst_pitch) +
                   " is less than the " + std::to_string(tr.bytes) +
                   " bytes of a piece)";
      } else {
        message += "transfer " + std::to_string(first.transfer) +
                   (tr1.rows > 1 ? " piece " + std::to_string(i) : "") +
                   " (op " + std::to_string(tr1.op) + ") also writes " +
                   "through " + BufferText(first.buffer);
      }
      return Status::BadInput(message);
    }
  }
  return Status::Internal("superstep " + std::to_string(s) +
                          ": overlapping writes not found again");
}

// The writes of one checked transfer, one per destination, in destination
// order.
void AppendWrites(int t, const TransferPlan& tp,
                  std::vector<TransferWrite>* writes) {
  for (size_t d = 0; d < tp.destinations.size(); ++d) {
    const TransferPlan::Destination& dst = tp.destinations[d];
    writes->push_back({dst.tile, dst.addr, t, static_cast<int>(d),
                       tp.transfer->destinations[d]->buffer});
  }
}

// Marks the bytes of writes[begin, end) (one tile's writes) in `bits`,
// stopping at the first piece that finds a byte marked already; true if one
// did, with that piece in *hit_write and *hit_piece. Leaves `bits` clear
// for the next tile.
bool MarkTileWrites(const StepPlan& plan,
                    const std::vector<TransferWrite>& writes, size_t begin,
                    size_t end, int64_t tensor_bytes,
                    std::vector<uint64_t>& bits, size_t* hit_write,
                    int64_t* hit_piece) {
  bool overlap = false;
  int64_t low = tensor_bytes, high = 0;
  for (size_t w = begin; w < end && !overlap; ++w) {
    const TransferPlan& tp = plan.transfers[writes[w].transfer];
    for (int64_t i = 0; i < tp.rows && !overlap; ++i) {
      const int64_t a = writes[w].addr + i * tp.dst_pitch;
      overlap = TestAndSet(bits, a, a + tp.bytes);
      low = std::min(low, a);
      high = std::max(high, a + tp.bytes);
      *hit_write = w;
      *hit_piece = i;
    }
  }
  if (high > low) {
    std::fill(bits.begin() + (low >> 6), bits.begin() + ((high + 63) >> 6), 0);
  }
  return overlap;
}

// Two writes of the same tile bytes (two transfers, two destinations of a
// multicast, or two pieces of one destination, through any buffers, which
// may alias) would make the result depend on transfer order. Tile by tile,
// every piece marks its bytes in a bitmap; a tile where a piece finds a
// byte marked is then searched piece by piece to name the pair.
Status CheckOverlappingWrites(int s, const fb::SuperstepT& step,
                              const StepPlan& plan, int64_t tensor_bytes,
                              std::vector<TransferWrite> writes) {
  std::stable_sort(
      writes.begin(), writes.end(),
      [](const TransferWrite& a, const TransferWrite& b) {
        return a.tile < b.tile;
      });
  std::vector<uint64_t> bits(static_cast<size_t>((tensor_bytes + 63) / 64), 0);
  for (size_t begin = 0; begin < writes.size();) {
    size_t end = begin;
    while (end < writes.size() && writes[end].tile == writes[begin].tile) ++end;
    size_t hit_write = 0;
    int64_t hit_piece = 0;
    if (MarkTileWrites(plan, writes, begin, end, tensor_bytes, bits,
                       &hit_write, &hit_piece)) {
      return OverlapError(s, step, plan, writes, begin, hit_write, hit_piece);
    }
    begin = end;
  }
  return Status::Ok();
}

}  // namespace

Status Engine::CheckTransfers(int s) {
  const fb::SuperstepT& step = *program_->supersteps[s];
  StepPlan& plan = steps_[s];
  // Every destination of every transfer (each `rows` pieces), to find two
  // writes of the same bytes.
  std::vector<TransferWrite> writes;
  for (size_t t = 0; t < step.exchange.size(); ++t) {
    TransferPlan tp;
    TILEC_RETURN_IF_ERROR(CheckTransfer(s, static_cast<int>(t), &tp));
    AppendWrites(static_cast<int>(t), tp, &writes);
    plan.transfers.push_back(std::move(tp));
  }
  TILEC_RETURN_IF_ERROR(
      CheckOverlappingWrites(s, step, plan, sram_bytes_, std::move(writes)));
  return CheckSchedule(s);
}

namespace {

// Per tile that takes part, where its part of the phase ends: its last
// send's end or its last arrival's end.
std::vector<std::pair<int, int64_t>> TileEnds(
    const kernels::PhaseTraffic& traffic, const fb::ExchangeScheduleT& schedule) {
  const kernels::ExchangeModel& model = traffic.model();
  std::map<int, int64_t> ends;
  for (size_t p = 0; p < traffic.packets().size(); ++p) {
    const auto& packet = traffic.packets()[p];
    const int64_t end = schedule.starts[p] + model.Duration(packet.words);
    int64_t& own = ends[packet.sender];
    own = std::max(own, end);
    for (int r : traffic.ReceiversOf(packet)) {
      int64_t& e = ends[r];
      e = std::max(e, end + model.RouteLatency(r));
    }
  }
  return {ends.begin(), ends.end()};
}

}  // namespace

// The phase's traffic as the schedule sees it: every row of every transfer,
// in program order, over the words it touches at the source and at every
// destination.
kernels::PhaseTraffic Engine::TrafficOf(int s) const {
  return kernels::TrafficOfStep(
      exchange_model_, *program_->supersteps[s],
      [&](uint32_t id) -> int64_t { return FindBuffer(id)->buffer->offset; });
}

// Verifies superstep s's exchange schedule (once: renames change no tile or
// size) and keeps what the costs and the code check need.
Status Engine::CheckSchedule(int s) {
  StepPlan& plan = steps_[s];
  const fb::SuperstepT& step = *program_->supersteps[s];
  if (plan.transfers.empty() || schedules_[s].checked) return Status::Ok();
  const std::string where = "superstep " + std::to_string(s) +
                            " exchange schedule";
  if (step.schedule == nullptr) {
    return Status::BadInput(
        where + ": missing (a program written before exchange schedules, "
                "schema 3: re-run emit-device)");
  }
  // Every piece is at least one packet: refuse a schedule that cannot
  // cover the transfers before expanding them.
  int64_t pieces = 0;
  for (const TransferPlan& tp : plan.transfers) pieces += tp.rows;
  if (pieces > static_cast<int64_t>(step.schedule->starts.size())) {
    return Status::BadInput(where + ": starts " +
                            std::to_string(step.schedule->starts.size()) +
                            " packets, the transfers have " +
                            std::to_string(pieces) + " pieces");
  }
  const kernels::PhaseTraffic traffic = TrafficOf(s);
  kernels::StatusOr<int64_t> length =
      kernels::VerifySchedule(traffic, *step.schedule, where);
  if (!length.ok()) return length.status();
  StepSchedule& done = schedules_[s];
  done.checked = true;
  done.scheduled = *length;
  done.bound = traffic.EndpointBound();
  if (static_cast<int64_t>(step.schedule->bound) != done.bound) {
    return Status::BadInput(where + ": records an endpoint bound of " +
                            std::to_string(step.schedule->bound) +
                            ", the transfers' is " +
                            std::to_string(done.bound));
  }
  done.tile_end = TileEnds(traffic, *step.schedule);
  return Status::Ok();
}


Status Engine::CheckTransfer(int s, int t, TransferPlan* tp) {
  const fb::TransferT* tr = program_->supersteps[s]->exchange[t].get();
  if (tr == nullptr) {
    return Status::BadInput("superstep " + std::to_string(s) + " transfer " +
                            std::to_string(t) + " is null");
  }
  const std::string where = StepWhere(s, static_cast<int>(tr->src_tile), tr->op) +
                            " transfer " + std::to_string(t);
  const BufferInfo* src = nullptr;
  TILEC_RETURN_IF_ERROR(CheckTransferSource(where, *tr, &src));
  TILEC_RETURN_IF_ERROR(PlanTransferPieces(where, *tr, *src, tp));
  for (size_t d = 0; d < tr->destinations.size(); ++d) {
    TILEC_RETURN_IF_ERROR(
        CheckTransferDestination(where, *tr, static_cast<int>(d), *src, tp));
  }
  return Status::Ok();
}

Status Engine::CheckTransferSource(const std::string& where,
                                   const fb::TransferT& tr,
                                   const BufferInfo** src) {
  if (tr.src_tile >= static_cast<uint32_t>(tiles_)) {
    return Status::BadInput(where + ": source tile out of range (target has " +
                            std::to_string(tiles_) + " tiles)");
  }
  *src = FindBuffer(tr.src_buffer);
  const std::string src_text = "source " + BufferText(tr.src_buffer);
  if (*src == nullptr) {
    return Status::BadInput(where + ": " + src_text + " does not exist");
  }
  if ((*src)->buffer->tile != tr.src_tile) {
    return Status::BadInput(where + ": " + src_text + " lives on tile " +
                            std::to_string((*src)->buffer->tile));
  }
  return Status::Ok();
}

Status Engine::PlanTransferPieces(const std::string& where,
                                  const fb::TransferT& tr,
                                  const BufferInfo& src, TransferPlan* tp) {
  const std::string src_text = "source " + BufferText(tr.src_buffer);
  if (tr.bytes == 0) {
    return Status::BadInput(where + ": " + src_text + ": transfer of 0 bytes");
  }
  if (tr.rows == 0) {
    return Status::BadInput(where + ": " + src_text + ": transfer of 0 rows");
  }
  const int64_t rows = tr.rows;
  const int64_t bytes = tr.bytes;
  // With one piece the pitches mean nothing.
  const int64_t src_pitch = rows > 1 ? tr.src_pitch : 0;
  const int64_t dst_pitch = rows > 1 ? tr.dst_pitch : 0;
  const int64_t src_out = FirstPieceOutside(tr.src_offset, src_pitch, rows,
                                            bytes, src.buffer->bytes);
  if (src_out >= 0) {
    return Status::BadInput(where + ": " + src_text + ": " +
                            PieceText(rows, src_out,
                                      tr.src_offset + src_out * src_pitch,
                                      bytes) +
                            " outside the buffer's " +
                            std::to_string(src.buffer->bytes) + " bytes");
  }
  kernels::StatusOr<DType> dtype = kernels::DTypeFromFb(tr.dtype);
  if (!dtype.ok() || *dtype != src.dtype) {
    return Status::BadInput(
        where + ": " + src_text + ": transfer dtype " +
        ir::DTypeText(tr.dtype) + " differs from the buffer's " +
        ir::DTypeText(src.buffer->dtype, src.buffer->fp8_scale_exp));
  }
  if (tr.src_offset % src.element_bytes != 0 ||
      tr.bytes % src.element_bytes != 0) {
    return Status::BadInput(where + ": " + src_text + ": offset " +
                            std::to_string(tr.src_offset) + " or bytes " +
                            std::to_string(tr.bytes) +
                            " is not a whole number of elements");
  }
  // Destinations have the source's dtype (checked with each destination),
  // so one element size serves both pitches.
  if (src_pitch % src.element_bytes != 0 ||
      dst_pitch % src.element_bytes != 0) {
    return Status::BadInput(where + ": " + src_text + ": src_pitch " +
                            std::to_string(src_pitch) + " or dst_pitch " +
                            std::to_string(dst_pitch) +
                            " is not a whole number of elements");
  }
  if (tr.destinations.empty()) {
    return Status::BadInput(where + ": " + src_text + ": no destinations");
  }
  tp->transfer = &tr;
  tp->src_addr = int64_t{src.buffer->offset} + tr.src_offset;
  tp->bytes = bytes;
  tp->rows = rows;
  tp->src_pitch = src_pitch;
  tp->dst_pitch = dst_pitch;
  return Status::Ok();
}

Status Engine::CheckTransferDestination(const std::string& where,
                                        const fb::TransferT& tr, int d,
                                        const BufferInfo& src,
                                        TransferPlan* tp) {
  const fb::DestinationT* dst = tr.destinations[d].get();
  if (dst == nullptr) {
    return Status::BadInput(where + ": destination " + std::to_string(d) +
                            " is null");
  }
  const std::string dwhere = where + ": destination " + std::to_string(d) +
                             " tile " + std::to_string(dst->tile) + " " +
                             BufferText(dst->buffer);
  if (dst->tile >= static_cast<uint32_t>(tiles_)) {
    return Status::BadInput(dwhere + ": tile out of range (target has " +
                            std::to_string(tiles_) + " tiles)");
  }
  if (dst->tile == tr.src_tile) {
    return Status::BadInput(
        dwhere + ": a transfer to its own source tile (use the copy kernel)");
  }
  const BufferInfo* db = FindBuffer(dst->buffer);
  if (db == nullptr) return Status::BadInput(dwhere + " does not exist");
  if (db->buffer->tile != dst->tile) {
    return Status::BadInput(dwhere + " lives on tile " +
                            std::to_string(db->buffer->tile));
  }
  const int64_t dst_out = FirstPieceOutside(dst->offset, tp->dst_pitch,
                                            tp->rows, tp->bytes,
                                            db->buffer->bytes);
  if (dst_out >= 0) {
    return Status::BadInput(
        dwhere + ": " +
        PieceText(tp->rows, dst_out, dst->offset + dst_out * tp->dst_pitch,
                  tp->bytes) +
        " outside the buffer's " + std::to_string(db->buffer->bytes) +
        " bytes");
  }
  if (db->dtype != src.dtype || db->scale_exp != src.scale_exp) {
    return Status::BadInput(
        dwhere + ": buffer is " +
        ir::DTypeText(db->buffer->dtype, db->buffer->fp8_scale_exp) +
        " but source " + BufferText(tr.src_buffer) + " is " +
        ir::DTypeText(src.buffer->dtype, src.buffer->fp8_scale_exp));
  }
  if (dst->offset % db->element_bytes != 0) {
    return Status::BadInput(dwhere + ": offset " +
                            std::to_string(dst->offset) +
                            " is not a whole number of elements");
  }
  tp->destinations.push_back(
      {static_cast<int>(dst->tile), int64_t{db->buffer->offset} + dst->offset});
  return Status::Ok();
}

Status Engine::CheckSuperstep(int s) {
  const fb::SuperstepT* step = program_->supersteps[s].get();
  if (step == nullptr) {
    return Status::BadInput("superstep " + std::to_string(s) + " is null");
  }
  steps_[s] = StepPlan{};
  compute_cycles_[s].assign(step->compute.size(), 0);
  compute_extra_[s].assign(step->compute.size(), 0);
  compute_macs_[s].assign(step->compute.size(), 0);
  std::map<int, std::vector<ComputePlan>> by_tile;
  for (size_t i = 0; i < step->compute.size(); ++i) {
    const fb::ComputeT* c = step->compute[i].get();
    if (c == nullptr) {
      return Status::BadInput("superstep " + std::to_string(s) + " compute " +
                              std::to_string(i) + " is null");
    }
    ComputePlan plan;
    plan.compute = c;
    plan.index = static_cast<int>(i);
    TILEC_RETURN_IF_ERROR(CheckCompute(s, static_cast<int>(i), &plan));
    by_tile[static_cast<int>(c->tile)].push_back(std::move(plan));
  }
  StepPlan& sp = steps_[s];
  for (auto& [tile, plans] : by_tile) {
    sp.tiles.push_back(tile);
    sp.computes.push_back(std::move(plans));
  }
  return CheckTransfers(s);
}

Status Engine::CheckBindingFragment(const std::string& where,
                                    const BindingPlan& binding,
                                    const fb::FragmentT& f,
                                    FragmentPlan* plan) {
  const std::string fwhere = where + " tile " + std::to_string(f.tile) + " " +
                             BufferText(f.buffer);
  const BufferInfo* info = FindBuffer(f.buffer);
  if (info == nullptr) return Status::BadInput(fwhere + " does not exist");
  if (info->buffer->tile != f.tile) {
    return Status::BadInput(fwhere + " lives on tile " +
                            std::to_string(info->buffer->tile));
  }
  const size_t rank = binding.shape.size();
  if (f.begin.size() != rank || f.end.size() != rank) {
    return Status::BadInput(fwhere + ": box " + IndexText(f.begin) + " to " +
                            IndexText(f.end) + " does not have the value's rank " +
                            std::to_string(rank));
  }
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (f.begin[d] < 0 || f.begin[d] > f.end[d] || f.end[d] > binding.shape[d]) {
      return Status::BadInput(fwhere + ": box " + IndexText(f.begin) + " to " +
                              IndexText(f.end) + " is outside the value's shape " +
                              ir::ShapeText(binding.shape));
    }
    elements *= f.end[d] - f.begin[d];
  }
  const int64_t end = int64_t{f.offset} + elements * info->element_bytes;
  if (end > info->buffer->bytes) {
    return Status::BadInput(fwhere + ": box of " + std::to_string(elements) +
                            " " + std::string(kernels::DTypeName(info->dtype)) +
                            " elements at offset " + std::to_string(f.offset) +
                            " needs bytes up to " + std::to_string(end) +
                            " but the buffer holds " +
                            std::to_string(info->buffer->bytes));
  }
  if (f.offset % info->element_bytes != 0) {
    return Status::BadInput(fwhere + ": offset " + std::to_string(f.offset) +
                            " is not a whole number of elements");
  }
  plan->tile = static_cast<int>(f.tile);
  plan->buffer = f.buffer;
  plan->addr = int64_t{info->buffer->offset} + f.offset;
  plan->dtype = info->dtype;
  plan->scale_exp = info->scale_exp;
  plan->begin = f.begin;
  plan->end = f.end;
  return Status::Ok();
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

Status Engine::CheckOutputCoverage(const BindingPlan& binding,
                                   const std::string& where) {
  std::vector<uint8_t> covered(static_cast<size_t>(binding.elements), 0);
  for (const FragmentPlan& f : binding.fragments) {
    ForEachRow(binding.shape, f.begin, f.end,
               [&](int64_t flat, int64_t n, int64_t) {
                 std::memset(covered.data() + flat, 1, static_cast<size_t>(n));
               });
  }
  const auto first = std::find(covered.begin(), covered.end(), 0);
  if (first == covered.end()) return Status::Ok();
  const int64_t missing = std::count(covered.begin(), covered.end(), 0);
  return Status::BadInput(
      where + ": element " +
      IndexText(Unflatten(first - covered.begin(), binding.shape)) +
      " is not read from any fragment (" + std::to_string(missing) + " of " +
      std::to_string(binding.elements) + " elements are not covered)");
}

Status Engine::PatchBinding(const std::string& where, bool outputs,
                            int patch, BindingPlan* plan) {
  const std::vector<int64_t>& image = plan->shape;
  if (outputs || plan->value->role != fb::ValueRole::Input ||
      image.size() != 4) {
    return Status::BadInput(where + ": patch=" + std::to_string(patch) +
                            " is for inputs of shape [B, C, H, W]");
  }
  if (patch < 0 || patch > image[2] || patch > image[3]) {
    return Status::BadInput(where + ": patch=" + std::to_string(patch) +
                            " must be positive and at most the image's height "
                            "and width " + ir::ShapeText(image));
  }
  plan->patch = patch;
  plan->shape = kernels::PatchifiedShape(image, patch);
  return Status::Ok();
}

Status Engine::CheckBindings(bool outputs) {
  const auto& bindings = outputs ? program_->outputs : program_->inputs;
  std::vector<BindingPlan>& plans = outputs ? output_plans_ : input_plans_;
  const std::string kind = outputs ? "output" : "input";
  std::map<uint32_t, int> seen;
  for (size_t i = 0; i < bindings.size(); ++i) {
    const fb::HostBindingT* hb = bindings[i].get();
    if (hb == nullptr) {
      return Status::BadInput(kind + " binding " + std::to_string(i) + " is null");
    }
    auto vit = values_.find(hb->value);
    std::string where = kind + " binding " + std::to_string(i) + " value %" +
                        std::to_string(hb->value);
    if (vit == values_.end()) {
      return Status::BadInput(where + ": no such value in the graph");
    }
    const fb::ValueT& value = *vit->second;
    where += " \"" + value.name + "\"";
    if (seen.count(hb->value)) {
      return Status::BadInput(where + ": value is bound twice (also by " +
                              kind + " binding " +
                              std::to_string(seen[hb->value]) + ")");
    }
    seen[hb->value] = static_cast<int>(i);
    if (!outputs && value.role != fb::ValueRole::Input &&
        value.role != fb::ValueRole::Weight) {
      return Status::BadInput(where +
                              ": the host writes only inputs and weights");
    }
    BindingPlan plan;
    plan.value = &value;
    plan.shape = value.shape;
    for (int64_t d : value.shape) {
      if (d < 0) return Status::BadInput(where + ": negative extent in shape");
      plan.value_elements *= d;
    }
    if (hb->patch != 0) {
      TILEC_RETURN_IF_ERROR(PatchBinding(where, outputs, hb->patch, &plan));
    }
    plan.elements = 1;
    for (int64_t d : plan.shape) plan.elements *= d;
    for (size_t f = 0; f < hb->fragments.size(); ++f) {
      if (!hb->fragments[f]) {
        return Status::BadInput(where + ": fragment " + std::to_string(f) +
                                " is null");
      }
      FragmentPlan fp;
      TILEC_RETURN_IF_ERROR(CheckBindingFragment(
          where + " fragment " + std::to_string(f), plan, *hb->fragments[f],
          &fp));
      plan.fragments.push_back(std::move(fp));
    }
    if (outputs) TILEC_RETURN_IF_ERROR(CheckOutputCoverage(plan, where));
    plans.push_back(std::move(plan));
  }
  if (outputs) {
    for (const auto& v : module_.values) {
      if (v && v->role == fb::ValueRole::Output && !seen.count(v->id)) {
        return Status::BadInput("graph output %" + std::to_string(v->id) +
                                " \"" + v->name +
                                "\" has no output binding: the host cannot "
                                "read it");
      }
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- execution

Status Engine::AllocateAndWriteInputs(const HostTensors& inputs) {
  // Host data first, so that a missing tensor is reported before any work.
  std::vector<const float*> data(input_plans_.size());
  std::deque<std::vector<float>> patched;  // stable addresses
  for (size_t i = 0; i < input_plans_.size(); ++i) {
    const BindingPlan& b = input_plans_[i];
    auto it = inputs.find(b.value->id);
    const std::string where = "input value %" + std::to_string(b.value->id) +
                              " \"" + b.value->name + "\"";
    if (it == inputs.end()) {
      return Status::BadInput(where + ": no host data");
    }
    if (static_cast<int64_t>(it->second.size()) != b.value_elements) {
      return Status::BadInput(where + ": host data has " +
                              std::to_string(it->second.size()) +
                              " elements, the value " +
                              std::to_string(b.value_elements));
    }
    data[i] = it->second.data();
    if (b.patch > 0) {
      // The host's layout transform: it writes the image's patches.
      patched.push_back(
          kernels::Patchify(it->second, b.value->shape, b.patch));
      data[i] = patched.back().data();
    }
  }
  // Replicas write the same box many times (a weight on every tile of a
  // group): each distinct (box, dtype, scale) is encoded once.
  using BoxKey = std::tuple<size_t, std::vector<int64_t>, std::vector<int64_t>,
                            DType, int>;
  std::map<BoxKey, size_t> box_index;
  std::vector<std::pair<size_t, size_t>> box_source;  // (binding, fragment)
  std::vector<std::vector<size_t>> fragment_box(input_plans_.size());
  // Each tile's (binding, fragment) pairs, so that tiles fill in parallel.
  std::vector<std::vector<std::pair<size_t, size_t>>> by_tile(tiles_);
  for (size_t i = 0; i < input_plans_.size(); ++i) {
    for (size_t f = 0; f < input_plans_[i].fragments.size(); ++f) {
      const FragmentPlan& fp = input_plans_[i].fragments[f];
      BoxKey key{i, fp.begin, fp.end, fp.dtype, fp.scale_exp};
      auto [it, added] = box_index.emplace(key, box_source.size());
      if (added) box_source.push_back({i, f});
      fragment_box[i].push_back(it->second);
      by_tile[fp.tile].push_back({i, f});
    }
  }
  std::vector<std::vector<uint8_t>> boxes(box_source.size());
  ParallelFor(boxes.size(), options_.threads, [&](size_t u) {
    // Not a structured binding: clang 14 (the fuzz build) cannot capture
    // one in the lambda below.
    const size_t i = box_source[u].first, fi = box_source[u].second;
    const BindingPlan& b = input_plans_[i];
    const FragmentPlan& f = b.fragments[fi];
    const int eb = kernels::DTypeBytes(f.dtype);
    int64_t elements = 1;
    for (size_t d = 0; d < f.begin.size(); ++d) elements *= f.end[d] - f.begin[d];
    boxes[u].resize(static_cast<size_t>(elements * eb));
    ForEachRow(b.shape, f.begin, f.end,
               [&](int64_t flat, int64_t n, int64_t r) {
                 kernels::StoreArrayAs(
                     f.dtype, std::span<const float>(data[i] + flat, n),
                     f.scale_exp,
                     std::span<uint8_t>(boxes[u].data() + r * n * eb,
                                        static_cast<size_t>(n * eb)));
               });
  });
  memory_.resize(tiles_);
  ParallelFor(static_cast<size_t>(tiles_), options_.threads, [&](size_t t) {
    // 0xFF is NaN in F32, F16, BF16 and both FP8s: unwritten reads show.
    memory_[t].assign(static_cast<size_t>(tile_extent_[t]), 0xFF);
    for (const auto& [i, fi] : by_tile[t]) {
      const std::vector<uint8_t>& box = boxes[fragment_box[i][fi]];
      if (!box.empty()) {
        std::memcpy(memory_[t].data() + input_plans_[i].fragments[fi].addr,
                    box.data(), box.size());
      }
    }
  });
  return Status::Ok();
}

Status Engine::RunComputePhase(int s) {
  const StepPlan& step = steps_[s];
  const size_t n = step.tiles.size();
  if (n == 0) return Status::Ok();
  // Each tile touches only its own memory, so tiles run in any order on any
  // thread; the first failure in program order is reported.
  std::vector<int> failed_index(n, INT_MAX);
  std::vector<std::string> failed_message(n);
  ParallelFor(n, options_.threads, [&](size_t i) {
    std::vector<Operand> operands;
    const int tile = step.tiles[i];
    uint8_t* mem = memory_[tile].data();
    for (const ComputePlan& cp : step.computes[i]) {
      operands.clear();
      for (const ArgPlan& a : cp.args) {
        operands.push_back(Operand{mem + a.addr, static_cast<size_t>(a.bytes),
                                   a.dtype, a.scale_exp});
      }
      const fb::ComputeT& c = *cp.compute;
      kernels::Status st = kernels::Run(c.kernel, operands, c.params, c.fparams);
      if (!st.ok()) {
        std::string args;
        for (const ArgPlan& a : cp.args) {
          args += (args.empty() ? "" : ", ") + BufferText(a.buffer);
        }
        failed_index[i] = cp.index;
        failed_message[i] = StepWhere(s, tile, c.op) + " compute " +
                            std::to_string(cp.index) + " (" + c.kernel +
                            ") on " + args + ": " + st.message();
        return;
      }
    }
  });
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (failed_index[i] != INT_MAX &&
        (first == n || failed_index[i] < failed_index[first])) {
      first = i;
    }
  }
  if (first != n) return Status::BadInput(failed_message[first]);
  return Status::Ok();
}

void Engine::RunExchangePhase(int s) {
  const StepPlan& step = steps_[s];
  if (step.transfers.empty()) return;
  // Gather every source piece first, then scatter: all sources are read as
  // of the end of the compute phase, so transfer order never matters.
  size_t total = 0;
  for (const TransferPlan& t : step.transfers) total += t.rows * t.bytes;
  std::vector<uint8_t> staging(total);
  size_t at = 0;
  for (const TransferPlan& t : step.transfers) {
    const uint8_t* src = memory_[t.transfer->src_tile].data() + t.src_addr;
    for (int64_t i = 0; i < t.rows; ++i) {
      std::memcpy(staging.data() + at, src + i * t.src_pitch, t.bytes);
      at += t.bytes;
    }
  }
  at = 0;
  for (const TransferPlan& t : step.transfers) {
    for (const TransferPlan::Destination& d : t.destinations) {
      uint8_t* dst = memory_[d.tile].data() + d.addr;
      for (int64_t i = 0; i < t.rows; ++i) {
        std::memcpy(dst + i * t.dst_pitch, staging.data() + at + i * t.bytes,
                    t.bytes);
      }
    }
    at += t.rows * t.bytes;
  }
}

Status Engine::ReadOutputs(SimResult* result) {
  for (const BindingPlan& b : output_plans_) {
    const std::string where = "output value %" + std::to_string(b.value->id) +
                              " \"" + b.value->name + "\"";
    std::vector<float>& out = result->outputs[b.value->id];
    out.assign(static_cast<size_t>(b.elements), 0.0f);
    std::vector<uint8_t> covered(static_cast<size_t>(b.elements), 0);
    std::vector<float> row;
    for (size_t fi = 0; fi < b.fragments.size(); ++fi) {
      const FragmentPlan& f = b.fragments[fi];
      const int eb = kernels::DTypeBytes(f.dtype);
      const uint8_t* base = memory_[f.tile].data() + f.addr;
      Status status;
      ForEachRow(b.shape, f.begin, f.end,
                 [&](int64_t flat, int64_t n, int64_t r) {
                   if (!status.ok()) return;
                   row.resize(static_cast<size_t>(n));
                   kernels::LoadArrayAs(
                       f.dtype,
                       std::span<const uint8_t>(base + r * n * eb,
                                                static_cast<size_t>(n * eb)),
                       f.scale_exp, row);
                   for (int64_t j = 0; j < n; ++j) {
                     const size_t e = static_cast<size_t>(flat + j);
                     if (covered[e]) {
                       const float a = out[e], v = row[j];
                       const bool same =
                           a == v || (std::isnan(a) && std::isnan(v));
                       if (!same) {
                         status = Status::BadInput(
                             where + " fragment " + std::to_string(fi) +
                             " tile " + std::to_string(f.tile) + " " +
                             BufferText(f.buffer) + ": element " +
                             IndexText(Unflatten(flat + j, b.shape)) + " is " +
                             ir::NumberText(v) +
                             " but an earlier fragment read " +
                             ir::NumberText(a));
                         return;
                       }
                     }
                     out[e] = row[j];
                     covered[e] = 1;
                   }
                 });
      TILEC_RETURN_IF_ERROR(status);
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- costs

// The exchange phase's cycles go to the transfers' ops by the bytes they
// deliver.
void SplitExchangeByOp(const std::map<uint32_t, int64_t>& op_bytes,
                       CycleTally* tally, SuperstepReport* sr) {
  std::vector<uint32_t> ids;
  std::vector<int64_t> weights;
  for (const auto& [op, bytes] : op_bytes) {
    ids.push_back(op);
    weights.push_back(bytes);
  }
  const std::vector<int64_t> shares = Apportion(sr->exchange_cycles, weights);
  for (size_t i = 0; i < ids.size(); ++i) {
    tally->Op(ids[i]).exchange_cycles += shares[i];
    sr->exchange_split.push_back({ids[i], shares[i]});
  }
}

// Adds one superstep's report to the program's totals.
void AddSuperstep(SuperstepReport sr, SimResult* r) {
  r->compute_cycles += sr.compute_cycles;
  r->exchange_cycles += sr.exchange_cycles;
  r->exchange_bound_cycles += sr.exchange_bound_cycles;
  r->exchange_scheduled_cycles += sr.exchange_scheduled_cycles;
  r->sync_cycles += sr.sync_cycles;
  r->update_cycles += sr.update_cycles;
  r->kernel_calls += sr.kernel_calls;
  r->transfers += sr.transfers;
  r->pieces += sr.pieces;
  r->bytes_sent += sr.bytes_sent;
  r->bytes_received += sr.bytes_received;
  VLOG(1) << "superstep " << sr.index << " \"" << sr.label << "\": compute "
          << sr.compute_cycles << " (tile " << sr.slowest_tile
          << "), exchange " << sr.exchange_cycles << " (tile "
          << sr.exchange_slowest_tile << ")";
  r->supersteps.push_back(std::move(sr));
}

void Engine::CountStep(size_t k, CycleTally* tally, int64_t* clock,
                       SimResult* r) {
  const RunStep& rs = schedule_[k];
  const int s = rs.superstep;
  SuperstepReport sr;
  sr.index = s;
  sr.iteration = rs.iteration;
  sr.label = program_->supersteps[s]->label;
  sr.start_cycle = *clock;
  if (rs.iteration >= 1) CountIterationUpdate(s, tally, &sr);
  CountComputePhase(k, s, tally, &sr, r);
  AttributeSlowestTile(s, tally, &sr);
  if (!steps_[s].transfers.empty()) CountExchangePhase(k, s, tally, &sr, r);
  const int64_t cycles =
      sr.update_cycles + sr.compute_cycles + sr.exchange_cycles;
  *clock += cycles;
  if (rs.repeat >= 0) {
    r->repeats[rs.repeat].iteration_cycles[rs.iteration] += cycles;
  }
  AddSuperstep(std::move(sr), r);
}

void Engine::FinishCounts(CycleTally* tally, int64_t clock, SimResult* r) {
  r->total_cycles = clock;
  r->seconds = r->clock_hz > 0 ? static_cast<double>(clock) / r->clock_hz : 0;
  ReportOps(tally, r);
  ReportSlowestTiles(*tally, r);
  ReportPeakMemory(r);
}

// Each tile's kernels run in order; the slowest tile (the lowest-numbered
// one on a tie) sets the phase's length.
void Engine::CountComputePhase(size_t k, int s, CycleTally* tally,
                               SuperstepReport* sr, SimResult* r) {
  const StepPlan& plan = steps_[s];
  for (size_t i = 0; i < plan.tiles.size(); ++i) {
    const int tile = plan.tiles[i];
    int64_t sum = 0;
    for (const ComputePlan& cp : plan.computes[i]) {
      const int64_t cycles = compute_cycles_[s][cp.index];
      const int64_t extra = compute_extra_[s][cp.index];
      sum += cycles;
      OpReport& o = tally->Op(cp.compute->op);
      ++o.kernel_calls;
      o.macs += compute_macs_[s][cp.index];
      r->gemm_macs += compute_macs_[s][cp.index];
      if (extra != 0) {
        ++o.slow_path_calls;
        ++r->slow_path_calls;
        SlowPathReport& sp = tally->slow[cp.compute->kernel];
        sp.kernel = cp.compute->kernel;
        ++sp.calls;
        sp.extra_cycles += std::max<int64_t>(extra, 0);
      }
    }
    tally->step_compute[k][tile] = sum;
    tally->tile_compute[tile] += sum;
    tally->tile_calls[tile] += static_cast<int64_t>(plan.computes[i].size());
    sr->kernel_calls += static_cast<int64_t>(plan.computes[i].size());
    if (sum > sr->compute_cycles || sr->slowest_tile < 0) {
      sr->compute_cycles = sum;
      sr->slowest_tile = tile;
    }
  }
}

// Only the slowest tile's cycles are charged to ops and spans, so that the
// per-op cycles sum to the phase exactly.
void Engine::AttributeSlowestTile(int s, CycleTally* tally,
                                  SuperstepReport* sr) const {
  const StepPlan& plan = steps_[s];
  for (size_t i = 0; i < plan.tiles.size(); ++i) {
    if (plan.tiles[i] != sr->slowest_tile) continue;
    for (const ComputePlan& cp : plan.computes[i]) {
      const int64_t cycles = compute_cycles_[s][cp.index];
      tally->Op(cp.compute->op).compute_cycles += cycles;
      if (!sr->compute_spans.empty() &&
          sr->compute_spans.back().op == cp.compute->op &&
          sr->compute_spans.back().kernel == cp.compute->kernel) {
        sr->compute_spans.back().cycles += cycles;
        ++sr->compute_spans.back().calls;
      } else {
        sr->compute_spans.push_back(
            {cp.compute->op, cp.compute->kernel, cycles, 1});
      }
    }
  }
}

// Before a repeat body's superstep runs again, its tiles change the
// addresses that differ in this iteration; the slowest tile's update is
// charged, to the op that first names a renamed buffer there.
void Engine::CountIterationUpdate(int s, CycleTally* tally,
                                  SuperstepReport* sr) const {
  const StepUpdate& update = update_cycles_[s];
  if (update.cycles == 0) return;
  sr->update_cycles = update.cycles;
  sr->update_tile = update.tile;
  tally->Op(update.op).update_cycles += update.cycles;
}

void Engine::CountExchangePhase(size_t k, int s, CycleTally* tally,
                                SuperstepReport* sr, SimResult* r) const {
  std::map<uint32_t, int64_t> op_bytes;
  for (const TransferPlan& tp : steps_[s].transfers) {
    const fb::TransferT& t = *tp.transfer;
    const int64_t dests = static_cast<int64_t>(tp.destinations.size());
    // A multicast is sent once and received by each destination.
    const int64_t bytes = tp.rows * tp.bytes;
    OpReport& o = tally->Op(t.op);
    ++o.transfers;
    o.pieces += tp.rows;
    o.bytes_sent += bytes;
    o.bytes_received += bytes * dests;
    op_bytes[t.op] += bytes * dests;
    sr->bytes_sent += bytes;
    sr->bytes_received += bytes * dests;
    ++sr->transfers;
    sr->pieces += tp.rows;
  }
  const StepSchedule& schedule = schedules_[s];
  int64_t slowest = -1;
  for (const auto& [t, end] : schedule.tile_end) {
    tally->step_exchange[k][t] = end;
    tally->tile_exchange[t] += end;
    if (end > slowest) {
      slowest = end;
      sr->exchange_slowest_tile = t;
    }
  }
  sr->exchange_bound_cycles = schedule.bound;
  sr->exchange_scheduled_cycles = schedule.scheduled;
  sr->sync_cycles = exchange_model_.sync_cycles;
  sr->exchange_cycles = schedule.scheduled + exchange_model_.sync_cycles;
  ++r->exchange_phases;
  SplitExchangeByOp(op_bytes, tally, sr);
}

void Engine::ReportOps(CycleTally* tally, SimResult* r) const {
  for (auto& [id, o] : tally->ops) {
    auto it = ops_.find(id);
    if (it != ops_.end()) {
      o.name = it->second->name;
      o.kind = ir::OpKindText(it->second->kind);
    }
    r->ops.push_back(std::move(o));
  }
  for (auto& [kernel, sp] : tally->slow) r->slow_paths.push_back(sp);
}

// The options_.top_tiles busiest tiles, with their per-superstep tracks.
void Engine::ReportSlowestTiles(const CycleTally& tally, SimResult* r) const {
  const int steps = static_cast<int>(tally.step_compute.size());
  std::vector<int> order(tiles_);
  for (int t = 0; t < tiles_; ++t) order[t] = t;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return tally.tile_compute[a] + tally.tile_exchange[a] >
           tally.tile_compute[b] + tally.tile_exchange[b];
  });
  const int top = std::clamp(options_.top_tiles, 0, tiles_);
  for (int i = 0; i < top; ++i) {
    const int t = order[i];
    // Idle tiles say nothing about where the time goes.
    if (tally.tile_compute[t] + tally.tile_exchange[t] == 0) break;
    TileReport tr;
    tr.tile = t;
    tr.compute_cycles = tally.tile_compute[t];
    tr.exchange_cycles = tally.tile_exchange[t];
    tr.busy_cycles = tally.tile_compute[t] + tally.tile_exchange[t];
    tr.kernel_calls = tally.tile_calls[t];
    tr.memory_bytes = tile_extent_[t];
    for (int s = 0; s < steps; ++s) {
      tr.step_compute_cycles.push_back(tally.step_compute[s][t]);
      tr.step_exchange_cycles.push_back(tally.step_exchange[s][t]);
    }
    r->slowest_tiles.push_back(std::move(tr));
  }
}

void Engine::ReportCode(SimResult* r) const {
  int64_t most_code = -1;
  for (const fb::TileCode& c : program_->code) {
    const int64_t total =
        int64_t{c.runtime_bytes()} + c.program_bytes() + c.exchange_bytes();
    r->code_bytes_max = std::max(r->code_bytes_max, total);
    r->exchange_code_bytes_max =
        std::max<int64_t>(r->exchange_code_bytes_max, c.exchange_bytes());
    r->exchange_code_bytes.push_back(c.exchange_bytes());
    if (int64_t{c.reserved_bytes()} > most_code) {
      most_code = c.reserved_bytes();
      r->tensor_bytes = sram_bytes_ - most_code;
    }
  }
}

void Engine::ReportPeakMemory(SimResult* r) const {
  for (int t = 0; t < tiles_; ++t) {
    if (tile_extent_[t] > r->peak_memory_bytes) {
      r->peak_memory_bytes = tile_extent_[t];
      r->peak_memory_tile = t;
    }
  }
}

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
  constexpr int kUnplanned = -2;
  const int s = rs.superstep;
  if (planned_for_[s] != kUnplanned &&
      (!step_renamed_[s] || planned_for_[s] == rs.iteration)) {
    return Status::Ok();
  }
  active_renames_ = rs.repeat < 0 ? nullptr
                                  : &renames_[rs.repeat][rs.iteration];
  touched_renamed_ = false;
  Status st = CheckSuperstep(s);
  active_renames_ = nullptr;
  if (!st.ok()) {
    if (rs.repeat < 0) return st;
    return st.WithContext("repeat " + std::to_string(rs.repeat) +
                          " iteration " + std::to_string(rs.iteration));
  }
  step_renamed_[s] = step_renamed_[s] || touched_renamed_;
  planned_for_[s] = rs.iteration;
  return Status::Ok();
}

// DeviceProgram.code: one entry per tile, in order, each reserving whole
// standard elements for what it claims; the claims are checked against the
// program once every superstep is (CheckCodeSizes).
Status Engine::CheckCodeEntries() {
  if (program_->code.size() != static_cast<size_t>(tiles_)) {
    return Status::BadInput(
        "the program sizes the code of " +
        std::to_string(program_->code.size()) + " tiles, the target has " +
        std::to_string(tiles_) +
        (program_->code.empty()
             ? " (a program written before schema 3: re-run emit-device)"
             : ""));
  }
  for (int t = 0; t < tiles_; ++t) {
    const fb::TileCode& c = program_->code[t];
    const std::string where = "tile " + std::to_string(t) + " code: ";
    if (c.tile() != static_cast<uint32_t>(t)) {
      return Status::BadInput(where + "entry " + std::to_string(t) +
                              " names tile " + std::to_string(c.tile()));
    }
    if (int64_t{c.runtime_bytes()} != code_model_.runtime) {
      return Status::BadInput(where + "runtime of " +
                              std::to_string(c.runtime_bytes()) +
                              " bytes, the target's is " +
                              std::to_string(code_model_.runtime));
    }
    const int64_t total =
        int64_t{c.runtime_bytes()} + c.program_bytes() + c.exchange_bytes();
    if (int64_t{c.reserved_bytes()} != ir::CodeRegionBytes(*target_, total)) {
      return Status::BadInput(
          where + std::to_string(total) + " bytes of code need " +
          std::to_string(ir::CodeRegionBytes(*target_, total)) +
          " bytes of whole elements, the program reserves " +
          std::to_string(c.reserved_bytes()));
    }
    if (int64_t{c.reserved_bytes()} > standard_end_) {
      return Status::Infeasible(
          where + std::to_string(total) + " bytes of code (runtime " +
          std::to_string(c.runtime_bytes()) + ", program " +
          std::to_string(c.program_bytes()) + ", exchange tables " +
          std::to_string(c.exchange_bytes()) + ") do not fit in the " +
          std::to_string(standard_end_) + " bytes of standard memory");
    }
  }
  return Status::Ok();
}

// The program's own code and exchange tables per tile, by the target's byte
// model, must be what DeviceProgram.code claims.
Status Engine::CheckCodeSizes() {
  std::vector<int64_t> program(tiles_, 0), exchange(tiles_, 0);
  for (size_t s = 0; s < program_->supersteps.size(); ++s) {
    // Addresses as written: renames keep every piece's words.
    const kernels::PhaseTraffic traffic = kernels::TrafficOfStep(
        exchange_model_, *program_->supersteps[s],
        [&](uint32_t id) -> int64_t { return buffers_.at(id).buffer->offset; });
    kernels::AddSuperstepCode(code_model_, *program_->supersteps[s], traffic,
                              &program, &exchange);
  }
  for (int t = 0; t < tiles_; ++t) {
    const fb::TileCode& c = program_->code[t];
    if (int64_t{c.program_bytes()} != program[t] ||
        int64_t{c.exchange_bytes()} != exchange[t]) {
      return Status::BadInput(
          "tile " + std::to_string(t) + " code: the program claims " +
          std::to_string(c.program_bytes()) + " bytes of code and " +
          std::to_string(c.exchange_bytes()) +
          " of exchange tables; its supersteps need " +
          std::to_string(program[t]) + " and " + std::to_string(exchange[t]));
    }
  }
  return Status::Ok();
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
  planned_for_.assign(steps, -2);
  schedules_.assign(steps, {});
  for (const RunStep& rs : schedule_) TILEC_RETURN_IF_ERROR(PlanStep(rs));
  TILEC_RETURN_IF_ERROR(CheckCodeSizes());
  TILEC_RETURN_IF_ERROR(CheckIterationUpdates());
  return CheckBindings(/*outputs=*/true);
}

Status Engine::Run(const HostTensors& inputs, SimResult* result) {
  TILEC_RETURN_IF_ERROR(Check());
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
  if (options_.execute) TILEC_RETURN_IF_ERROR(AllocateAndWriteInputs(inputs));
  CycleTally tally(tiles_, static_cast<int>(schedule_.size()));
  int64_t clock = 0;
  for (size_t k = 0; k < schedule_.size(); ++k) {
    const RunStep& rs = schedule_[k];
    TILEC_RETURN_IF_ERROR(PlanStep(rs));
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

}  // namespace

Status Simulate(const fb::ModuleT& module, const HostTensors& inputs,
                const SimOptions& options, SimResult* result) {
  Engine engine(module, options);
  return engine.Run(inputs, result);
}

Status VerifyDeviceProgram(const fb::ModuleT& module) {
  SimOptions options;
  options.execute = false;
  Engine engine(module, options);
  return engine.Check();
}

// ---------------------------------------------------------------- checking

Tolerance DefaultTolerance(bool graph_has_fp8) {
  // See docs/device-program.md, "Comparing with the reference".
  if (graph_has_fp8) return Tolerance{0.1, 0.1, 0.99};
  return Tolerance{2e-2, 1e-2, 0.9999};
}

bool ModuleHasFp8(const fb::ModuleT& module) {
  for (const auto& v : module.values) {
    if (v && ir::IsFp8(v->dtype)) return true;
  }
  for (const auto& op : module.ops) {
    if (!op) continue;
    for (const auto& step : op->body) {
      if (step && step->kind == fb::FusedStepKind::Cast &&
          ir::IsFp8(step->dtype)) {
        return true;
      }
    }
  }
  if (module.program) {
    for (const auto& b : module.program->buffers) {
      if (b && ir::IsFp8(b->dtype)) return true;
    }
  }
  return false;
}

Comparison CompareTensors(std::span<const float> sim,
                          std::span<const float> ref, const Tolerance& tol) {
  Comparison c;
  c.elements = static_cast<int64_t>(ref.size());
  if (sim.size() != ref.size()) {
    c.pass = false;
    c.mismatches = static_cast<int64_t>(std::max(sim.size(), ref.size()));
    return c;
  }
  double scale = 0;
  for (float r : ref) {
    if (std::isfinite(r)) scale = std::max(scale, std::fabs(double{r}));
  }
  c.scale = scale;
  const double floor = std::max(kRelativeFloor * scale, 1e-30);
  double dot = 0, ss = 0, rr = 0;
  bool worst_nonfinite = false;
  int64_t disagreeing_nonfinite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double s = sim[i], r = ref[i];
    if (!std::isfinite(s) || !std::isfinite(r)) {
      // Identical non-finite values (the same infinity, or NaN for NaN)
      // agree but still fail (below) unless tol.allow_nonfinite: an output
      // that is not a number is no pass because the reference holds the
      // same. Anything else is a mismatch that no tolerance excuses.
      ++c.nonfinite;
      if ((std::isnan(s) && std::isnan(r)) || s == r) continue;
      ++disagreeing_nonfinite;
      ++c.mismatches;
      if (!worst_nonfinite) {
        worst_nonfinite = true;
        c.worst_index = static_cast<int64_t>(i);
        c.worst_sim = sim[i];
        c.worst_ref = ref[i];
      }
      continue;
    }
    const double err = std::fabs(s - r);
    if (!worst_nonfinite && (c.worst_index < 0 || err > c.max_abs_err)) {
      c.worst_index = static_cast<int64_t>(i);
      c.worst_sim = sim[i];
      c.worst_ref = ref[i];
    }
    c.max_abs_err = std::max(c.max_abs_err, err);
    c.max_rel_err = std::max(c.max_rel_err, err / std::max(std::fabs(r), floor));
    if (err > tol.atol * scale + tol.rtol * std::fabs(r)) ++c.mismatches;
    dot += s * r;
    ss += s * s;
    rr += r * r;
  }
  if (worst_nonfinite) {
    c.max_abs_err = INFINITY;
    c.max_rel_err = INFINITY;
  }
  const int64_t failing_nonfinite =
      tol.allow_nonfinite ? disagreeing_nonfinite : c.nonfinite;
  if (failing_nonfinite == c.elements && c.elements > 0) {
    c.cosine = 0;  // nothing finite on both sides agrees
  } else if (ss == 0 && rr == 0) {
    c.cosine = 1;
  } else if (ss == 0 || rr == 0) {
    c.cosine = 0;
  } else {
    c.cosine = dot / (std::sqrt(ss) * std::sqrt(rr));
  }
  c.pass = c.mismatches == 0 && (c.nonfinite == 0 || tol.allow_nonfinite) &&
           c.cosine >= tol.min_cosine;
  return c;
}

}  // namespace tilec::sim
