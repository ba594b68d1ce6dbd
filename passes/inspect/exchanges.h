// inspect-exchanges: every exchange of a device program (or of a planned
// graph, before emit-device, from the lowering of its ownership transfers),
// per superstep and op: source and destination tiles, bytes, dtype and
// fragments; totals; the tiles that send and receive the most; and an SVG
// heat map of the tiles' traffic for one superstep or the whole program.

#ifndef TILEC_PASSES_INSPECT_EXCHANGES_H_
#define TILEC_PASSES_INSPECT_EXCHANGES_H_

#include <cstdint>
#include <string>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::inspect {

enum class TransferListing {
  kAuto,  // every transfer when there are at most `auto_limit`, else none
  kAll,
  kNone,
};

enum class HeatMetric { kTotal, kSent, kReceived };

struct InspectOptions {
  int64_t op = -1;         // only this op's transfers (-1: all)
  int64_t superstep = -1;  // only this superstep (-1: all); in a planned
                           // graph, the phase index of the op lowering
  TransferListing listing = TransferListing::kAuto;
  int64_t auto_limit = 2000;
  int top = 8;             // busiest senders and receivers listed
  HeatMetric metric = HeatMetric::kTotal;
};

// The text report and, if `svg` is not null, the heat map (an SVG
// document) of the selected transfers.
Status InspectExchanges(const fb::ModuleT& module, const InspectOptions& options,
                        std::string* report, std::string* svg);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_EXCHANGES_H_
