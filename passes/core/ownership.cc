// Ownerships made (homes, the vectors that follow a layout), validated,
// printed and parsed (the text form lives in formats/ownership_text.h), and
// asked which tile holds what. Transfers between two ownerships are in
// ownership_transfers.cc.

#include "passes/core/ownership.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "formats/basics.h"
#include "formats/ownership_text.h"
#include "passes/core/resolved_ownership.h"

namespace tilec::passes {
namespace {

using fb::OwnershipKind;
using resolved::ForEachRangeBox;
using resolved::Layout;
using resolved::NaturalOrder;
using resolved::Resolve;

std::string Join(const std::vector<int32_t>& v, const char* separator) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += separator;
    s += std::to_string(v[i]);
  }
  return s;
}

}  // namespace

int64_t Box::Elements() const {
  if (rank == 0) return 0;
  int64_t n = 1;
  for (int a = 0; a < rank; ++a) n *= std::max<int64_t>(0, end[a] - begin[a]);
  return n;
}

std::string FormatBox(const Box& box) {
  std::string s = "[";
  for (int a = 0; a < box.rank; ++a) {
    if (a > 0) s += ", ";
    s += std::to_string(box.begin[a]) + ":" + std::to_string(box.end[a]);
  }
  return s + "]";
}

Box Box2(int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  Box b;
  b.rank = 2;
  b.begin = {r0, c0, 0, 0};
  b.end = {r1, c1, 0, 0};
  if (r1 <= r0 || c1 <= c0) b.begin = b.end = {0, 0, 0, 0};
  return b;
}

fb::OwnershipT BlockedOwnership(std::vector<int32_t> partitions, int replicas,
                                int first_tile, int tile_stride) {
  fb::OwnershipT o;
  o.kind = OwnershipKind::Blocked;
  o.partitions = std::move(partitions);
  o.replicas = replicas;
  o.first_tile = first_tile;
  o.tile_stride = tile_stride;
  return o;
}

fb::OwnershipT FlatOwnership(int grain, int tiles, int first_tile,
                             int tile_stride) {
  fb::OwnershipT o;
  o.kind = OwnershipKind::Flat;
  o.grain = grain;
  o.tiles = tiles;
  o.first_tile = first_tile;
  o.tile_stride = tile_stride;
  return o;
}

fb::OwnershipT HomeOwnership(std::span<const int64_t> shape, int element_bytes,
                             int target_tiles, int first_tile_hint) {
  int64_t elements = 1;
  for (int64_t e : shape) elements *= e;
  const int grain = std::max(1, 8 / std::max(1, element_bytes));
  const int64_t grains = std::max<int64_t>(1, ir::CeilDiv(elements, grain));
  const int tiles =
      static_cast<int>(std::min<int64_t>(grains, std::max(target_tiles, 1)));
  const int first = std::clamp(first_tile_hint, 0, target_tiles - tiles);
  return FlatOwnership(grain, tiles, first);
}

std::optional<fb::OwnershipT> DeliveryHome(const fb::OwnershipT& layout,
                                           int parts, int first_replica) {
  const int rank = static_cast<int>(layout.partitions.size());
  const int replicas = layout.replicas;
  if (layout.kind != OwnershipKind::Blocked || !layout.sub_partitions.empty() ||
      parts < 1 || replicas % parts != 0) {
    return std::nullopt;
  }
  std::vector<int32_t> slowest = {rank};
  for (int a = 0; a < rank; ++a) slowest.push_back(a);
  const bool replicas_fastest = NaturalOrder(layout.axis_order);
  if (!replicas_fastest && layout.axis_order != slowest) return std::nullopt;
  int64_t blocks = 1;
  for (int32_t p : layout.partitions) blocks *= p;
  if (replicas == 1) return layout;
  fb::OwnershipT home = BlockedOwnership(layout.partitions, 1);
  if (parts > 1) {
    home.sub_partitions.assign(rank, 1);
    home.sub_partitions[0] = parts;
  }
  const int spacing = replicas / parts;
  if (replicas_fastest) {
    // Block b's slab s on grid cell b * R + first + s * spacing: a grid of
    // (blocks, slabs) with slabs fastest, every spacing-th cell.
    home.first_tile =
        layout.first_tile + (first_replica % spacing) * layout.tile_stride;
    home.tile_stride = layout.tile_stride * spacing;
  } else {
    // Slab s in replica plane first + s: planes are `blocks` cells apart.
    if (parts > 1) {
      home.axis_order = {rank};
      for (int a = 0; a < 2 * rank + 1; ++a) {
        if (a != rank) home.axis_order.push_back(a);
      }
    }
    home.first_tile = layout.first_tile +
                      static_cast<int>(first_replica % (replicas - parts + 1) *
                                       blocks * layout.tile_stride);
    home.tile_stride = layout.tile_stride;
  }
  return home;
}

std::optional<fb::OwnershipT> SpreadHome(const fb::OwnershipT& layout,
                                         int parts, int tiles,
                                         int first_hint) {
  if (layout.kind != OwnershipKind::Blocked || layout.replicas != 1 ||
      !layout.sub_partitions.empty() || parts < 1) {
    return std::nullopt;
  }
  const int rank = static_cast<int>(layout.partitions.size());
  int64_t cells = parts;
  for (int32_t p : layout.partitions) cells *= p;
  if (cells > tiles) return std::nullopt;
  fb::OwnershipT home = BlockedOwnership(layout.partitions, 1);
  if (parts > 1) {
    home.sub_partitions.assign(rank, 1);
    home.sub_partitions[0] = parts;
  }
  const int64_t starts = tiles - cells + 1;
  home.first_tile = static_cast<int>(std::max(first_hint, 0) % starts);
  return home;
}

bool SameOwnership(const fb::OwnershipT& a, const fb::OwnershipT& b) {
  // An explicit identity order means the same as an empty one.
  const bool same_order =
      a.axis_order == b.axis_order ||
      (NaturalOrder(a.axis_order) && NaturalOrder(b.axis_order));
  return a.kind == b.kind && a.partitions == b.partitions &&
         a.sub_partitions == b.sub_partitions &&
         a.replicas == b.replicas && a.first_tile == b.first_tile &&
         a.tile_stride == b.tile_stride && a.grain == b.grain &&
         a.tiles == b.tiles && same_order;
}

int64_t GridCells(const fb::OwnershipT& o) {
  if (o.kind == OwnershipKind::Flat) return o.tiles;
  int64_t cells = o.replicas;
  for (int32_t p : o.partitions) cells *= p;
  for (int32_t p : o.sub_partitions) cells *= p;
  return cells;
}

namespace {

// A two-dimensional blocked layout's grid axes: rows 0, columns 1, (row
// parts 2, column parts 3,) replicas last.
struct LayoutGrid {
  explicit LayoutGrid(const fb::OwnershipT& layout)
      : l(layout), replica_axis(layout.sub_partitions.empty() ? 2 : 4) {}

  int64_t Extent(int g) const {
    if (g == replica_axis) return l.replicas;
    if (g < 2) return l.partitions[g];
    return l.sub_partitions[g - 2];
  }
  // The product of the extents of the axes `picked` picks.
  template <typename Picked>
  int64_t Product(Picked picked) const {
    int64_t product = 1;
    for (int g = 0; g <= replica_axis; ++g) {
      if (picked(g)) product *= Extent(g);
    }
    return product;
  }
  // The axes in the layout's tile order.
  std::vector<int32_t> Order() const {
    std::vector<int32_t> order = l.axis_order;
    if (order.empty()) {
      for (int g = 0; g <= replica_axis; ++g) order.push_back(g);
    }
    return order;
  }

  const fb::OwnershipT& l;
  const int replica_axis;
};

// The axis order of a vector's ownership made from a layout's grid: the
// axes that `folded` picks become the one axis `folded_to`, every other
// axis g becomes kept(g), axes of extent 1 left out (the caller places
// them). Nullopt where the folded axes of extent above 1 are not one run of
// the layout's order: only then is their product a single axis.
template <typename Folded, typename Kept>
std::optional<std::vector<int32_t>> FoldedAxisOrder(const LayoutGrid& grid,
                                                    Folded folded,
                                                    int32_t folded_to,
                                                    Kept kept) {
  std::vector<int32_t> out;
  bool in_run = false, run_done = false, placed = false;
  for (int32_t g : grid.Order()) {
    if (grid.Extent(g) == 1) continue;
    if (folded(g)) {
      if (run_done) return std::nullopt;
      in_run = true;
      if (!placed) out.push_back(folded_to);
      placed = true;
    } else {
      if (in_run) run_done = true;
      in_run = false;
      out.push_back(kept(g));
    }
  }
  return out;
}

}  // namespace

std::optional<fb::OwnershipT> ColumnVectorOwnership(const fb::OwnershipT& l) {
  if (l.kind == OwnershipKind::Flat) {
    return BlockedOwnership({1}, l.tiles, l.first_tile, l.tile_stride);
  }
  if (l.partitions.size() != 2) return std::nullopt;
  // Row-like axes become the vector's replicas.
  const LayoutGrid grid(l);
  auto row_like = [&](int g) {
    return g == 0 || g == 2 || g == grid.replica_axis;
  };
  const int column_parts =
      l.sub_partitions.empty() ? 1 : l.sub_partitions[1];
  fb::OwnershipT v = BlockedOwnership(
      {l.partitions[1]}, static_cast<int>(grid.Product(row_like)),
      l.first_tile, l.tile_stride);
  if (column_parts > 1) v.sub_partitions = {column_parts};
  const int v_replicas = column_parts > 1 ? 2 : 1;
  // The row-like axes that matter (extent > 1) become the replica axis.
  std::optional<std::vector<int32_t>> folded = FoldedAxisOrder(
      grid, row_like, v_replicas,
      [](int32_t g) { return g == 1 ? 0 : 1; });
  if (!folded) return std::nullopt;
  v.axis_order = *std::move(folded);
  const bool placed = std::find(v.axis_order.begin(), v.axis_order.end(),
                                v_replicas) != v.axis_order.end();
  // Axes of extent 1 go anywhere: after the others.
  for (int32_t g : {0, 1}) {
    if (std::find(v.axis_order.begin(), v.axis_order.end(), g) ==
            v.axis_order.end() &&
        g < v_replicas) {
      v.axis_order.push_back(g);
    }
  }
  if (!placed) v.axis_order.push_back(v_replicas);
  if (NaturalOrder(v.axis_order)) v.axis_order.clear();
  return v;
}

std::optional<fb::OwnershipT> RowColumnOwnership(const fb::OwnershipT& l) {
  if (l.kind == OwnershipKind::Flat) {
    return BlockedOwnership({1, 1}, l.tiles, l.first_tile, l.tile_stride);
  }
  if (l.partitions.size() != 2) return std::nullopt;
  // Column-like axes become the column's replicas; the row axes keep
  // their place (row parts only where they split, since a nested ownership
  // needs some sub-partition above 1).
  const LayoutGrid grid(l);
  auto column_like = [&](int g) {
    return g == 1 || g == 3 || g == grid.replica_axis;
  };
  const bool v_nested = !l.sub_partitions.empty() && l.sub_partitions[0] > 1;
  const int v_replica_axis = v_nested ? 4 : 2;
  fb::OwnershipT v = BlockedOwnership(
      {l.partitions[0], 1}, static_cast<int>(grid.Product(column_like)),
      l.first_tile, l.tile_stride);
  if (v_nested) v.sub_partitions = {l.sub_partitions[0], 1};
  // The column-like axes that matter (extent > 1) become the replica
  // axis; which replica a tile holds does not matter, as every replica is
  // the same column. Row blocks 0 and row parts 2 keep their axes.
  std::optional<std::vector<int32_t>> folded = FoldedAxisOrder(
      grid, column_like, v_replica_axis,
      [](int32_t g) { return g; });
  if (!folded) return std::nullopt;
  v.axis_order = *std::move(folded);
  // Axes of extent 1 go anywhere: after the others. Where the others are
  // in increasing order the natural order places every tile the same.
  const bool increasing =
      std::is_sorted(v.axis_order.begin(), v.axis_order.end());
  for (int32_t g = 0; g <= v_replica_axis; ++g) {
    if (std::find(v.axis_order.begin(), v.axis_order.end(), g) ==
        v.axis_order.end()) {
      v.axis_order.push_back(g);
    }
  }
  if (increasing || NaturalOrder(v.axis_order)) v.axis_order.clear();
  return v;
}

namespace {

// The checks of ValidateOwnership, each returning "" or the problem. The
// ownership is formatted only on error: planners validate in hot loops.

std::string Str(int64_t v) { return std::to_string(v); }

std::string ShapeError(const fb::OwnershipT& o,
                       std::span<const int64_t> shape) {
  if (shape.empty() || shape.size() > kMaxRank) {
    return FormatOwnership(o) + ": a value of rank " + Str(shape.size()) +
           " cannot be owned (rank must be 1.." + Str(kMaxRank) + ")";
  }
  int64_t elements = 1;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] < 0) {
      return FormatOwnership(o) + ": the shape has a negative extent " +
             Str(shape[a]) + " on axis " + Str(a);
    }
    // Bounded so that element and byte counts cannot overflow.
    if (__builtin_mul_overflow(elements, shape[a], &elements) ||
        elements > (int64_t{1} << 56)) {
      return FormatOwnership(o) + ": the shape has more than 2^56 elements";
    }
  }
  return "";
}

// Grid positions, i.e. tiles assigned. The product stops once it exceeds
// the target (it could overflow otherwise); `exact` says if it is complete.
struct CellCount {
  int64_t cells = 1;
  bool exact = true;
  int64_t limit = 0;
  void Multiply(int64_t factor) {
    if (cells > limit) {
      exact = false;
    } else {
      cells *= factor;
    }
  }
};

// Per-axis counts (partitions or sub-partitions, `what_axis` "parts" or
// "sub-parts"), each at least 1, multiplied into `count`.
std::string AxisCountsError(const fb::OwnershipT& o,
                            const std::vector<int32_t>& counts,
                            const char* what_axis, CellCount* count) {
  for (size_t a = 0; a < counts.size(); ++a) {
    if (counts[a] < 1) {
      return FormatOwnership(o) + " has " + Str(counts[a]) + " " + what_axis +
             " on axis " + Str(a) + " (must be >= 1)";
    }
    count->Multiply(counts[a]);
  }
  return "";
}

// A permutation of the grid axes (the last one is the replicas).
std::string AxisOrderError(const fb::OwnershipT& o, size_t rank) {
  if (o.axis_order.empty()) return "";
  const size_t grid_axes = o.sub_partitions.empty() ? rank + 1 : 2 * rank + 1;
  std::vector<bool> seen(grid_axes, false);
  bool permutation = o.axis_order.size() == seen.size();
  for (int32_t axis : o.axis_order) {
    if (!permutation) break;
    permutation =
        axis >= 0 && axis < static_cast<int32_t>(seen.size()) && !seen[axis];
    if (permutation) seen[axis] = true;
  }
  if (permutation) return "";
  return FormatOwnership(o) + " has axis order " + Join(o.axis_order, ",") +
         ", which is not a permutation of the grid axes 0.." +
         Str(grid_axes - 1) + " (axis " + Str(grid_axes - 1) + " = replicas)";
}

std::string BlockedError(const fb::OwnershipT& o, size_t rank,
                         CellCount* count) {
  if (o.grain != 0 || o.tiles != 0) {
    return FormatOwnership(o) +
           ": a blocked ownership must leave grain and tiles "
           "unset (grain=" +
           Str(o.grain) + ", tiles=" + Str(o.tiles) + ")";
  }
  if (o.partitions.size() != rank) {
    return FormatOwnership(o) + " has " + Str(o.partitions.size()) +
           " partition counts for a value of rank " + Str(rank);
  }
  if (std::string e = AxisCountsError(o, o.partitions, "parts", count);
      !e.empty()) {
    return e;
  }
  if (!o.sub_partitions.empty()) {
    if (o.sub_partitions.size() != rank) {
      return FormatOwnership(o) + " has " + Str(o.sub_partitions.size()) +
             " sub-partition counts for a value of rank " + Str(rank);
    }
    if (std::string e =
            AxisCountsError(o, o.sub_partitions, "sub-parts", count);
        !e.empty()) {
      return e;
    }
    // One spelling per placement: no sub= when nothing is split twice.
    if (std::all_of(o.sub_partitions.begin(), o.sub_partitions.end(),
                    [](int32_t p) { return p == 1; })) {
      return FormatOwnership(o) +
             " has sub-partitions that are all 1: leave them out";
    }
  }
  if (o.replicas < 1) {
    return FormatOwnership(o) + " has " + Str(o.replicas) +
           " replicas (must be >= 1)";
  }
  count->Multiply(o.replicas);
  return AxisOrderError(o, rank);
}

std::string FlatError(const fb::OwnershipT& o, CellCount* count) {
  if (!o.partitions.empty() || !o.sub_partitions.empty() || o.replicas != 1 ||
      !o.axis_order.empty()) {
    return FormatOwnership(o) +
           ": a flat ownership must leave partitions, sub-partitions, "
           "replicas and axis order unset";
  }
  if (o.grain < 1) {
    return FormatOwnership(o) + " has grain " + Str(o.grain) +
           " (must be >= 1)";
  }
  if (o.tiles < 1) {
    return FormatOwnership(o) + " has " + Str(o.tiles) +
           " tiles (must be >= 1)";
  }
  count->cells = o.tiles;
  return "";
}

// The tiles the grid's cells land on: from first_tile by tile_stride, all
// on the target.
std::string PlacementError(const fb::OwnershipT& o, const CellCount& count,
                           int target_tiles) {
  if (o.first_tile < 0) {
    return FormatOwnership(o) + " starts at tile " + Str(o.first_tile) +
           " (must be >= 0)";
  }
  if (o.tile_stride < 1) {
    return FormatOwnership(o) + " has tile stride " + Str(o.tile_stride) +
           " (must be >= 1)";
  }
  if (count.cells > target_tiles) {
    return FormatOwnership(o) + " needs " + (count.exact ? "" : "at least ") +
           Str(count.cells) + " tiles but the target has " + Str(target_tiles);
  }
  const int64_t last =
      o.first_tile + (count.cells - 1) * int64_t{o.tile_stride};
  if (last >= target_tiles) {
    return FormatOwnership(o) + " uses tiles up to " + Str(last) +
           " but the target has " + Str(target_tiles) + " tiles";
  }
  return "";
}

}  // namespace

std::string ValidateOwnership(const fb::OwnershipT& o,
                              std::span<const int64_t> shape,
                              int target_tiles) {
  if (std::string e = ShapeError(o, shape); !e.empty()) return e;
  if (target_tiles < 1) return FormatOwnership(o) + ": the target has no tiles";
  CellCount count;
  count.limit = target_tiles;
  std::string error;
  switch (o.kind) {
    case OwnershipKind::Blocked:
      error = BlockedError(o, shape.size(), &count);
      break;
    case OwnershipKind::Flat:
      error = FlatError(o, &count);
      break;
    default:
      return "unknown ownership kind " + Str(static_cast<int>(o.kind));
  }
  if (!error.empty()) return error;
  return PlacementError(o, count, target_tiles);
}

std::string FormatOwnership(const fb::OwnershipT& o) {
  // One text form for the IR printer and the algebra: formats/print.cc owns
  // it. Only a kind outside the enum (which the printer cannot name, and
  // which validation messages must still show) is spelled here.
  if (o.kind != OwnershipKind::Blocked && o.kind != OwnershipKind::Flat) {
    return "unknown(kind=" + std::to_string(static_cast<int>(o.kind)) + ")";
  }
  return ir::OwnershipText(o);
}

std::optional<fb::OwnershipT> ParseOwnership(std::string_view text,
                                             std::string* error) {
  return ir::ParseOwnershipText(text, error);
}

std::vector<Box> HeldBoxes(const fb::OwnershipT& ownership,
                           std::span<const int64_t> shape, int tile,
                           const Box* view) {
  const Layout l = Resolve(ownership, shape, view);
  std::vector<Box> boxes;
  const int64_t piece = l.PieceOn(tile);
  if (piece < 0) return boxes;
  if (l.flat) {
    const auto [lo, hi] = l.FlatRange(piece);
    ForEachRangeBox(l, lo, hi, [&](const Box& box) { boxes.push_back(box); });
  } else {
    const Box box = l.BlockBox(piece);
    if (!box.Empty()) boxes.push_back(box);
  }
  return boxes;
}

void ForEachHeldBoxes(
    const fb::OwnershipT& ownership, std::span<const int64_t> shape,
    const std::function<void(int tile, std::span<const Box> boxes)>& fn,
    const Box* view) {
  const Layout l = Resolve(ownership, shape, view);
  std::vector<Box> boxes;
  const int limit = l.TileLimit();
  for (int tile = static_cast<int>(l.first); tile < limit; ++tile) {
    const int64_t piece = l.PieceOn(tile);
    if (piece < 0) continue;
    boxes.clear();
    if (l.flat) {
      const auto [lo, hi] = l.FlatRange(piece);
      ForEachRangeBox(l, lo, hi, [&](const Box& box) { boxes.push_back(box); });
    } else {
      const Box box = l.BlockBox(piece);
      if (!box.Empty()) boxes.push_back(box);
    }
    if (!boxes.empty()) fn(tile, boxes);
  }
}

int64_t HeldElements(const fb::OwnershipT& ownership,
                     std::span<const int64_t> shape, int tile) {
  const Layout l = Resolve(ownership, shape);
  const int64_t piece = l.PieceOn(tile);
  return piece < 0 ? 0 : l.PieceElements(piece);
}

std::vector<int> TilesUsed(const fb::OwnershipT& ownership,
                           std::span<const int64_t> shape) {
  const Layout l = Resolve(ownership, shape);
  std::vector<int> tiles;
  // In the natural order tiles ascend with the grid position, so the list
  // comes out sorted; another axis order needs a sort.
  for (int64_t piece = 0; piece < l.pieces; ++piece) {
    if (l.PieceElements(piece) == 0) continue;
    for (int64_t k = 0; k < l.holders; ++k) tiles.push_back(l.Tile(piece, k));
  }
  if (!l.natural) std::sort(tiles.begin(), tiles.end());
  return tiles;
}

int64_t MaxBytesPerTile(const fb::OwnershipT& ownership,
                        std::span<const int64_t> shape, int element_bytes) {
  const Layout l = Resolve(ownership, shape);
  int64_t elements = 0;
  if (l.flat) {
    // Flat block 0 has the most grains, and if it holds the short last grain
    // it holds every grain.
    elements = l.PieceElements(0);
  } else {
    elements = 1;
    for (int a = 0; a < l.rank; ++a) elements *= l.axis[a].Largest();
  }
  return elements * element_bytes;
}

std::vector<int64_t> BytesPerTile(const fb::OwnershipT& ownership,
                                  std::span<const int64_t> shape,
                                  int element_bytes, int num_tiles) {
  const Layout l = Resolve(ownership, shape);
  std::vector<int64_t> bytes(std::max(num_tiles, 0), 0);
  for (int64_t piece = 0; piece < l.pieces; ++piece) {
    const int64_t held = l.PieceElements(piece) * element_bytes;
    if (held == 0) continue;
    for (int64_t k = 0; k < l.holders; ++k) {
      const int tile = l.Tile(piece, k);
      if (tile < num_tiles) bytes[tile] = held;
    }
  }
  return bytes;
}

}  // namespace tilec::passes
