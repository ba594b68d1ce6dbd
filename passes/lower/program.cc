#include "passes/lower/program.h"

#include <algorithm>
#include <map>

#include "kernels/kernels.h"
#include "kernels/registry.h"

namespace tilec::lower {

const char* BufferKindName(BufferKind kind) {
  switch (kind) {
    case BufferKind::kValue:
      return "value";
    case BufferKind::kStage:
      return "stage";
    case BufferKind::kPartial:
      return "partial";
    case BufferKind::kInitial:
      return "initial";
    case BufferKind::kRemote:
      return "remote";
    case BufferKind::kResult:
      return "result";
    case BufferKind::kTemp:
      return "temp";
  }
  return "?";
}

StatusOr<int64_t> CallCycles(const kernels::CostModel& model,
                             const std::vector<VBuffer>& buffers,
                             const VCall& call) {
  std::vector<kernels::Operand> operands;
  operands.reserve(call.args.size());
  for (const VSlice& s : call.args) {
    const VBuffer& b = buffers[s.buffer];
    StatusOr<kernels::DType> dtype = kernels::DTypeFromFb(b.dtype);
    if (!dtype.ok()) return dtype.status();
    operands.push_back(kernels::Operand{nullptr, static_cast<size_t>(s.bytes),
                                        *dtype, b.scale_exp});
  }
  return kernels::Cycles(model, call.kernel, operands, call.params,
                         call.fparams);
}

StatusOr<PhaseCost> CostOfPhase(const kernels::CostModel& model,
                                const std::vector<VBuffer>& buffers,
                                const Phase& phase, int tiles) {
  PhaseCost cost;
  if (phase.kind == Phase::Kind::kCompute) {
    std::vector<int64_t> per_tile(tiles, 0);
    for (const VCall& c : phase.calls) {
      StatusOr<int64_t> cycles = CallCycles(model, buffers, c);
      if (!cycles.ok()) {
        return Status::Internal("op " + std::to_string(c.op) + " tile " +
                                std::to_string(c.tile) + " " + c.kernel +
                                ": " + cycles.status().message());
      }
      per_tile[c.tile] += *cycles;
      ++cost.calls;
    }
    for (int t = 0; t < tiles; ++t) {
      if (per_tile[t] > cost.cycles) {
        cost.cycles = per_tile[t];
        cost.slowest_tile = t;
      }
    }
    return cost;
  }
  if (phase.transfers.empty()) return cost;
  std::vector<int64_t> sent(tiles, 0), received(tiles, 0), fragments(tiles, 0);
  for (const VTransfer& t : phase.transfers) {
    // Each piece is a fragment at both ends.
    sent[t.src_tile] += t.Bytes();
    fragments[t.src_tile] += t.rows;
    for (const VDestination& d : t.destinations) {
      received[d.tile] += t.Bytes();
      fragments[d.tile] += t.rows;
      cost.bytes_received += t.Bytes();
    }
    ++cost.transfers;
  }
  int64_t slowest = 0;
  for (int t = 0; t < tiles; ++t) {
    if (fragments[t] == 0) continue;
    const int64_t c =
        model.TileExchangeCycles(sent[t], received[t], fragments[t]);
    if (c > slowest || cost.slowest_tile < 0) {
      slowest = c;
      cost.slowest_tile = t;
    }
  }
  cost.cycles = model.sync_cycles() + slowest;
  return cost;
}

StatusOr<ProgramCost> CostOfOp(const kernels::CostModel& model,
                               const std::vector<VBuffer>& buffers,
                               const OpProgram& program, int tiles) {
  ProgramCost total;
  for (const Phase& p : program.phases) {
    StatusOr<PhaseCost> c = CostOfPhase(model, buffers, p, tiles);
    if (!c.ok()) return c.status();
    total.cycles += c->cycles;
    total.calls += c->calls;
    total.transfers += c->transfers;
    total.bytes_received += c->bytes_received;
    if (p.kind == Phase::Kind::kCompute) {
      total.compute_cycles += c->cycles;
    } else if (!p.transfers.empty()) {
      total.exchange_cycles += c->cycles;
      ++total.exchange_phases;
    }
  }
  return total;
}

}  // namespace tilec::lower
