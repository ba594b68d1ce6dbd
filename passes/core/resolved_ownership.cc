#include "passes/core/resolved_ownership.h"

#include <glog/logging.h>

#include <limits>
#include <string>

namespace tilec::passes::resolved {

using fb::OwnershipKind;

bool NaturalOrder(const std::vector<int32_t>& order) {
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}

Layout Resolve(const fb::OwnershipT& o, std::span<const int64_t> shape,
               const Box* view) {
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

}  // namespace tilec::passes::resolved
