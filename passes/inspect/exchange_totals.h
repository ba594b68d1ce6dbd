// The exchanges of a device program by superstep, by op and by tile: what
// the report page's exchange section shows. Bytes and fragments are counted
// as the simulator counts them (docs/device-program.md): a transfer of
// `rows` pieces of `bytes` sends rows * bytes once from its source and each
// destination receives rows * bytes; every piece is one fragment at the
// sender and one at each destination.

#ifndef TILEC_PASSES_INSPECT_EXCHANGE_TOTALS_H_
#define TILEC_PASSES_INSPECT_EXCHANGE_TOTALS_H_

#include <cstdint>
#include <map>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/inspect/device_module.h"

namespace tilec::inspect {

struct TransferInfo {
  int step = 0;
  int index = 0;  // in the superstep's exchange
  uint32_t op = 0;
  int src_tile = 0;
  uint32_t src_buffer = 0;
  int64_t bytes = 0;  // of each piece
  int64_t rows = 1;
  fb::DType dtype = fb::DType::F32;
  std::vector<int> destinations;  // tiles, in the transfer's order
  // What the source sends and each destination receives.
  int64_t Bytes() const { return rows * bytes; }
};

// One op's transfers in one superstep.
struct OpExchange {
  uint32_t op = 0;
  int64_t transfers = 0;
  int64_t pieces = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;  // over every destination
  int64_t fragments = 0;       // at both ends
  int source_tiles = 0;
  int destination_tiles = 0;
  std::vector<fb::DType> dtypes;  // distinct, in enum order
  // At most `largest` transfers, by Bytes() descending (ties: program
  // order).
  std::vector<TransferInfo> largest;
};

// Per tile (indexed by tile number).
struct TileTraffic {
  std::vector<int64_t> sent;
  std::vector<int64_t> received;
  std::vector<int64_t> fragments;
};

struct StepExchange {
  TileTraffic tiles;            // zeros when the superstep has no transfers
  std::vector<OpExchange> ops;  // by op id
  int64_t transfers = 0;
  int64_t pieces = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t fragments = 0;
};

struct ExchangeTotals {
  std::vector<StepExchange> steps;  // one per superstep
  TileTraffic program;              // summed over every superstep
  // Bytes each tile receives for each op over the whole program.
  std::map<uint32_t, std::vector<int64_t>> received_by_op;
};

// Errors (kBadInput): no program or target, a transfer naming a tile
// outside the target.
StatusOr<ExchangeTotals> ExchangesByStep(const fb::ModuleT& module,
                                         int largest);
// The same of a program already verified.
ExchangeTotals ExchangesByStep(const VerifiedProgram& program, int largest);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_EXCHANGE_TOTALS_H_
