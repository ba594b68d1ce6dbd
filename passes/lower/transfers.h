// Transfer emission: the runs that move a box of a value from one tile to
// another (layout.h, MoveRuns) become strided transfers (program.h,
// VTransfer: `rows` pieces, the pitches apart), merged into multicasts.
//
// The contract, which keeps every cycle count of the one-transfer-per-run
// lowering: in one exchange phase, every source piece — (tile, buffer, byte
// offset, bytes) — travels in exactly one transfer, whose destinations are
// every place that asked for that piece. Since the exchange model and the
// simulator count a piece of a strided transfer exactly as a transfer of its
// own (a fragment at each end, its bytes), how pieces are grouped into
// strided transfers changes the size of a program, never its cycles.
//
// Grouping happens twice: a move's runs of equal length that advance by
// constant pitches become one strided run (GroupRuns), and when an op's
// lowering is done, neighbouring transfers that continue each other's
// strides are joined (CompactTransfers). Two moves that ask for overlapping
// but differently grouped pieces of one source (rare: different
// destination layouts of one box) are merged piece by piece, so the
// contract holds whatever the grouping.

#ifndef TILEC_PASSES_LOWER_TRANSFERS_H_
#define TILEC_PASSES_LOWER_TRANSFERS_H_

#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "formats/tilec_generated.h"
#include "passes/lower/layout.h"
#include "passes/lower/program.h"

namespace tilec::lower {

// `rows` contiguous pieces of `bytes`: piece i at src + i * src_pitch and
// dst + i * dst_pitch (byte offsets in their buffers). Pitches are 0 when
// rows == 1.
struct StridedRun {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t bytes = 0;
  int64_t rows = 1;
  int64_t src_pitch = 0;
  int64_t dst_pitch = 0;
  friend bool operator==(const StridedRun&, const StridedRun&) = default;
};

// Groups consecutive element runs of equal length whose starts advance by
// the same amounts on both sides (at least a run's length, so pieces never
// overlap) into strided runs, in bytes.
std::vector<StridedRun> GroupRuns(std::span<const Run> runs, int element_bytes);

// Builds the transfers of exchange phases, keeping the contract above.
class TransferBuilder {
 public:
  // Sends `run` from (src_tile, src_buffer) to (dst_tile, dst_buffer) in
  // `phase`: a destination added to the transfer that already sends these
  // pieces, else a new transfer (always a new one in a unicast phase, which
  // the contract above does not cover).
  void Add(Phase* phase, int src_tile, int src_buffer, const StridedRun& run,
           int dst_tile, int dst_buffer, fb::DType dtype, uint32_t op);
  // Forgets every phase (their transfers stay as they are).
  void Clear() { sources_.clear(); }
  // Strided transfers split into single pieces because another move asked
  // for some of their pieces grouped differently (see above).
  int64_t split_transfers() const { return split_transfers_; }

 private:
  // The transfers of one phase from one source buffer with one piece size.
  struct Source {
    std::map<int64_t, size_t> singles;  // piece offset -> transfer (rows 1)
    // (offset, rows, src_pitch) -> transfer (rows > 1)
    std::map<std::tuple<int64_t, int64_t, int64_t>, size_t> strided;
  };
  using Key = std::tuple<const Phase*, int, int, int64_t>;

  void AddPiece(Phase* phase, Source* source, const VTransfer& like,
                int64_t src, const VDestination& dst);
  // Replaces the strided transfer `index` by single-piece transfers.
  void Split(Phase* phase, Source* source, size_t index);

  std::map<Key, Source> sources_;
  int64_t split_transfers_ = 0;
};

// Joins neighbouring transfers of one phase where the second continues the
// first's strides: same source tile and buffer, piece size, dtype and op,
// the same destination tiles and buffers in the same order, and every
// offset advancing by one source pitch and one destination pitch. Pieces,
// destinations and costs are unchanged.
void CompactTransfers(std::vector<VTransfer>* transfers);

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_TRANSFERS_H_
