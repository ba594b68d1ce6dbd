#include "passes/inspect/exchange_totals.h"

#include <algorithm>
#include <set>

namespace tilec::inspect {
namespace {

TileTraffic ZeroTraffic(int tiles) {
  TileTraffic t;
  t.sent.assign(tiles, 0);
  t.received.assign(tiles, 0);
  t.fragments.assign(tiles, 0);
  return t;
}

void AddTraffic(const TileTraffic& from, TileTraffic* to) {
  for (size_t t = 0; t < from.sent.size(); ++t) {
    to->sent[t] += from.sent[t];
    to->received[t] += from.received[t];
    to->fragments[t] += from.fragments[t];
  }
}

TransferInfo InfoOf(const fb::TransferT& t, int step, int index) {
  TransferInfo info;
  info.step = step;
  info.index = index;
  info.op = t.op;
  info.src_tile = static_cast<int>(t.src_tile);
  info.src_buffer = t.src_buffer;
  info.bytes = t.bytes;
  info.rows = t.rows;
  info.dtype = t.dtype;
  for (const auto& d : t.destinations) {
    info.destinations.push_back(static_cast<int>(d->tile));
  }
  return info;
}

// The `largest` biggest of `indices` (transfers of one op in `step`).
std::vector<TransferInfo> Largest(const fb::SuperstepT& step, int s,
                                  std::vector<int> indices, int largest) {
  auto bytes = [&](int i) {
    const fb::TransferT& t = *step.exchange[i];
    return static_cast<int64_t>(t.rows) * t.bytes;
  };
  const size_t keep = std::min<size_t>(indices.size(), std::max(largest, 0));
  std::partial_sort(indices.begin(), indices.begin() + keep, indices.end(),
                    [&](int a, int b) {
                      return bytes(a) != bytes(b) ? bytes(a) > bytes(b) : a < b;
                    });
  std::vector<TransferInfo> out;
  for (size_t i = 0; i < keep; ++i) {
    out.push_back(InfoOf(*step.exchange[indices[i]], s, indices[i]));
  }
  return out;
}

StepExchange StepTotals(const fb::SuperstepT& step, int s, int tiles,
                        int largest,
                        std::map<uint32_t, std::vector<int64_t>>* by_op) {
  StepExchange x;
  x.tiles = ZeroTraffic(tiles);
  struct Accumulator {
    OpExchange totals;
    std::set<int> sources, destinations;
    std::set<fb::DType> dtypes;
    std::vector<int> indices;
  };
  std::map<uint32_t, Accumulator> ops;
  for (size_t i = 0; i < step.exchange.size(); ++i) {
    const fb::TransferT& t = *step.exchange[i];
    const int64_t bytes = static_cast<int64_t>(t.rows) * t.bytes;
    const int64_t dests = static_cast<int64_t>(t.destinations.size());
    x.tiles.sent[t.src_tile] += bytes;
    x.tiles.fragments[t.src_tile] += t.rows;
    std::vector<int64_t>& op_received = (*by_op)[t.op];
    op_received.resize(tiles, 0);
    Accumulator& a = ops[t.op];
    for (const auto& d : t.destinations) {
      x.tiles.received[d->tile] += bytes;
      x.tiles.fragments[d->tile] += t.rows;
      op_received[d->tile] += bytes;
      a.destinations.insert(static_cast<int>(d->tile));
    }
    a.sources.insert(static_cast<int>(t.src_tile));
    a.dtypes.insert(t.dtype);
    a.indices.push_back(static_cast<int>(i));
    OpExchange& o = a.totals;
    ++o.transfers;
    o.pieces += t.rows;
    o.bytes_sent += bytes;
    o.bytes_received += bytes * dests;
    o.fragments += static_cast<int64_t>(t.rows) * (1 + dests);
  }
  for (auto& [op, a] : ops) {
    OpExchange o = a.totals;
    o.op = op;
    o.source_tiles = static_cast<int>(a.sources.size());
    o.destination_tiles = static_cast<int>(a.destinations.size());
    o.dtypes.assign(a.dtypes.begin(), a.dtypes.end());
    o.largest = Largest(step, s, std::move(a.indices), largest);
    x.transfers += o.transfers;
    x.pieces += o.pieces;
    x.bytes_sent += o.bytes_sent;
    x.bytes_received += o.bytes_received;
    x.fragments += o.fragments;
    x.ops.push_back(std::move(o));
  }
  return x;
}

}  // namespace

StatusOr<ExchangeTotals> ExchangesByStep(const fb::ModuleT& module,
                                         int largest) {
  StatusOr<VerifiedProgram> program = VerifiedProgram::Verify(module);
  if (!program.ok()) return program.status();
  return ExchangesByStep(*program, largest);
}

ExchangeTotals ExchangesByStep(const VerifiedProgram& program, int largest) {
  const fb::ModuleT& module = program.module();
  const int tiles = module.target->tiles;
  ExchangeTotals totals;
  totals.program = ZeroTraffic(tiles);
  const auto& steps = module.program->supersteps;
  for (size_t s = 0; s < steps.size(); ++s) {
    const fb::SuperstepT& step = *steps[s];
    totals.steps.push_back(StepTotals(step, static_cast<int>(s), tiles, largest,
                                      &totals.received_by_op));
    AddTraffic(totals.steps.back().tiles, &totals.program);
  }
  return totals;
}

}  // namespace tilec::inspect
