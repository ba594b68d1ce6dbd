#include "passes/core/ownership.h"

#include <glog/logging.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <utility>

#include "formats/basics.h"
#include "formats/print.h"
#include "formats/target.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"

namespace tilec::passes {
namespace {

using fb::OwnershipKind;

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
bool NaturalOrder(const std::vector<int32_t>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

// `view`: the ownership covers this sub-box of the value (blocked only);
// null: the whole value of `shape`.
Layout Resolve(const fb::OwnershipT& o, std::span<const int64_t> shape,
               const Box* view = nullptr) {
  std::array<int64_t, kMaxRank> view_shape{};
  if (view != nullptr) {
    CHECK(o.kind == OwnershipKind::Blocked) << "a view of a flat ownership";
    CHECK_EQ(view->rank, static_cast<int>(shape.size()));
    for (int a = 0; a < view->rank; ++a) {
      CHECK(view->begin[a] >= 0 && view->end[a] <= shape[a]) << FormatBox(*view);
      view_shape[a] = view->end[a] - view->begin[a];
    }
    shape = std::span<const int64_t>(view_shape.data(), shape.size());
  }
  const std::string error =
      ValidateOwnership(o, shape, std::numeric_limits<int>::max());
  CHECK(error.empty()) << error;
  Layout l;
  l.flat = o.kind == OwnershipKind::Flat;
  l.rank = static_cast<int>(shape.size());
  l.elements = 1;
  for (int a = l.rank - 1; a >= 0; --a) {
    l.extent[a] = shape[a];
    l.pitch[a] = l.elements;
    l.elements *= shape[a];
  }
  l.first = o.first_tile;
  l.stride = o.tile_stride;
  if (l.flat) {
    l.grain = o.grain;
    l.grains = Split(ir::CeilDiv(l.elements, l.grain), o.tiles);
    l.pieces = o.tiles;
    l.holders = 1;
  } else {
    l.nested = !o.sub_partitions.empty();
    l.pieces = 1;
    for (int a = l.rank - 1; a >= 0; --a) {
      l.axis[a] = Split(shape[a], o.partitions[a],
                        l.nested ? o.sub_partitions[a] : 1,
                        view ? view->begin[a] : 0);
      l.radix[a] = l.pieces;
      l.pieces *= l.axis[a].parts;
    }
    l.holders = o.replicas;
    l.replica_axis = l.nested ? 2 * l.rank : l.rank;
    l.natural = !l.nested && NaturalOrder(o.axis_order);
    if (!l.natural) {
      // Fastest axis last: weights multiply up from the end of the order.
      std::vector<int32_t> order = o.axis_order;
      if (order.empty()) {
        for (int g = 0; g <= l.replica_axis; ++g) order.push_back(g);
      }
      auto extent_of = [&](int g) -> int64_t {
        if (g == l.replica_axis) return l.holders;
        if (g < l.rank) return o.partitions[g];
        return o.sub_partitions[g - l.rank];
      };
      int64_t w = 1;
      for (int j = static_cast<int>(order.size()) - 1; j >= 0; --j) {
        l.weight[order[j]] = w;
        w *= extent_of(order[j]);
      }
    }
  }
  return l;
}

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

// Per-tile exchange and copy load, indexed by tile.
struct Loads {
  // `target`: local copies are priced by its copy kernel's formula, one call
  // per box (null: not priced).
  explicit Loads(int tiles, const fb::TargetT* target = nullptr)
      : sent(tiles),
        received(tiles),
        fragments(tiles),
        copy_boxes(tiles),
        copy_bytes(tiles),
        copy_cycles(tiles) {
    if (target == nullptr) return;
    for (const auto& f : target->kernels) {
      if (f && f->kernel == ir::formula::kCopy) copy_formula = f.get();
    }
    CHECK(copy_formula != nullptr) << "target " << target->name
                                   << " has no copy formula";
  }
  std::vector<int64_t> sent, received, fragments, copy_boxes, copy_bytes,
      copy_cycles;
  const fb::KernelFormulaT* copy_formula = nullptr;
  int64_t transfers = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t local_copy_bytes = 0;

  void AddTransfer(int source, std::span<const int> destinations,
                   int64_t bytes) {
    ++transfers;
    bytes_sent += bytes;
    sent[source] += bytes;
    ++fragments[source];
    for (int d : destinations) {
      received[d] += bytes;
      ++fragments[d];
      bytes_received += bytes;
    }
  }
  void AddCopy(int tile, int64_t bytes) {
    ++copy_boxes[tile];
    copy_bytes[tile] += bytes;
    local_copy_bytes += bytes;
    if (copy_formula == nullptr) return;
    const kernels::CostVar vars[] = {{"B", bytes}};
    StatusOr<double> c = kernels::EvaluateFormula(*copy_formula, vars);
    CHECK(c.ok()) << c.status().message();
    copy_cycles[tile] += kernels::RoundUpCycles(*c);
  }
};

// What one source replica has sent so far in a plan.
struct ReplicaLoad {
  int64_t bytes = 0;
  int64_t transfers = 0;
  int64_t replica = 0;
};

bool Heavier(const ReplicaLoad& x, const ReplicaLoad& y) {
  return std::tie(x.bytes, x.transfers, x.replica) >
         std::tie(y.bytes, y.transfers, y.replica);
}

// The transfer computation shared by PlanTransfers and EstimateTransferCost:
// calls on_transfer(source, box, destinations, elements, bytes) and
// on_copy(tile, box, elements, bytes), and adds both to `loads`.
template <typename OnTransfer, typename OnCopy>
void WalkTransfers(const Layout& src, const Layout& dst, int element_bytes,
                   Loads& loads, OnTransfer&& on_transfer, OnCopy&& on_copy) {
  CHECK_GT(element_bytes, 0) << "element_bytes";
  // One min-heap of replica loads per source block, as slices of one
  // vector, so that picking the least-loaded replica is O(log replicas)
  // (a fully replicated source has up to 1,472). Ascending replica indices
  // with zero loads already form a valid heap.
  std::vector<ReplicaLoad> replica_heaps;
  if (src.holders > 1) {
    replica_heaps.resize(src.pieces * src.holders);
    for (size_t i = 0; i < replica_heaps.size(); ++i) {
      replica_heaps[i].replica = static_cast<int64_t>(i) % src.holders;
    }
  }
  std::vector<int> destinations;
  destinations.reserve(dst.holders);
  ForEachOverlap(src, dst, [&](int64_t pa, int64_t pb, const Box& box) {
    const int64_t elements = box.Elements();
    const int64_t bytes = elements * element_bytes;
    destinations.clear();
    // An unreplicated source piece lives on one tile: only that tile can
    // hold the box already (no PieceOn per destination).
    const int only_holder = src.holders == 1 ? src.Tile(pa, 0) : -1;
    // Replicas of a piece are evenly spaced tiles: the position is linear in
    // the replica index.
    const int first_holder = dst.Tile(pb, 0);
    const int64_t holder_step = dst.ReplicaStep();
    for (int64_t k = 0; k < dst.holders; ++k) {
      const int tile = static_cast<int>(first_holder + k * holder_step);
      if (only_holder >= 0 ? tile == only_holder : src.PieceOn(tile) == pa) {
        loads.AddCopy(tile, bytes);
        on_copy(tile, box, elements, bytes);
      } else {
        destinations.push_back(tile);
      }
    }
    if (destinations.empty()) return;
    int source = src.Tile(pa, 0);
    if (src.holders > 1) {
      const auto first = replica_heaps.begin() + pa * src.holders;
      const auto last = first + src.holders;
      std::pop_heap(first, last, Heavier);
      ReplicaLoad& lightest = *(last - 1);
      source = src.Tile(pa, lightest.replica);
      lightest.bytes += bytes;
      ++lightest.transfers;
      std::push_heap(first, last, Heavier);
    }
    loads.AddTransfer(source, destinations, bytes);
    on_transfer(source, box, destinations, elements, bytes);
  });
}

int TileLimit(const Layout& a, const Layout& b) {
  return std::max(a.TileLimit(), b.TileLimit());
}

TransferCost CostFromLoads(const Loads& loads, const fb::TargetT& target) {
  CHECK_GT(target.exchange_bytes_per_cycle, 0) << "target " << target.name;
  const kernels::ExchangeModel exchange =
      kernels::ExchangeModel::FromTarget(target);
  TransferCost cost;
  cost.transfers = loads.transfers;
  cost.bytes_sent = loads.bytes_sent;
  cost.bytes_received = loads.bytes_received;
  cost.local_copy_bytes = loads.local_copy_bytes;
  int64_t slowest_exchange = -1;
  for (size_t t = 0; t < loads.sent.size(); ++t) {
    cost.max_bytes_sent = std::max(cost.max_bytes_sent, loads.sent[t]);
    cost.max_bytes_received =
        std::max(cost.max_bytes_received, loads.received[t]);
    cost.max_fragments = std::max(cost.max_fragments, loads.fragments[t]);
    if (loads.fragments[t] > 0) {
      const int64_t cycles = kernels::EndpointTileCycles(
          exchange, loads.sent[t], loads.received[t], loads.fragments[t]);
      if (cycles > slowest_exchange) {
        slowest_exchange = cycles;
        cost.exchange_bottleneck_tile = static_cast<int>(t);
      }
    }
    if (loads.copy_boxes[t] > 0) {
      const int64_t cycles = loads.copy_cycles[t];
      if (cycles > cost.local_copy_cycles || cost.copy_bottleneck_tile < 0) {
        cost.local_copy_cycles = cycles;
        cost.copy_bottleneck_tile = static_cast<int>(t);
      }
    }
  }
  if (loads.transfers > 0) cost.bound_cycles = slowest_exchange;
  return cost;
}

std::string Join(const std::vector<int32_t>& v, const char* separator) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += separator;
    s += std::to_string(v[i]);
  }
  return s;
}

// ------------------------------------------------------------- text parser

class OwnershipParser {
 public:
  explicit OwnershipParser(std::string_view text) : text_(text) {}

  std::optional<fb::OwnershipT> Parse() {
    fb::OwnershipT o;
    std::string_view kind = Word();
    if (kind == "blocked") {
      o.kind = OwnershipKind::Blocked;
    } else if (kind == "flat") {
      o.kind = OwnershipKind::Flat;
    } else {
      return Fail(kind.empty()
                      ? "expected 'blocked' or 'flat'"
                      : "unknown ownership kind '" + std::string(kind) + "'");
    }
    if (!Expect('(')) return std::nullopt;
    bool need_comma = false;
    if (o.kind == OwnershipKind::Blocked) {
      do {
        if (o.partitions.size() == kMaxRank) {
          return Fail("more than " + std::to_string(kMaxRank) + " axes");
        }
        int64_t parts;
        if (!Number(&parts)) return std::nullopt;
        if (parts < 1) return Fail("a partition count must be at least 1");
        o.partitions.push_back(static_cast<int32_t>(parts));
      } while (Accept('x'));
      need_comma = true;
    }
    bool seen_grain = false, seen_tiles = false, seen_rep = false,
         seen_first = false, seen_stride = false, seen_order = false;
    while (!Accept(')')) {
      if (need_comma && !Expect(',')) return std::nullopt;
      need_comma = true;
      const size_t key_at = Position();
      const std::string_view key = Word();
      if (key == "order" && o.kind == OwnershipKind::Blocked) {
        if (seen_order) {
          pos_ = key_at;
          return Fail("option 'order' given twice");
        }
        seen_order = true;
        if (!Expect('=')) return std::nullopt;
        // A comma-separated list of axes. Commas also separate options, so a
        // comma followed by a digit continues the list and one followed by
        // anything else ends it (and stands for the option separator).
        while (true) {
          if (o.axis_order.size() > 2 * kMaxRank) {
            return Fail("order lists more than " +
                        std::to_string(2 * kMaxRank + 1) + " axes");
          }
          int64_t axis;
          if (!Number(&axis)) return std::nullopt;
          o.axis_order.push_back(static_cast<int32_t>(axis));
          const size_t before = pos_;
          if (!Accept(',')) break;
          if (Position() < text_.size() && text_[pos_] >= '0' &&
              text_[pos_] <= '9') {
            continue;
          }
          pos_ = before;  // the separator of the next option
          break;
        }
        continue;
      }
      if (key == "sub" && o.kind == OwnershipKind::Blocked) {
        if (!o.sub_partitions.empty()) {
          pos_ = key_at;
          return Fail("option 'sub' given twice");
        }
        if (!Expect('=')) return std::nullopt;
        do {
          if (o.sub_partitions.size() == kMaxRank) {
            return Fail("more than " + std::to_string(kMaxRank) + " axes");
          }
          int64_t parts;
          if (!Number(&parts)) return std::nullopt;
          if (parts < 1) return Fail("a sub-partition count must be at least 1");
          o.sub_partitions.push_back(static_cast<int32_t>(parts));
        } while (Accept('x'));
        continue;
      }
      int32_t* field = nullptr;
      bool* seen = nullptr;
      int64_t minimum = 1;
      if (key == "rep" && o.kind == OwnershipKind::Blocked) {
        field = &o.replicas, seen = &seen_rep;
      } else if (key == "grain" && o.kind == OwnershipKind::Flat) {
        field = &o.grain, seen = &seen_grain;
      } else if (key == "tiles" && o.kind == OwnershipKind::Flat) {
        field = &o.tiles, seen = &seen_tiles;
      } else if (key == "first") {
        field = &o.first_tile, seen = &seen_first, minimum = 0;
      } else if (key == "stride") {
        field = &o.tile_stride, seen = &seen_stride;
      } else {
        pos_ = key_at;
        if (key.empty()) return Fail("expected an option name");
        return Fail("unknown option '" + std::string(key) + "' for " +
                    (o.kind == OwnershipKind::Blocked ? "blocked" : "flat") +
                    " (options: " +
                    (o.kind == OwnershipKind::Blocked
                         ? "sub, rep, order, first, stride"
                         : "grain, tiles, first, stride") +
                    ")");
      }
      if (*seen) {
        pos_ = key_at;
        return Fail("option '" + std::string(key) + "' given twice");
      }
      *seen = true;
      if (!Expect('=')) return std::nullopt;
      const size_t value_at = Position();
      int64_t value;
      if (!Number(&value)) return std::nullopt;
      if (value < minimum) {
        pos_ = value_at;
        return Fail(std::string(key) + " must be at least " +
                    std::to_string(minimum));
      }
      *field = static_cast<int32_t>(value);
    }
    if (o.kind == OwnershipKind::Flat && (!seen_grain || !seen_tiles)) {
      return Fail(std::string("flat needs ") + (seen_grain ? "" : "grain=") +
                  (!seen_grain && !seen_tiles ? " and " : "") +
                  (seen_tiles ? "" : "tiles="));
    }
    if (Position() != text_.size()) {
      return Fail("unexpected text after the closing ')'");
    }
    if (!o.sub_partitions.empty() &&
        o.sub_partitions.size() != o.partitions.size()) {
      return Fail("sub= needs one count per axis");
    }
    if (!o.axis_order.empty()) {
      const size_t replicas_axis = o.sub_partitions.empty()
                                       ? o.partitions.size()
                                       : 2 * o.partitions.size();
      std::vector<int32_t> sorted = o.axis_order;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) {
        if (sorted.size() != replicas_axis + 1 ||
            sorted[i] != static_cast<int32_t>(i)) {
          return Fail("order must list each grid axis 0.." +
                      std::to_string(replicas_axis) + " once (axis " +
                      std::to_string(replicas_axis) + " = replicas)");
        }
      }
    }
    return o;
  }

  const std::string& error() const { return error_; }

 private:
  size_t Position() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t'))
      ++pos_;
    return pos_;
  }
  std::string_view Word() {
    const size_t begin = Position();
    while (pos_ < text_.size() &&
           ((text_[pos_] >= 'a' && text_[pos_] <= 'z') || text_[pos_] == '_'))
      ++pos_;
    return text_.substr(begin, pos_ - begin);
  }
  bool Accept(char c) {
    if (Position() < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Expect(char c) {
    if (Accept(c)) return true;
    Fail(std::string("expected '") + c + "'");
    return false;
  }
  // A decimal integer in [0, INT32_MAX].
  bool Number(int64_t* value) {
    const size_t begin = Position();
    size_t end = begin;
    while (end < text_.size() && text_[end] >= '0' && text_[end] <= '9') ++end;
    if (end == begin) {
      Fail("expected a non-negative integer");
      return false;
    }
    const auto [ptr, ec] =
        std::from_chars(text_.data() + begin, text_.data() + end, *value);
    if (ec != std::errc() || *value > std::numeric_limits<int32_t>::max()) {
      Fail("number too large");
      return false;
    }
    pos_ = end;
    return true;
  }
  std::nullopt_t Fail(const std::string& what) {
    if (error_.empty()) {
      error_ = "bad ownership \"" + std::string(text_) + "\": " + what +
               " at offset " + std::to_string(pos_);
    }
    return std::nullopt;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

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
  OwnershipParser parser(text);
  std::optional<fb::OwnershipT> o = parser.Parse();
  if (!o && error != nullptr) *error = parser.error();
  return o;
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

std::vector<Overlap> Intersect(const fb::OwnershipT& a, const fb::OwnershipT& b,
                               std::span<const int64_t> shape) {
  const Layout la = Resolve(a, shape);
  const Layout lb = Resolve(b, shape);
  struct PieceOverlap {
    int64_t pa, pb;
    Box box;
  };
  std::vector<PieceOverlap> pieces;
  ForEachOverlap(la, lb, [&](int64_t pa, int64_t pb, const Box& box) {
    pieces.push_back({pa, pb, box});
  });
  // Tiles ascend with (piece, replica), so sorting the few piece overlaps
  // and expanding the replicas in nested order yields the output sorted by
  // (a_tile, b_tile, box) without sorting the (much longer) output.
  std::sort(pieces.begin(), pieces.end(),
            [](const PieceOverlap& x, const PieceOverlap& y) {
              return std::tie(x.pa, x.pb, x.box.begin) <
                     std::tie(y.pa, y.pb, y.box.begin);
            });
  std::vector<Overlap> overlaps;
  overlaps.reserve(pieces.size() * la.holders * lb.holders);
  for (size_t i = 0, j = 0; i < pieces.size(); i = j) {
    while (j < pieces.size() && pieces[j].pa == pieces[i].pa) ++j;
    for (int64_t ka = 0; ka < la.holders; ++ka) {
      const int a_tile = la.Tile(pieces[i].pa, ka);
      for (size_t g = i, h = i; g < j; g = h) {
        while (h < j && pieces[h].pb == pieces[g].pb) ++h;
        for (int64_t kb = 0; kb < lb.holders; ++kb) {
          const int b_tile = lb.Tile(pieces[g].pb, kb);
          for (size_t m = g; m < h; ++m) {
            overlaps.push_back({a_tile, b_tile, pieces[m].box});
          }
        }
      }
    }
  }
  if (!la.natural || !lb.natural) {
    // The nested expansion above is sorted only when tiles ascend with
    // (piece, replica).
    std::sort(overlaps.begin(), overlaps.end(),
              [](const Overlap& x, const Overlap& y) {
                return std::tie(x.a_tile, x.b_tile, x.box.begin) <
                       std::tie(y.a_tile, y.b_tile, y.box.begin);
              });
  }
  return overlaps;
}

TransferPlan PlanTransfers(const fb::OwnershipT& source,
                           const fb::OwnershipT& destination,
                           std::span<const int64_t> shape, int element_bytes,
                           const Box* destination_view) {
  const Layout src = Resolve(source, shape);
  const Layout dst = Resolve(destination, shape, destination_view);
  Loads loads(TileLimit(src, dst));
  TransferPlan plan;
  WalkTransfers(
      src, dst, element_bytes, loads,
      [&](int tile, const Box& box, const std::vector<int>& destinations,
          int64_t elements, int64_t bytes) {
        plan.transfers.push_back({tile, box, destinations, elements, bytes});
      },
      [&](int tile, const Box& box, int64_t elements, int64_t bytes) {
        plan.local_copies.push_back({tile, box, elements, bytes});
      });
  // Destinations are pushed in replica order, which ascends with the tile.
  std::sort(plan.transfers.begin(), plan.transfers.end(),
            [](const Transfer& x, const Transfer& y) {
              return std::tie(x.source_tile, x.box.begin) <
                     std::tie(y.source_tile, y.box.begin);
            });
  std::sort(plan.local_copies.begin(), plan.local_copies.end(),
            [](const LocalCopy& x, const LocalCopy& y) {
              return std::tie(x.tile, x.box.begin) <
                     std::tie(y.tile, y.box.begin);
            });
  return plan;
}

void ForEachLocalCopy(const fb::OwnershipT& source,
                      const fb::OwnershipT& destination,
                      std::span<const int64_t> shape,
                      const std::function<void(int tile, const Box& box)>& fn,
                      const Box* destination_view) {
  const Layout src = Resolve(source, shape);
  const Layout dst = Resolve(destination, shape, destination_view);
  if (src.elements == 0) return;
  std::vector<Box> boxes;
  const int limit = TileLimit(src, dst);
  const int first = static_cast<int>(std::min(src.first, dst.first));
  for (int tile = first; tile < limit; ++tile) {
    const int64_t pa = src.PieceOn(tile), pb = dst.PieceOn(tile);
    if (pa < 0 || pb < 0) continue;
    // The overlap of pieces pa and pb cut as ForEachOverlap cuts it.
    boxes.clear();
    if (!src.flat && !dst.flat) {
      const Box a = src.BlockBox(pa), b = dst.BlockBox(pb);
      Box box;
      box.rank = src.rank;
      bool empty = false;
      for (int ax = 0; ax < src.rank; ++ax) {
        box.begin[ax] = std::max(a.begin[ax], b.begin[ax]);
        box.end[ax] = std::min(a.end[ax], b.end[ax]);
        empty = empty || box.begin[ax] >= box.end[ax];
      }
      if (!empty) boxes.push_back(box);
    } else if (src.flat && dst.flat) {
      const auto [alo, ahi] = src.FlatRange(pa);
      const auto [blo, bhi] = dst.FlatRange(pb);
      ForEachRangeBox(src, std::max(alo, blo), std::min(ahi, bhi),
                      [&](const Box& box) { boxes.push_back(box); });
    } else {
      const Layout& flat = src.flat ? src : dst;
      const Layout& blocked = src.flat ? dst : src;
      const auto [lo, hi] = flat.FlatRange(src.flat ? pa : pb);
      const Box block = blocked.BlockBox(src.flat ? pb : pa);
      ForEachRangeBox(flat, lo, hi, [&](const Box& range_box) {
        Box box;
        box.rank = flat.rank;
        for (int ax = 0; ax < flat.rank; ++ax) {
          box.begin[ax] = std::max(range_box.begin[ax], block.begin[ax]);
          box.end[ax] = std::min(range_box.end[ax], block.end[ax]);
          if (box.begin[ax] >= box.end[ax]) return;
        }
        boxes.push_back(box);
      });
    }
    std::sort(boxes.begin(), boxes.end(), [](const Box& x, const Box& y) {
      return x.begin < y.begin;
    });
    for (const Box& box : boxes) fn(tile, box);
  }
}

TileCodeBytes AddTileCode(const TileCodeBytes& a, const TileCodeBytes& b,
                          int64_t extra) {
  if (a == nullptr && b == nullptr) return nullptr;
  const size_t tiles = (a != nullptr ? a : b)->size();
  auto sum = std::make_shared<std::vector<int64_t>>(tiles, 0);
  for (size_t t = 0; t < tiles; ++t) {
    const int64_t x = a != nullptr ? (*a)[t] : 0;
    const int64_t y = b != nullptr ? (*b)[t] : 0;
    (*sum)[t] = x + y + (y > 0 ? extra : 0);
  }
  return sum;
}

int64_t MaxTileCode(const TileCodeBytes& code) {
  if (code == nullptr || code->empty()) return 0;
  return *std::max_element(code->begin(), code->end());
}

TransferCost CostOfPlan(const TransferPlan& plan, const fb::TargetT& target) {
  int tiles = 0;
  for (const Transfer& t : plan.transfers) {
    tiles = std::max(tiles, t.source_tile + 1);
    for (int d : t.destination_tiles) tiles = std::max(tiles, d + 1);
  }
  for (const LocalCopy& c : plan.local_copies) {
    tiles = std::max(tiles, c.tile + 1);
  }
  Loads loads(tiles, &target);
  for (const Transfer& t : plan.transfers) {
    loads.AddTransfer(t.source_tile, t.destination_tiles, t.bytes);
  }
  for (const LocalCopy& c : plan.local_copies) loads.AddCopy(c.tile, c.bytes);
  return CostFromLoads(loads, target);
}

TransferCost EstimateTransferCost(const fb::OwnershipT& source,
                                  const fb::OwnershipT& destination,
                                  std::span<const int64_t> shape,
                                  int element_bytes, const fb::TargetT& target,
                                  const Box* destination_view) {
  const Layout src = Resolve(source, shape);
  const Layout dst = Resolve(destination, shape, destination_view);
  Loads loads(TileLimit(src, dst), &target);
  WalkTransfers(
      src, dst, element_bytes, loads,
      [](int, const Box&, const std::vector<int>&, int64_t, int64_t) {},
      [](int, const Box&, int64_t, int64_t) {});
  return CostFromLoads(loads, target);
}

bool SamePlacement(const fb::OwnershipT& a, const fb::OwnershipT& b,
                   std::span<const int64_t> shape) {
  const Layout la = Resolve(a, shape);
  const Layout lb = Resolve(b, shape);
  // Every element b puts on a tile is local (b_t within a_t) and the counts
  // agree on every tile (so a_t = b_t). The counts first: they differ for
  // most pairs and cost one pass over the tiles.
  for (int t = 0; t < TileLimit(la, lb); ++t) {
    const int64_t pa = la.PieceOn(t), pb = lb.PieceOn(t);
    const int64_t na = pa < 0 ? 0 : la.PieceElements(pa);
    const int64_t nb = pb < 0 ? 0 : lb.PieceElements(pb);
    if (na != nb) return false;
  }
  Loads loads(TileLimit(la, lb));
  WalkTransfers(
      la, lb, 1, loads,
      [](int, const Box&, const std::vector<int>&, int64_t, int64_t) {},
      [](int, const Box&, int64_t, int64_t) {});
  if (loads.transfers > 0) return false;
  for (int t = 0; t < TileLimit(la, lb); ++t) {
    const int64_t pa = la.PieceOn(t), pb = lb.PieceOn(t);
    const int64_t na = pa < 0 ? 0 : la.PieceElements(pa);
    const int64_t nb = pb < 0 ? 0 : lb.PieceElements(pb);
    if (na != nb) return false;
  }
  return true;
}

}  // namespace tilec::passes
