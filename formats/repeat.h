// Repeated ops in a graph (Module.repeats, docs/repeat.md): where each body
// lies in `ops`, what an iteration binds, and the structural rules every
// reader relies on (checked by VerifyModule through VerifyRepeats).

#ifndef TILEC_FORMATS_REPEAT_H_
#define TILEC_FORMATS_REPEAT_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::ir {

// A repeat's body as positions in module.ops: [begin, end).
struct RepeatBody {
  size_t begin = 0;
  size_t end = 0;
  const fb::RepeatT* repeat = nullptr;

  bool Contains(size_t op_index) const {
    return op_index >= begin && op_index < end;
  }
};

// The bodies of module.repeats in order; an error (one line) where the
// repeat table does not describe a body (VerifyRepeats' rules).
StatusOr<std::vector<RepeatBody>> RepeatBodies(const fb::ModuleT& module);

// The value iteration `iteration` (0 <= iteration < count) reads in place of
// body value `id`: weights[j] -> its twin, carried_in -> carried_out for
// iteration > 0; every other id is itself.
uint32_t IterationValue(const fb::RepeatT& repeat, uint32_t iteration,
                        uint32_t id);

// weights[j] -> the weight iteration `iteration` reads instead (empty for
// iteration 0).
std::map<uint32_t, uint32_t> IterationWeights(const fb::RepeatT& repeat,
                                              uint32_t iteration);

// The repeat that lists `value` as a twin (a weight of an iteration > 0),
// with the body weight it stands for; nullptr if none.
const fb::RepeatT* TwinOf(const fb::ModuleT& module, uint32_t value,
                          uint32_t* body_weight);

// The rules of docs/repeat.md: count >= 1; carried_in and carried_out exist
// with equal shape, dtype and scale; carried_out is produced in the body and
// carried_in before it (or is an input or weight); the body's values are
// read after it only through carried_out, and carried_in is not read after
// it; every weights[j] is a weight read only in the body; every twin is a
// weight of the same shape and dtype as its body weight that no op reads
// and no other repeat names; bodies are disjoint and in op order.
Status VerifyRepeats(const fb::ModuleT& module);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_REPEAT_H_
