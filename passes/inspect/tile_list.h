// A set of tiles as sorted ranges, "3-5,9,12-13": how listings and the
// report page name the destinations of a multicast without a line per tile.

#ifndef TILEC_PASSES_INSPECT_TILE_LIST_H_
#define TILEC_PASSES_INSPECT_TILE_LIST_H_

#include <string>
#include <vector>

namespace tilec::inspect {

// Sorted, duplicates merged into their range; "" for no tiles.
std::string TileListText(std::vector<int> tiles);

}  // namespace tilec::inspect

#endif  // TILEC_PASSES_INSPECT_TILE_LIST_H_
