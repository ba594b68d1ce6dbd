// Options ranked by exact cost, each known first by cheaper lower bounds
// (the planner's floors, bounds and schedules: Search::CheapestOption, the
// local search's ranking of proposals).

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
// less useful than the one before it.
using TierPrice = std::function<StatusOr<std::vector<int64_t>>(
    std::span<const size_t> which, int tier)>;
// The order of (cost, option) pairs: by cost, ties as the caller says.
using CostOrder = std::function<bool(const std::pair<int64_t, size_t>&,
                                     const std::pair<int64_t, size_t>&)>;

// The best `top` of n options (all, if fewer) as (exact cost, index),
// best first by `before`; more may follow, priced exactly but not in rank.
// Options are taken one tier further by their least known bound, `batch`
// at a time (a batch is priced at one tier), until no bound left can enter
// the best `top`: the ranks of pricing every option exactly, with any
// bounds that are bounds.
StatusOr<std::vector<std::pair<int64_t, size_t>>> RankByTiers(
    size_t n, size_t top, int exact, size_t batch, const CostOrder& before,
    const TierPrice& price);

// The first option of the least exact cost (RankByTiers' best, ties to the
// lower index). n must be at least 1.
StatusOr<std::pair<int64_t, size_t>> CheapestByTiers(size_t n, int exact,
                                                     size_t batch,
                                                     const TierPrice& price);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_TIERED_MIN_H_
