// Options ranked by exact cost, each known first by cheaper lower bounds
// (the planner's floors, bounds and schedules: Search::CheapestOption, the
// local search's ranking of proposals).

#ifndef TILEC_PASSES_PLAN_TIERED_MIN_H_
#define TILEC_PASSES_PLAN_TIERED_MIN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "formats/status.h"

namespace tilec::plan {

// price(which, tier) gives the options `which` names at `tier`: tiers
// below `exact` are lower bounds of the exact cost (tier `exact`), each no
// less useful than the one before it: cycles, or memory repair's ranks.
// Of two bounds of one option the larger by Cost's own < is kept, so
// `before` must order costs as < does.
template <typename Cost>
using TierPriceOf = std::function<StatusOr<std::vector<Cost>>(
    std::span<const size_t> which, int tier)>;
// The order of (cost, option) pairs: by cost, ties as the caller says.
template <typename Cost>
using CostOrderOf = std::function<bool(const std::pair<Cost, size_t>&,
                                       const std::pair<Cost, size_t>&)>;
using TierPrice = TierPriceOf<int64_t>;
using CostOrder = CostOrderOf<int64_t>;

// The best `top` of n options (all, if fewer) as (exact cost, index),
// best first by `before`; more may follow, priced exactly but not in rank.
// Options are taken one tier further by their least known bound, `batch`
// at a time (a batch is priced at one tier), until no bound left can enter
// the best `top`: the ranks of pricing every option exactly, with any
// bounds that are bounds.
template <typename Cost>
StatusOr<std::vector<std::pair<Cost, size_t>>> RankByTiers(
    size_t n, size_t top, int exact, size_t batch,
    const CostOrderOf<Cost>& before, const TierPriceOf<Cost>& price) {
  struct Known {
    std::pair<Cost, size_t> bound;  // (least known cost, index)
    int tier = 0;
  };
  std::vector<std::pair<Cost, size_t>> ranked;
  if (n == 0) return ranked;
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  StatusOr<std::vector<Cost>> first = price(all, 0);
  if (!first.ok()) return first.status();
  std::vector<Known> open;  // neither priced exactly nor ruled out
  for (size_t i = 0; i < n; ++i) open.push_back({{(*first)[i], i}, 0});
  top = std::max<size_t>(top, 1);
  batch = std::max<size_t>(batch, 1);
  while (true) {
    std::erase_if(open, [&](const Known& k) {
      return ranked.size() >= top && before(ranked[top - 1], k.bound);
    });
    if (open.empty()) break;
    std::sort(open.begin(), open.end(), [&](const Known& a, const Known& b) {
      return before(a.bound, b.bound);
    });
    // The front's options of the lowest tier go one tier up together.
    const size_t front = std::min(batch, open.size());
    int tier = exact;
    for (size_t j = 0; j < front; ++j) tier = std::min(tier, open[j].tier);
    std::vector<size_t> at, which;
    for (size_t j = 0; j < front; ++j) {
      if (open[j].tier != tier) continue;
      at.push_back(j);
      which.push_back(open[j].bound.second);
    }
    StatusOr<std::vector<Cost>> cost = price(which, tier + 1);
    if (!cost.ok()) return cost.status();
    for (size_t b = 0; b < at.size(); ++b) {
      Known& k = open[at[b]];
      k.tier = tier + 1;
      if (k.tier < exact) {
        // Both are bounds: the closer one counts.
        k.bound.first = std::max(k.bound.first, (*cost)[b]);
        continue;
      }
      const std::pair<Cost, size_t> priced((*cost)[b], k.bound.second);
      ranked.insert(
          std::upper_bound(ranked.begin(), ranked.end(), priced, before),
          priced);
    }
    std::erase_if(open, [&](const Known& k) { return k.tier == exact; });
  }
  return ranked;
}

// The first option of the least exact cost (RankByTiers' best, ties to the
// lower index). n must be at least 1.
StatusOr<std::pair<int64_t, size_t>> CheapestByTiers(size_t n, int exact,
                                                     size_t batch,
                                                     const TierPrice& price);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_TIERED_MIN_H_
