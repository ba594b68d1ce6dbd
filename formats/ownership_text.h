#ifndef TILEC_FORMATS_OWNERSHIP_TEXT_H_
#define TILEC_FORMATS_OWNERSHIP_TEXT_H_

// The text form of an ownership, printed and parsed in one place:
// blocked(9x6, rep=27, order=0,2,1, first=0, stride=1) and
// flat(grain=4, tiles=1472, first=0, stride=1). The IR printer, reports
// and the ownership algebra (passes/core/ownership.h) all go through it.

#include <optional>
#include <string>
#include <string_view>

#include "formats/tilec_generated.h"

namespace tilec::ir {

// Omits options at their defaults (rep=1, natural order, first=0,
// stride=1): "blocked(729x2)", "blocked(9x6, rep=27, order=0,2,1)",
// "flat(grain=4, tiles=1472)".
std::string OwnershipText(const fb::OwnershipT& ownership);

// Parses the text form. Spaces are allowed between tokens, options may come
// in any order and may repeat their defaults; grain and tiles are required
// for flat; `order=` lists every grid axis 0..rank once. Checks syntax and the
// shape-independent ranges (counts >= 1, first >= 0, at most kMaxRank axes)
// but not a shape or a target (passes::ValidateOwnership does). On error
// returns nullopt and, if `error` is not null, sets it to a message that
// quotes the text and the position.
std::optional<fb::OwnershipT> ParseOwnershipText(std::string_view text,
                                                 std::string* error = nullptr);

}  // namespace tilec::ir

#endif  // TILEC_FORMATS_OWNERSHIP_TEXT_H_
