// Transfers between two ownerships (Intersect, PlanTransfers,
// ForEachLocalCopy, SamePlacement) and what they cost per tile
// (CostOfPlan, EstimateTransferCost, exchange tables).

#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include "formats/target.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"
#include "passes/core/ownership.h"
#include "passes/core/resolved_ownership.h"

namespace tilec::passes {
namespace {

using resolved::ForEachOverlap;
using resolved::ForEachRangeBox;
using resolved::Layout;
using resolved::Resolve;

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

}  // namespace

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

bool SendersReceiveMulticasts(const TransferPlan& plan) {
  std::unordered_set<int> receivers;
  for (const Transfer& t : plan.transfers) {
    receivers.insert(t.destination_tiles.begin(), t.destination_tiles.end());
  }
  for (const Transfer& t : plan.transfers) {
    if (t.destination_tiles.size() > 1 && receivers.count(t.source_tile)) {
      return true;
    }
  }
  return false;
}

TransferCost CostOfPlan(const TransferPlan& plan, const fb::TargetT& target,
                        bool unicast) {
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
    if (!unicast) {
      loads.AddTransfer(t.source_tile, t.destination_tiles, t.bytes);
      continue;
    }
    for (const int& d : t.destination_tiles) {
      loads.AddTransfer(t.source_tile, {&d, 1}, t.bytes);
    }
  }
  for (const LocalCopy& c : plan.local_copies) loads.AddCopy(c.tile, c.bytes);
  TransferCost cost = CostFromLoads(loads, target);
  cost.unicast = unicast;
  return cost;
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
