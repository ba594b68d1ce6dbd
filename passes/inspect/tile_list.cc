#include "passes/inspect/tile_list.h"

#include <algorithm>

namespace tilec::inspect {

std::string TileListText(std::vector<int> tiles) {
  std::sort(tiles.begin(), tiles.end());
  tiles.erase(std::unique(tiles.begin(), tiles.end()), tiles.end());
  std::string out;
  for (size_t i = 0; i < tiles.size();) {
    size_t j = i;
    while (j + 1 < tiles.size() && tiles[j + 1] == tiles[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(tiles[i]);
    if (j > i) out += "-" + std::to_string(tiles[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace tilec::inspect
