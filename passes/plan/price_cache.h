// The planner's prices that hold for any graph on a target, carried from
// one pass to the next (--price_cache; docs/planner.md, "Price cache").
// quantize-fp8 prices its trial graphs by planning them; plan-ownership
// and fuse-elementwise then price the same recipes and redistributions of
// the same shapes again, each in a process of its own, unless the prices
// come with the module.
//
// Only the caches keyed by shapes, element bytes and ownerships travel
// (Coster's transfers, redistributions, placements, bytes per tile, op
// prices keyed by shapes, exchange phases; for exact prices and for the
// LowerBounds() costers' bounds), never prices by op index. A price is a
// function of its key, and no decision depends on which prices were made
// before it (the searches rank exactly, as with quantize-fp8's threads
// pricing in any order): a pass's output is the same bytes with or without
// saved prices.

#ifndef TILEC_PASSES_PLAN_PRICE_CACHE_H_
#define TILEC_PASSES_PLAN_PRICE_CACHE_H_

#include <optional>
#include <string>
#include <string_view>

#include "formats/status.h"
#include "passes/core/pass.h"
#include "passes/plan/cost.h"

namespace tilec::plan {

// The fingerprint of the code the prices depend on (generated from its
// sources: passes/plan/BUILD, price_fingerprint_gen).
extern const char kPriceFingerprint[];

// The prices `coster`'s family holds (its caches and its LowerBounds()
// costers'), with the fingerprint, target and price options they hold for:
// a price cache file's bytes. Sorted by key: the same prices, the same
// bytes.
std::string SavePrices(const Coster& coster);

// Adds the prices of `bytes` (SavePrices') to `coster`'s family's caches;
// those it has already stay. Takes none, and says why, unless the bytes
// are a price cache of this build (kPriceFingerprint) for the coster's
// target and price options.
std::optional<std::string> TakePrices(std::string_view bytes,
                                      const Coster& coster);

// A pass's side of --price_cache: takes common.saved_prices into `coster`
// (saying on common.messages why not, where it refuses them), and hands
// the prices `coster`'s family holds at the end to common.save_prices.
// `pass` names it in the message.
void TakeSavedPrices(std::string_view pass, const passes::PassOptions& common,
                     const Coster& coster);
Status SavePassPrices(const passes::PassOptions& common, const Coster& coster);

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_PRICE_CACHE_H_
