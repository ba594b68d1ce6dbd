// What the files defining Lowering's member functions share (lowering.cc
// defines it); included only by them.

#ifndef TILEC_PASSES_LOWER_LOWERING_INTERNAL_H_
#define TILEC_PASSES_LOWER_LOWERING_INTERNAL_H_

#include <deque>
#include <string>
#include <vector>

#include "formats/tilec_generated.h"
#include "passes/lower/program.h"

namespace tilec::lower {

// "op <id> (<kind> <name>)", the start of the lowering's error messages.
std::string OpWhere(const fb::OperationT& op);

// Phases under construction; stable addresses for the transfer index.
using PhaseList = std::deque<Phase>;

Phase* NewPhase(PhaseList* list, Phase::Kind kind, std::string label);

// Drops empty exchange and compute phases and merges neighbouring compute
// phases (their calls keep their order, so per-tile order is unchanged).
std::vector<Phase> Normalize(PhaseList* list);

}  // namespace tilec::lower

#endif  // TILEC_PASSES_LOWER_LOWERING_INTERNAL_H_
