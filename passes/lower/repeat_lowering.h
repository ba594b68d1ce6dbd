// What emit-device does for a repeat (docs/repeat.md): the body is lowered
// once; each iteration runs the same supersteps with the body weights'
// buffers renamed to their twins'. carried_out is stored in carried_in's
// buffers (Lowering::StoreIn), so each iteration reads what the one before
// left; on a tile where the two are stored differently, carried_in's buffer
// is renamed to carried_out's from the second iteration on.

#ifndef TILEC_PASSES_LOWER_REPEAT_LOWERING_H_
#define TILEC_PASSES_LOWER_REPEAT_LOWERING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "formats/repeat.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "passes/lower/allocate.h"
#include "passes/lower/lowering.h"

namespace tilec::lower {

struct BodyLowering {
  ir::RepeatBody body;
  int first_step = -1;  // the body's supersteps, once scheduled
  int last_step = -1;
  // Per iteration: virtual buffer -> the one the iteration uses instead.
  std::vector<std::map<int, int>> renames;
  std::set<int> carried_in, carried_out;  // their buffers
};

// After the body's ops are lowered: gives every twin weight storage like
// its body weight's and fills the renames. An error (Internal) when
// carried_in and carried_out are not stored alike on every tile: the
// planner gives them one ownership (docs/repeat.md).
StatusOr<BodyLowering> LowerRepeat(const ir::RepeatBody& body,
                                   Lowering* lowering);

// Lifetimes in allocation slots, [first, last] per virtual buffer: what
// the body reads from before it stays live to the body's end (every
// iteration reads it), and carried_out's buffers are live for the whole
// body (they carry the data from one iteration to the next).
void KeepBodyDataLive(const BodyLowering& b, int64_t body_first_slot,
                      int64_t body_last_slot, std::vector<int64_t>* first,
                      std::vector<int64_t>* last);

// Memory-element rules apply to what an iteration really touches: each
// rule naming a renamed buffer is repeated with its replacement.
void AddRenamedRules(const BodyLowering& b, const std::vector<VBuffer>& buffers,
                     std::vector<std::vector<AllocRule>>* per_tile);

// The program's SuperstepRepeat; `id_of` maps virtual buffers to program
// buffer ids (-1: not emitted).
std::unique_ptr<fb::SuperstepRepeatT> EmitRepeat(
    const BodyLowering& b, const std::vector<int64_t>& id_of);

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_REPEAT_LOWERING_H_
