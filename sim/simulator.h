// The device simulator: executes a module's device program tile by tile on
// per-tile byte arrays, checks every access and every memory rule of the
// target, and counts cycles with the target's formulas (docs/machine.md,
// "Costs of a program"). It is tilec's analogue of Poplar's IPU Model:
// without a chip, this is how a compiled program is proven correct and
// timed.
//
// The contract between emit-device and this engine (what a buffer, a
// compute, a transfer and a host binding mean, which programs are rejected,
// and how cycles are counted and attributed to ops) is docs/device-program.md.
// In short:
//   - A buffer is a byte range [offset, offset + bytes) of one tile's tensor
//     memory [0, sram_bytes - reserved_bytes). Buffers may alias.
//   - A superstep runs its compute set (per tile in listed order, tiles
//     independent), then, if it has transfers, one exchange phase whose
//     sources are all read as of the end of the compute phase.
//   - A transfer moves `rows` pieces of `bytes` (src_pitch and dst_pitch
//     apart) to every destination; each piece is checked and costs exactly
//     what a transfer of its own would (a fragment at each end).
//   - The host writes inputs before superstep 0 and reads outputs after the
//     last superstep, through row-major boxes (fragments) of each value.
//   - Every violation is an error Status (kBadInput) with a one-line message
//     naming the superstep, tile, buffer and op; nothing is ever written
//     outside a buffer.
//
// Memory starts filled with 0xFF bytes, which is NaN in every dtype, so a
// kernel that reads bytes nobody wrote shows up as NaN in the outputs
// instead of as a plausible zero.

#ifndef TILEC_SIM_SIMULATOR_H_
#define TILEC_SIM_SIMULATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::sim {

struct SimOptions {
  // Host threads for the compute phase; tiles are independent, so results
  // do not depend on this number.
  int threads = 2;
  // false: check the program and count cycles without touching data (no
  // host tensors needed, outputs empty). Kernel operand sizes are checked
  // by the kernels themselves, so only an executing run checks them.
  bool execute = true;
  // How many tiles SimResult::slowest_tiles lists.
  int top_tiles = 8;
  // Makes the host data of an input binding the run's inputs lack (e.g.
  // simulate-device: the value's init or sidecar), when the run writes it
  // into tile memory; empty: such a binding is an error.
  std::function<Status(const fb::ValueT& value, std::vector<float>* data)>
      host_data;
};

// Host-side contents of inputs and weights by value id: the value's
// elements in row-major order as F32 (encoded into each buffer's dtype and
// scale when written).
using HostTensors = std::map<uint32_t, std::vector<float>>;

// One superstep's costs.
struct SuperstepReport {
  int index = 0;      // the program's superstep
  int iteration = -1;  // of the repeat it runs in; -1 outside repeats
  std::string label;
  int64_t compute_cycles = 0;   // slowest tile's kernel cycles
  // The exchange phase (0 without transfers): what is charged is its
  // verified schedule's length plus the sync residual; the endpoint bound
  // (without sync) is kept beside it.
  int64_t exchange_cycles = 0;
  int64_t exchange_bound_cycles = 0;
  int64_t exchange_scheduled_cycles = 0;
  int64_t sync_cycles = 0;
  // Before a repeat's iteration after the first: the slowest tile's address
  // update (base register writes or patches), charged before the superstep.
  int64_t update_cycles = 0;
  int update_tile = -1;
  int slowest_tile = -1;        // of the compute phase; -1 without compute
  int exchange_slowest_tile = -1;  // tile whose part of the phase ends last
  int64_t kernel_calls = 0;
  int64_t transfers = 0;
  int64_t pieces = 0;          // of the transfers (rows); = fragments sent
  int64_t bytes_sent = 0;      // each transfer once
  int64_t bytes_received = 0;  // each destination once (multicast counted
                               // at every receiver)
  int64_t start_cycle = 0;     // program cycle at which the superstep starts
  // The slowest tile's computes in listed order, adjacent calls of one op
  // and kernel merged: what the trace draws for the compute phase.
  struct Span {
    uint32_t op = 0;
    std::string kernel;
    int64_t cycles = 0;
    int64_t calls = 0;
  };
  std::vector<Span> compute_spans;
  // The exchange phase's cycles attributed to ops (by op id).
  std::vector<std::pair<uint32_t, int64_t>> exchange_split;
};

// One op's share of the program (op ids are those of the module's graph).
struct OpReport {
  uint32_t op = 0;
  std::string name;  // from the module's graph; "" when the op is not in it
  std::string kind;  // e.g. "mat_mul"; "" when the op is not in the graph
  int64_t compute_cycles = 0;   // attributed (see docs/device-program.md)
  int64_t exchange_cycles = 0;  // attributed
  int64_t update_cycles = 0;    // a repeat's address updates, attributed
  int64_t kernel_calls = 0;     // on all tiles
  int64_t transfers = 0;
  int64_t pieces = 0;  // contiguous pieces of its transfers (rows)
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;  // the "bytes exchanged" of the op
  int64_t macs = 0;            // GEMM multiply-accumulates, all tiles
  int64_t slow_path_calls = 0;
};

// A tile's busy time: its own kernel cycles plus, in every exchange phase,
// where its part of the schedule ends (without the sync cost).
struct TileReport {
  int tile = 0;
  int64_t busy_cycles = 0;
  int64_t compute_cycles = 0;
  int64_t exchange_cycles = 0;
  int64_t kernel_calls = 0;
  int64_t memory_bytes = 0;  // highest buffer end on the tile
  // Per superstep (indexed like SimResult::supersteps), for the trace.
  std::vector<int64_t> step_compute_cycles;
  std::vector<int64_t> step_exchange_cycles;
};

// Binary elementwise calls whose two inputs share a memory element.
struct SlowPathReport {
  std::string kernel;
  int64_t calls = 0;
  int64_t extra_cycles = 0;  // slow-path cycles minus fast-path cycles
};

struct SimResult {
  std::string target;
  int tiles = 0;
  double clock_hz = 0;
  // Sum over supersteps (as run) of update + compute + exchange.
  int64_t total_cycles = 0;
  int64_t compute_cycles = 0;
  int64_t exchange_cycles = 0;  // scheduled + sync, every phase
  int64_t exchange_bound_cycles = 0;
  int64_t exchange_scheduled_cycles = 0;
  int64_t sync_cycles = 0;
  int64_t update_cycles = 0;
  int exchange_phases = 0;
  double seconds = 0;  // total_cycles / clock_hz
  int64_t kernel_calls = 0;
  int64_t transfers = 0;
  // Contiguous pieces of the transfers: a strided transfer has `rows`, and
  // costs as many separate transfers would (a fragment at each end).
  int64_t pieces = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t gemm_macs = 0;
  int64_t slow_path_calls = 0;
  int peak_memory_tile = -1;  // tile with the highest buffer end
  int64_t peak_memory_bytes = 0;
  // Code in tile memory (DeviceProgram.code): the largest total and the
  // largest exchange tables of any tile, each tile's exchange tables, and
  // the tensor memory the tile with the most code has left.
  int64_t code_bytes_max = 0;
  int64_t exchange_code_bytes_max = 0;
  std::vector<int64_t> exchange_code_bytes;  // per tile
  int64_t tensor_bytes = 0;
  std::vector<SuperstepReport> supersteps;
  std::vector<OpReport> ops;                  // by op id
  // At most top_tiles busy tiles, by busy cycles descending (ties: lower
  // tile first); idle tiles are left out.
  std::vector<TileReport> slowest_tiles;
  std::vector<SlowPathReport> slow_paths;     // by kernel name
  // Every output binding's value, row-major F32 (decoded from its buffers).
  std::map<uint32_t, std::vector<float>> outputs;
  // Per DeviceProgram.repeats entry: the cycles of each iteration.
  struct RepeatReport {
    int first = 0;  // supersteps [first, first + count)
    int count = 0;
    std::vector<int64_t> iteration_cycles;
  };
  std::vector<RepeatReport> repeats;
};

// Runs module.program on module.target. `inputs` must hold every value that
// program.inputs binds (unused when !options.execute). Errors: kBadInput for
// a malformed program (message names superstep, tile, buffer and op),
// kInternal for a bug.
Status Simulate(const fb::ModuleT& module, const HostTensors& inputs,
                const SimOptions& options, SimResult* result);

namespace engine {
class Engine;
}

// Simulate in two steps, the checks done once: Verify (VerifyDeviceProgram's
// checks, before the caller allocates anything for the program, e.g. the
// reference's run) and Run, which reuses them. `module` must outlive it.
class Simulator {
 public:
  Simulator(const fb::ModuleT& module, const SimOptions& options);
  ~Simulator();
  Status Verify();
  // Verifies first unless Verify succeeded.
  Status Run(const HostTensors& inputs, SimResult* result);
  // The same, freeing the host's data once it is in tile memory: a whole
  // model's F32 weights need not live beside every tile's memory.
  Status Run(HostTensors&& inputs, SimResult* result);

 private:
  std::unique_ptr<engine::Engine> engine_;
};

// The device-program verifier: the checks Simulate runs before it touches
// any data (the target, every buffer, binding, compute and transfer,
// docs/device-program.md), alone. Every reader of a device program runs it
// (simulate-device through Simulator::Verify, inspect-exchanges,
// inspect-program, inspect-gemms), so a program one accepts the others
// accept too. Bounded memory: nothing is allocated per transfer row or per
// byte of a claimed size that the target cannot hold.
Status VerifyDeviceProgram(const fb::ModuleT& module);

// ---------------------------------------------------------------- checking
// Simulated outputs against the reference (docs/device-program.md,
// "Comparing with the reference").

struct Tolerance {
  double atol = 0;        // relative to the output's scale (max |ref|)
  double rtol = 0;        // of each element's |ref|
  double min_cosine = 0;  // cosine similarity of the whole output
  // Non-finite elements equal to the reference's pass (tests whose expected
  // outputs are non-finite, e.g. ONNX casts of NaN); else they never do.
  bool allow_nonfinite = false;
};

// The defaults: tight when every value is F16/F32/BF16, looser when the
// graph has an FP8 value (one FP8 step is 1/8 to 1/16 of a value).
Tolerance DefaultTolerance(bool graph_has_fp8);
// True when a value of the graph (or a buffer of its program) is FP8.
bool ModuleHasFp8(const fb::ModuleT& module);

struct Comparison {
  int64_t elements = 0;
  double scale = 0;        // max |ref| over finite elements
  double max_abs_err = 0;  // max |sim - ref|
  // max |sim - ref| / max(|ref|, kRelativeFloor * scale).
  double max_rel_err = 0;
  // Over elements finite on both sides; 1 when both are all zero, 0 when
  // none is finite on both.
  double cosine = 1;
  int64_t mismatches = 0;  // elements with err > atol*scale + rtol*|ref|
  int64_t nonfinite = 0;   // NaN/inf in sim or ref (see allow_nonfinite)
  int64_t worst_index = -1;  // element with the largest |sim - ref|
  float worst_sim = 0;
  float worst_ref = 0;
  bool pass = true;
};

// Elements much smaller than the output's scale are measured against this
// fraction of the scale, so that values near zero do not make the relative
// error meaningless.
inline constexpr double kRelativeFloor = 1e-3;

Comparison CompareTensors(std::span<const float> sim,
                          std::span<const float> ref, const Tolerance& tol);

}  // namespace tilec::sim

#endif  // TILEC_SIM_SIMULATOR_H_
