#include "passes/plan/tiered_min.h"

namespace tilec::plan {

StatusOr<std::pair<int64_t, size_t>> CheapestByTiers(size_t n, int exact,
                                                     size_t batch,
                                                     const TierPrice& price) {
  StatusOr<std::vector<std::pair<int64_t, size_t>>> ranked =
      RankByTiers<int64_t>(n, 1, exact, batch,
                           std::less<std::pair<int64_t, size_t>>(), price);
  if (!ranked.ok()) return ranked.status();
  return ranked->front();
}

}  // namespace tilec::plan
