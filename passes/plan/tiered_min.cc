#include "passes/plan/tiered_min.h"

#include <algorithm>
#include <numeric>

namespace tilec::plan {

StatusOr<std::vector<std::pair<int64_t, size_t>>> RankByTiers(
    size_t n, size_t top, int exact, size_t batch, const CostOrder& before,
    const TierPrice& price) {
  struct Known {
    std::pair<int64_t, size_t> bound;  // (least known cost, index)
    int tier = 0;
  };
  std::vector<std::pair<int64_t, size_t>> ranked;
  if (n == 0) return ranked;
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  StatusOr<std::vector<int64_t>> first = price(all, 0);
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
    StatusOr<std::vector<int64_t>> cost = price(which, tier + 1);
    if (!cost.ok()) return cost.status();
    for (size_t b = 0; b < at.size(); ++b) {
      Known& k = open[at[b]];
      k.tier = tier + 1;
      if (k.tier < exact) {
        // Both are bounds: the closer one counts.
        k.bound.first = std::max(k.bound.first, (*cost)[b]);
        continue;
      }
      const std::pair<int64_t, size_t> priced((*cost)[b], k.bound.second);
      ranked.insert(
          std::upper_bound(ranked.begin(), ranked.end(), priced, before),
          priced);
    }
    std::erase_if(open, [&](const Known& k) { return k.tier == exact; });
  }
  return ranked;
}

StatusOr<std::pair<int64_t, size_t>> CheapestByTiers(size_t n, int exact,
                                                     size_t batch,
                                                     const TierPrice& price) {
  StatusOr<std::vector<std::pair<int64_t, size_t>>> ranked = RankByTiers(
      n, 1, exact, batch, std::less<std::pair<int64_t, size_t>>(), price);
  if (!ranked.ok()) return ranked.status();
  return ranked->front();
}

}  // namespace tilec::plan
