// The lowering's own program form: what an op becomes on the tiles before
// supersteps and addresses exist. Buffers are virtual (an id, a tile, a
// size, a dtype and placement constraints); an op is a short sequence of
// phases, each either a compute phase (kernel calls on tiles) or an exchange
// phase (transfers between tiles). emit-device schedules the phases into
// supersteps and gives every virtual buffer an address; expand-reduce prices
// alternative lowerings of one op with PhaseCycles before choosing.

#ifndef TILEC_PASSES_LOWER_PROGRAM_H_
#define TILEC_PASSES_LOWER_PROGRAM_H_

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"

namespace tilec::lower {

// Why a buffer exists; printed in buffer names and memory reports.
enum class BufferKind {
  kValue,      // holds (part of) a graph value
  kStage,      // a GEMM's staged left-operand chunk or panel
  kPartial,    // a GEMM's F32 partial sums / accumulator
  kInitial,    // a reduction's seed partial, copied to be contiguous
  kRemote,     // a reduction's remote partials
  kResult,     // a reduction's result before its copy to the output
  kTemp,       // an intermediate of a fused body
};
const char* BufferKindName(BufferKind kind);

struct VBuffer {
  int id = 0;
  int tile = 0;
  int64_t bytes = 0;
  fb::DType dtype = fb::DType::F32;
  int scale_exp = 0;
  int64_t value = -1;  // value id, -1 for scratch
  uint32_t op = 0;     // op that allocated it (producer, or the consumer
                       // for graph inputs and weights)
  BufferKind kind = BufferKind::kValue;
  std::string name;
  bool interleaved = false;  // must lie in interleaved memory
  bool resident = false;     // weights: live for the whole program
  bool host_written = false;  // written by the host before superstep 0
  bool host_read = false;     // read by the host after the last superstep
};

// `bytes` bytes at `offset` bytes into a virtual buffer.
struct VSlice {
  int buffer = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
};

struct VCall {
  int tile = 0;
  std::string kernel;
  std::vector<VSlice> args;
  std::vector<int64_t> params;
  std::vector<float> fparams;
  uint32_t op = 0;
};

struct VDestination {
  int tile = 0;
  int buffer = 0;
  int64_t offset = 0;  // bytes
};

// `rows` pieces of src.bytes each (a strided transfer when rows > 1): piece
// i at src.offset + i * src_pitch, written at every destination's offset +
// i * dst_pitch. Each piece costs what a transfer of its own would
// (transfers.h).
struct VTransfer {
  int src_tile = 0;
  VSlice src;  // piece 0
  fb::DType dtype = fb::DType::F32;
  std::vector<VDestination> destinations;  // piece 0's place at each
  uint32_t op = 0;
  int64_t rows = 1;
  int64_t src_pitch = 0;  // 0 when rows == 1
  int64_t dst_pitch = 0;
  // Every piece's bytes: what the sender sends and each receiver receives.
  int64_t Bytes() const { return rows * src.bytes; }
};

struct Phase {
  enum class Kind { kCompute, kExchange };
  Kind kind = Kind::kCompute;
  std::string label;  // e.g. "stage A chunk 2", "reduce"
  std::vector<VCall> calls;
  std::vector<VTransfer> transfers;
  // Exchange: each piece goes to each destination in a transfer of its own
  // (a Redistribute with a unicast recipe), never merged into a multicast.
  bool unicast = false;
  bool Empty() const { return calls.empty() && transfers.empty(); }
};

// What one graph op became.
struct OpProgram {
  uint32_t op = 0;
  std::vector<Phase> phases;
  std::vector<uint32_t> reads;   // value ids read
  std::vector<uint32_t> writes;  // value ids written (results)
};

// Two buffers that must not share a memory element (hard: the GEMM rule) or
// should not (soft: binary elementwise inputs, else the slow path).
struct ElementRule {
  int a = 0;
  int b = 0;
  bool hard = false;
  uint32_t op = 0;
};

// ---------------------------------------------------------------- costs

// Cycles of one call (fast path); an error for a malformed call.
StatusOr<int64_t> CallCycles(const kernels::CostModel& model,
                             const std::vector<VBuffer>& buffers,
                             const VCall& call);

struct PhaseCost {
  // compute: the slowest tile; exchange: its schedule's length plus sync
  // (CostOfExchange).
  int64_t cycles = 0;
  int64_t bound = 0;  // exchange: the endpoint bound, without sync
  int slowest_tile = -1;
  int64_t bytes_received = 0;  // exchange: over all receivers
  int64_t transfers = 0;
  int64_t calls = 0;
  // exchange: each packet's start in its schedule (ExchangeCost::starts).
  std::vector<uint32_t> starts;
};

class ExchangePrices;

// A phase on its own superstep, as the simulator counts it; an exchange
// priced through `prices` where given.
StatusOr<PhaseCost> CostOfPhase(const kernels::CostModel& model,
                                const std::vector<VBuffer>& buffers,
                                const Phase& phase, int tiles,
                                ExchangePrices* prices = nullptr);

// An exchange phase of `transfers` as the chip runs it
// (kernels/exchange_schedule.h): the length of the schedule emit-device
// writes for it plus the target's sync residual. The one price of an
// exchange phase for expand-reduce, fuse-residual and emit-device.
struct ExchangeCost {
  int64_t cycles = 0;     // scheduled + sync; 0 without transfers
  int64_t scheduled = 0;
  int64_t bound = 0;      // the endpoint bound, without sync
  int last_tile = -1;     // whose part of the phase ends last
  // Each packet's start in the schedule: kernels::ScheduleFromStarts makes
  // the schedule again from them, for the same transfers wherever their
  // buffers lie on word boundaries (TrafficOf).
  std::vector<uint32_t> starts;
};
ExchangeCost CostOfExchange(const kernels::CostModel& model,
                            std::span<const VTransfer* const> transfers);

// The starts of two phases' packets run back to back in one phase: the
// first's, then the second's shifted past the first's `first_length`.
std::vector<uint32_t> BackToBackStarts(std::span<const uint32_t> first_starts,
                                       int64_t first_length,
                                       std::span<const uint32_t> second_starts);

// A phase of `transfers` that merges two: its first `first_starts.size()`
// packets had a schedule of `first_length` cycles starting them at
// `first_starts`, the rest one starting them at `second_starts`. The two
// back to back (the second shifted past the first) are a schedule of the
// merged phase, so a merged exchange never needs to cost more than its
// parts one after the other; the scheduler's schedule of the merged
// traffic where that is shorter (it stops an order as soon as the order
// cannot be).
ExchangeCost CostOfMergedExchange(const kernels::CostModel& model,
                                  std::span<const VTransfer* const> transfers,
                                  std::span<const uint32_t> first_starts,
                                  int64_t first_length,
                                  std::span<const uint32_t> second_starts);

// CostOfExchange for a caller that prices the same traffic more than once
// (emit-device's ways of lowering one op share most of their phases): each
// distinct traffic is scheduled once while this lives.
class ExchangePrices {
 public:
  ExchangeCost Cost(const kernels::CostModel& model,
                    std::span<const VTransfer* const> transfers);

 private:
  std::vector<std::pair<kernels::PhaseTraffic, ExchangeCost>> made_;
};

// The phase's traffic: transfer i of `transfers` is the schedule's
// transfer i. `buffer_offsets` (by virtual buffer) places the buffers;
// empty: at 0 (buffers are word aligned, so the words a piece spans are
// the same wherever they are placed).
kernels::PhaseTraffic TrafficOf(const kernels::CostModel& model,
                                std::span<const VTransfer* const> transfers,
                                std::span<const int64_t> buffer_offsets = {});

struct ProgramCost {
  int64_t cycles = 0;
  int64_t compute_cycles = 0;
  int64_t exchange_cycles = 0;
  int64_t exchange_phases = 0;
  int64_t bytes_received = 0;
  int64_t calls = 0;
  int64_t transfers = 0;
};

// Every phase on its own superstep (the planner's model: ops do not share
// supersteps).
StatusOr<ProgramCost> CostOfOp(const kernels::CostModel& model,
                               const std::vector<VBuffer>& buffers,
                               const OpProgram& program, int tiles);

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_PROGRAM_H_
