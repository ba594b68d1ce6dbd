// An ownership resolved against a shape, inside the ownership algebra
// (ownership.cc, ownership_transfers.cc): closed-form balanced splits,
// which tile holds which piece, and walks over the boxes of a flat range,
// of the blocks meeting a box and of the overlaps of two ownerships.

#ifndef TILEC_PASSES_CORE_RESOLVED_OWNERSHIP_H_
#define TILEC_PASSES_CORE_RESOLVED_OWNERSHIP_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "formats/tilec_generated.h"
#include "passes/core/ownership.h"

namespace tilec::passes::resolved {

// A balanced split of `extent` items into `outer` contiguous blocks (the
// first extent % outer blocks have one item more), each split again the
// same way into `inner` parts; parts are numbered block by block. With
// inner = 1 it is the plain balanced split. Closed forms make every lookup
// O(1), which is what keeps the transfer computation cheap.
// Items are numbered from `origin`: an ownership of a view (a sub-box of a
// value) splits the view's extent but names the value's indices.
struct Split {
  int64_t parts = 1;  // outer * inner
  int64_t inner = 1;
  int64_t q = 0;  // extent / outer
  int64_t r = 0;  // extent % outer
  int64_t origin = 0;

  Split() = default;
  Split(int64_t extent, int64_t outer, int64_t sub = 1, int64_t first = 0)
      : parts(outer * sub),
        inner(sub),
        q(extent / outer),
        r(extent % outer),
        origin(first) {}

  int64_t BlockBegin(int64_t o) const { return o * q + std::min(o, r); }
  int64_t BlockSize(int64_t o) const { return q + (o < r ? 1 : 0); }
  int64_t Begin(int64_t k) const {
    if (inner == 1) return origin + BlockBegin(k);
    const int64_t o = k / inner, i = k % inner, size = BlockSize(o);
    return origin + BlockBegin(o) + i * (size / inner) +
           std::min(i, size % inner);
  }
  int64_t End(int64_t k) const { return Begin(k + 1); }
  // The part that holds item x, for origin <= x < origin + extent. It is
  // never one of the empty parts (those exist only where a block or the
  // extent has fewer items than parts, and then come after the non-empty
  // ones).
  int64_t PartOf(int64_t x) const {
    x -= origin;
    const int64_t o = BalancedPart(x, q, r);
    if (inner == 1) return o;
    const int64_t size = BlockSize(o);
    return o * inner +
           BalancedPart(x - BlockBegin(o), size / inner, size % inner);
  }
  int64_t Largest() const {
    const int64_t block = q + (r > 0 ? 1 : 0);
    return block / inner + (block % inner > 0 ? 1 : 0);
  }

 private:
  // The part of x in a balanced split with quotient q and remainder r.
  static int64_t BalancedPart(int64_t x, int64_t q, int64_t r) {
    const int64_t big = r * (q + 1);
    return x < big ? x / (q + 1) : r + (x - big) / q;
  }
};

// An ownership resolved against a shape. A "piece" is what one grid cell
// holds: a block (blocked, held by `holders` = replicas tiles) or a flat
// block (held by one tile). Pieces are numbered row-major over each axis's
// parts whatever the axis order; the order only decides which tile a grid
// cell (piece, replica) lives on.
struct Layout {
  bool flat = false;
  int rank = 0;
  std::array<int64_t, kMaxRank> extent{};
  std::array<int64_t, kMaxRank> pitch{};  // row-major stride in elements
  int64_t elements = 0;
  // Blocked.
  std::array<Split, kMaxRank> axis{};
  std::array<int64_t, kMaxRank> radix{};  // piece index stride per axis
  // Grid position weight of each grid axis along the tile index, from the
  // axis order: the block axes 0..rank-1, with sub_partitions the part
  // axes rank..2*rank-1, then the replicas (axis `replica_axis`). `natural`
  // is the default order without sub_partitions (partitions row-major,
  // replicas fastest), where the position is simply piece * holders +
  // replica.
  std::array<int64_t, 2 * kMaxRank + 1> weight{};
  int replica_axis = 0;
  bool nested = false;
  bool natural = true;
  // Flat.
  Split grains;
  int64_t grain = 1;

  int64_t pieces = 0;
  int64_t holders = 1;
  int64_t first = 0;
  int64_t stride = 1;

  int64_t Position(int64_t piece, int64_t replica) const {
    if (natural) return piece * holders + replica;
    int64_t position = replica * weight[replica_axis];
    for (int a = 0; a < rank; ++a) {
      const int64_t k = (piece / radix[a]) % axis[a].parts;
      if (nested) {
        position += (k / axis[a].inner) * weight[a] +
                    (k % axis[a].inner) * weight[rank + a];
      } else {
        position += k * weight[a];
      }
    }
    return position;
  }
  int Tile(int64_t piece, int64_t replica) const {
    return static_cast<int>(first + Position(piece, replica) * stride);
  }
  // The tile distance between consecutive replicas of a piece.
  int64_t ReplicaStep() const {
    return (natural ? 1 : weight[replica_axis]) * stride;
  }
  // One past the largest tile the ownership assigns: the last grid position
  // in any order.
  int TileLimit() const {
    return static_cast<int>(first + (pieces * holders - 1) * stride + 1);
  }

  // The piece `tile` holds, or -1.
  int64_t PieceOn(int64_t tile) const {
    const int64_t d = tile - first;
    if (d < 0 || d % stride != 0) return -1;
    const int64_t cell = d / stride;
    if (cell >= pieces * holders) return -1;
    if (natural) return cell / holders;
    int64_t piece = 0;
    for (int a = 0; a < rank; ++a) {
      const Split& s = axis[a];
      int64_t k = 0;
      if (nested) {
        k = ((cell / weight[a]) % (s.parts / s.inner)) * s.inner +
            (cell / weight[rank + a]) % s.inner;
      } else {
        k = (cell / weight[a]) % s.parts;
      }
      piece += k * radix[a];
    }
    return piece;
  }

  Box BlockBox(int64_t piece) const {
    Box box;
    box.rank = rank;
    for (int a = 0; a < rank; ++a) {
      const int64_t k = (piece / radix[a]) % axis[a].parts;
      box.begin[a] = axis[a].Begin(k);
      box.end[a] = axis[a].End(k);
    }
    return box;
  }

  // Flat: the flat element range of a piece.
  std::pair<int64_t, int64_t> FlatRange(int64_t piece) const {
    return {std::min(grains.Begin(piece) * grain, elements),
            std::min(grains.End(piece) * grain, elements)};
  }

  int64_t PieceElements(int64_t piece) const {
    if (flat) {
      const auto [lo, hi] = FlatRange(piece);
      return hi - lo;
    }
    return BlockBox(piece).Elements();
  }
};

// True if `order` is empty or the identity permutation.
bool NaturalOrder(const std::vector<int32_t>& order);

// `view`: the ownership covers this sub-box of the value (blocked only);
// null: the whole value of `shape`.
Layout Resolve(const fb::OwnershipT& o, std::span<const int64_t> shape,
               const Box* view = nullptr);

// Cuts the flat range [lo, hi) of the sub-tensor at axes >= k (axes < k
// already fixed in `box`) into boxes, calling fn(box) in row-major order: a
// partial leading row, the whole rows, a partial trailing row; the partial
// rows recurse one axis down. At most 2*(rank-k)-1 boxes.
template <typename Fn>
void RangeBoxes(const Layout& l, int k, int64_t lo, int64_t hi, Box& box,
                Fn& fn) {
  if (k == l.rank - 1) {
    box.begin[k] = lo;
    box.end[k] = hi;
    fn(box);
    return;
  }
  const int64_t pitch = l.pitch[k];
  auto row = [&](int64_t i, int64_t row_lo, int64_t row_hi) {
    box.begin[k] = i;
    box.end[k] = i + 1;
    RangeBoxes(l, k + 1, row_lo, row_hi, box, fn);
  };
  const int64_t first_row = lo / pitch;
  if ((hi - 1) / pitch == first_row) {
    row(first_row, lo - first_row * pitch, hi - first_row * pitch);
    return;
  }
  int64_t whole_begin = first_row;
  if (lo % pitch != 0) {
    row(first_row, lo % pitch, pitch);
    ++whole_begin;
  }
  const int64_t whole_end = hi / pitch;
  if (whole_begin < whole_end) {
    box.begin[k] = whole_begin;
    box.end[k] = whole_end;
    for (int a = k + 1; a < l.rank; ++a) {
      box.begin[a] = 0;
      box.end[a] = l.extent[a];
    }
    fn(box);
  }
  if (hi % pitch != 0) row(whole_end, 0, hi % pitch);
}

template <typename Fn>
void ForEachRangeBox(const Layout& l, int64_t lo, int64_t hi, Fn&& fn) {
  if (lo >= hi) return;
  Box box;
  box.rank = l.rank;
  RangeBoxes(l, 0, lo, hi, box, fn);
}

// Calls fn(piece, block ∩ box) for every block of blocked `l` that meets the
// non-empty `box`: per axis the parts overlapping [begin, end) are the O(1)
// range PartOf(begin)..PartOf(end-1).
template <typename Fn>
void ForEachBlockIn(const Layout& l, const Box& whole_box, Fn&& fn) {
  // Only the part of the box inside the layout's span (a view's).
  Box box = whole_box;
  for (int a = 0; a < l.rank; ++a) {
    box.begin[a] = std::max(box.begin[a], l.axis[a].origin);
    box.end[a] = std::min(box.end[a], l.axis[a].origin + l.extent[a]);
    if (box.begin[a] >= box.end[a]) return;
  }
  std::array<int64_t, kMaxRank> lo{}, hi{}, k{};
  for (int a = 0; a < l.rank; ++a) {
    lo[a] = l.axis[a].PartOf(box.begin[a]);
    hi[a] = l.axis[a].PartOf(box.end[a] - 1);
    k[a] = lo[a];
  }
  Box part;
  part.rank = l.rank;
  while (true) {
    int64_t piece = 0;
    for (int a = 0; a < l.rank; ++a) {
      piece += k[a] * l.radix[a];
      part.begin[a] = std::max(box.begin[a], l.axis[a].Begin(k[a]));
      part.end[a] = std::min(box.end[a], l.axis[a].End(k[a]));
    }
    // Parts that are empty inside a nested split hold nothing.
    if (!part.Empty()) fn(piece, part);
    int a = l.rank - 1;
    while (a >= 0 && k[a] == hi[a]) k[a] = lo[a], --a;
    if (a < 0) return;
    ++k[a];
  }
}

// Calls fn(piece_a, piece_b, box) for every non-empty overlap of a piece of
// `a` and a piece of `b`; the boxes are disjoint and cover every element.
// Order: blocked/blocked in row-major order of the boxes; otherwise by flat
// block (tile order), then row-major within it.
template <typename Fn>
void ForEachOverlap(const Layout& a, const Layout& b, Fn&& fn) {
  if (a.elements == 0) return;
  if (!a.flat && !b.flat) {
    // Per axis, the overlapping (part of a, part of b) pairs by a merge of
    // the two sorted boundary lists; the overlaps are their products.
    struct AxisOverlap {
      int64_t pa, pb, lo, hi;
    };
    std::array<std::vector<AxisOverlap>, kMaxRank> lists;
    for (int ax = 0; ax < a.rank; ++ax) {
      const Split& sa = a.axis[ax];
      const Split& sb = b.axis[ax];
      auto& list = lists[ax];
      list.reserve(sa.parts + sb.parts);
      int64_t i = 0, j = 0;
      while (i < sa.parts && j < sb.parts) {
        const int64_t ea = sa.End(i), eb = sb.End(j);
        const int64_t lo = std::max(sa.Begin(i), sb.Begin(j));
        const int64_t hi = std::min(ea, eb);
        if (lo < hi) list.push_back({i, j, lo, hi});
        if (ea <= eb) ++i;
        if (eb <= ea) ++j;
      }
    }
    std::array<size_t, kMaxRank> k{};
    Box box;
    box.rank = a.rank;
    while (true) {
      int64_t pa = 0, pb = 0;
      for (int ax = 0; ax < a.rank; ++ax) {
        const AxisOverlap& o = lists[ax][k[ax]];
        pa += o.pa * a.radix[ax];
        pb += o.pb * b.radix[ax];
        box.begin[ax] = o.lo;
        box.end[ax] = o.hi;
      }
      fn(pa, pb, box);
      int ax = a.rank - 1;
      while (ax >= 0 && k[ax] + 1 == lists[ax].size()) k[ax] = 0, --ax;
      if (ax < 0) return;
      ++k[ax];
    }
  }
  if (a.flat && b.flat) {
    // Both lists of ranges ascend with the tile index: one sweep. Empty
    // flat blocks only come last.
    int64_t i = 0, j = 0;
    while (i < a.pieces && j < b.pieces) {
      const auto [alo, ahi] = a.FlatRange(i);
      const auto [blo, bhi] = b.FlatRange(j);
      if (alo >= ahi || blo >= bhi) return;
      ForEachRangeBox(a, std::max(alo, blo), std::min(ahi, bhi),
                      [&](const Box& box) { fn(i, j, box); });
      if (ahi <= bhi) ++i;
      if (bhi <= ahi) ++j;
    }
    return;
  }
  const Layout& flat = a.flat ? a : b;
  const Layout& blocked = a.flat ? b : a;
  for (int64_t j = 0; j < flat.pieces; ++j) {
    const auto [lo, hi] = flat.FlatRange(j);
    if (lo >= hi) return;
    ForEachRangeBox(flat, lo, hi, [&](const Box& range_box) {
      ForEachBlockIn(blocked, range_box, [&](int64_t piece, const Box& box) {
        if (a.flat) {
          fn(j, piece, box);
        } else {
          fn(piece, j, box);
        }
      });
    });
  }
}

}  // namespace tilec::passes::resolved

#endif  // TILEC_PASSES_CORE_RESOLVED_OWNERSHIP_H_
