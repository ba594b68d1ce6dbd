#include "passes/plan/tiered_min.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace tilec::plan {

StatusOr<std::pair<int64_t, size_t>> CheapestByTiers(size_t n, int exact,
                                                     size_t batch,
                                                     const TierPrice& price) {
  struct Known {
    int64_t bound = 0;
    size_t index = 0;
    int tier = 0;
  };
  std::vector<size_t> all(n);
  std::iota(all.begin(), all.end(), size_t{0});
  StatusOr<std::vector<int64_t>> first = price(all, 0);
  if (!first.ok()) return first.status();
  std::vector<Known> open;  // neither priced exactly nor ruled out
  for (size_t i = 0; i < n; ++i) open.push_back({(*first)[i], i, 0});
  batch = std::max<size_t>(batch, 1);
  std::optional<std::pair<int64_t, size_t>> best;  // (cost, index)
  while (true) {
    std::erase_if(open, [&](const Known& k) {
      return best && std::pair(k.bound, k.index) > *best;
    });
    if (open.empty()) break;
    std::sort(open.begin(), open.end(), [](const Known& a, const Known& b) {
      return std::pair(a.bound, a.index) < std::pair(b.bound, b.index);
    });
    // The front's options of the lowest tier go one tier up together.
    const size_t front = std::min(batch, open.size());
    int tier = exact;
    for (size_t j = 0; j < front; ++j) tier = std::min(tier, open[j].tier);
    std::vector<size_t> at, which;
    for (size_t j = 0; j < front; ++j) {
      if (open[j].tier != tier) continue;
      at.push_back(j);
      which.push_back(open[j].index);
    }
    StatusOr<std::vector<int64_t>> cost = price(which, tier + 1);
    if (!cost.ok()) return cost.status();
    for (size_t b = 0; b < at.size(); ++b) {
      Known& k = open[at[b]];
      k.tier = tier + 1;
      if (k.tier < exact) {
        // Both are bounds: the closer one counts.
        k.bound = std::max(k.bound, (*cost)[b]);
        continue;
      }
      const std::pair<int64_t, size_t> priced((*cost)[b], k.index);
      if (!best || priced < *best) best = priced;
    }
    std::erase_if(open, [&](const Known& k) { return k.tier == exact; });
  }
  return *best;
}

}  // namespace tilec::plan
