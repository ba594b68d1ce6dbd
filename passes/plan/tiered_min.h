// The cheapest of n options by exact cost, each known first by cheaper
// lower bounds (the greedy plan's floors, bounds and schedules:
// Search::CheapestOption).

#ifndef TILEC_PASSES_PLAN_TIERED_MIN_H_
#define TILEC_PASSES_PLAN_TIERED_MIN_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "formats/status.h"

namespace tilec::plan {

// price(which, tier) gives the options `which` names at `tier`: tiers
// below `exact` are lower bounds of the exact cost (tier `exact`), each no
// less useful than the one before it. Returns (cost, index) of the first
// option of the least exact cost. Options are taken further by their
// least known bound, `batch` at a time (a batch is priced at one tier),
// until none left can beat the best priced exactly (or, equal to it, comes
// later): the result of pricing every option exactly, with any bounds
// that are bounds. n must be at least 1.
using TierPrice = std::function<StatusOr<std::vector<int64_t>>(
    std::span<const size_t> which, int tier)>;
StatusOr<std::pair<int64_t, size_t>> CheapestByTiers(size_t n, int exact,
                                                     size_t batch,
                                                     const TierPrice& price);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_TIERED_MIN_H_
