#include "passes/lower/allocate.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>

#include "formats/target.h"

namespace tilec::lower {

MemoryMap MemoryMap::FromTarget(const fb::TargetT& t) {
  MemoryMap m;
  m.capacity = t.sram_bytes;
  m.base = ir::CodeRegionBytes(t, t.runtime_code_bytes);
  m.element_bytes = std::max(1, t.element_bytes);
  m.interleaved_element_bytes = std::max(1, t.interleaved_element_bytes);
  m.standard_elements = std::max(0, t.standard_elements);
  m.standard_end =
      std::min<int64_t>(m.capacity, m.standard_elements * m.element_bytes);
  m.alignment = std::max(1, t.alignment);
  return m;
}

int64_t MemoryMap::ElementOf(int64_t addr) const {
  if (addr < standard_end) return addr / element_bytes;
  return standard_elements + (addr - standard_end) / interleaved_element_bytes;
}

int64_t MemoryMap::ElementStart(int64_t element) const {
  if (element < standard_elements) return element * element_bytes;
  return standard_end + (element - standard_elements) * interleaved_element_bytes;
}

namespace {

template <typename T>
void SortIfNeeded(std::vector<T>* v) {
  if (!std::is_sorted(v->begin(), v->end())) std::sort(v->begin(), v->end());
}

// One tile's first-fit placement in `order`: the state AllocateTile's
// phases share.
class TileAllocator {
 public:
  TileAllocator(const MemoryMap& map, const std::vector<AllocBuffer>& buffers,
                const std::vector<AllocRule>& rules, AllocResult* result,
                int64_t floor, AllocOrder order)
      : map_(map),
        buffers_(buffers),
        rules_(rules),
        result_(result),
        floor_(floor),
        order_(order),
        n_(buffers.size()),
        partners_(n_),
        size_(n_),
        placed_(n_, false),
        dropped_(rules.size(), false) {
    result_->offsets.assign(n_, 0);
    result_->soft_dropped.clear();
    result_->peak = 0;
    for (size_t i = 0; i < n_; ++i) size_[i] = map_.AlignUp(buffers_[i].bytes);
    IndexRules();
  }

  bool Run(AllocFailure* failure) {
    for (size_t i : PlacementOrder()) {
      if (order_ == AllocOrder::kLifetime) {
        RetireBefore(buffers_[i].start);
      } else {
        OverlappingOnly(i);
      }
      IndexLive();
      std::optional<int64_t> at = Place(i, /*soft=*/true);
      if (!at) {
        at = Place(i, /*soft=*/false);
        if (at) DropClashingSoftRules(i, *at);
      }
      if (!at) {
        DescribeFailure(i, failure);
        return false;
      }
      result_->offsets[i] = *at;
      placed_[i] = true;
      Insert(i, order_ == AllocOrder::kLifetime ? &active_ : &by_address_);
      result_->peak = std::max(result_->peak, *at + size_[i]);
    }
    std::sort(result_->soft_dropped.begin(), result_->soft_dropped.end());
    return true;
  }

 private:
  // Rules by buffer position: (other position, rule index).
  void IndexRules() {
    std::map<int, size_t> index;  // id -> position
    for (size_t i = 0; i < n_; ++i) index[buffers_[i].id] = i;
    for (size_t r = 0; r < rules_.size(); ++r) {
      auto a = index.find(rules_[r].a), b = index.find(rules_[r].b);
      if (a == index.end() || b == index.end() || a->second == b->second) continue;
      partners_[a->second].push_back({b->second, r});
      partners_[b->second].push_back({a->second, r});
    }
  }

  // Lifetime order: by start slot, larger first among equal starts.
  // Largest first: data from before the program first, then by size, then
  // by start slot.
  std::vector<size_t> PlacementOrder() const {
    std::vector<size_t> order(n_);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const AllocBuffer& a = buffers_[x];
      const AllocBuffer& b = buffers_[y];
      if (order_ == AllocOrder::kLargestFirst) {
        if ((a.start < 0) != (b.start < 0)) return a.start < 0;
        if (size_[x] != size_[y]) return size_[x] > size_[y];
        return a.start < b.start;
      }
      if (a.start != b.start) return a.start < b.start;
      return size_[x] > size_[y];
    });
    return order;
  }

  // In lifetime order every placed buffer starts no later than the one
  // being placed: those whose lifetime ended before `start` no longer
  // block.
  void RetireBefore(int64_t start) {
    active_.erase(std::remove_if(active_.begin(), active_.end(),
                                 [&](size_t j) { return buffers_[j].end < start; }),
                  active_.end());
  }

  // In any other order the placed buffers that block `i` are those whose
  // lifetimes overlap its own.
  void OverlappingOnly(size_t i) {
    active_.clear();
    for (size_t j : by_address_) {
      if (buffers_[j].start <= buffers_[i].end &&
          buffers_[i].start <= buffers_[j].end) {
        active_.push_back(j);
      }
    }
  }

  // Adds placed buffer `i` to `list`, kept in address order (by start,
  // then end, then placing order): the live extents and the addresses
  // beside them then come sorted (buffers live at once do not overlap),
  // and IndexLive and Candidates need not sort them.
  void Insert(size_t i, std::vector<size_t>* list) const {
    auto extent = [&](size_t j) {
      return std::pair(result_->offsets[j], result_->offsets[j] + size_[j]);
    };
    list->insert(std::upper_bound(
                     list->begin(), list->end(), i,
                     [&](size_t a, size_t b) { return extent(a) < extent(b); }),
                 i);
  }

  // The live buffers' extents by start (empty buffers never overlap), with
  // the furthest end among each prefix: Fits tries many addresses.
  void IndexLive() {
    std::vector<std::pair<int64_t, int64_t>> extents;
    for (size_t j : active_) {
      if (size_[j] > 0) {
        extents.push_back({result_->offsets[j], result_->offsets[j] + size_[j]});
      }
    }
    SortIfNeeded(&extents);
    live_starts_.clear();
    live_max_end_.clear();
    for (const auto& [start, end] : extents) {
      live_starts_.push_back(start);
      live_max_end_.push_back(
          std::max(end, live_max_end_.empty() ? end : live_max_end_.back()));
    }
  }

  // Whether [at, at + size) overlaps a live buffer: those starting before
  // its end, one of which ends after `at`. `*before` counts those for the
  // previous address asked: TryPlace asks in address order (up or down), so
  // the count moves a few places each time, not a search's.
  bool OverlapsLive(int64_t at, int64_t size, size_t* before) const {
    if (size == 0) return false;
    const int64_t end = at + size;
    size_t b = *before;
    while (b < live_starts_.size() && live_starts_[b] < end) ++b;
    while (b > 0 && live_starts_[b - 1] >= end) --b;
    *before = b;
    return b > 0 && live_max_end_[b - 1] > at;
  }

  int64_t LowestAddress(size_t i) const {
    return buffers_[i].interleaved
               ? map_.AlignUp(std::max(map_.standard_end, map_.base))
               : map_.base;
  }

  bool ElementClash(size_t i, int64_t at, size_t j) const {
    if (size_[i] == 0 || buffers_[j].bytes == 0) return false;
    const int64_t a0 = map_.ElementOf(at), a1 = map_.ElementOf(at + buffers_[i].bytes - 1);
    const int64_t b0 = map_.ElementOf(result_->offsets[j]);
    const int64_t b1 = map_.ElementOf(result_->offsets[j] + buffers_[j].bytes - 1);
    return a0 <= b1 && b0 <= a1;
  }

  bool RuleApplies(size_t j, size_t r, bool soft) const {
    return placed_[j] && (rules_[r].hard || soft);
  }

  // With a floor, data from before the program is packed downwards from
  // the end of standard memory, no lower than the floor, then upwards
  // from the start of interleaved memory: the bottom of standard memory
  // stays free for buffers that must not share the interleaved element
  // of a GEMM's output (its staged left operand).
  std::optional<int64_t> Place(size_t i, bool soft) const {
    const AllocBuffer& buf = buffers_[i];
    const bool around_boundary = floor_ >= 0 && buf.start < 0 && !buf.interleaved;
    for (int pass = around_boundary ? 0 : 2; pass <= 2; ++pass) {
      if (std::optional<int64_t> at = TryPlace(i, soft, pass)) return at;
    }
    return std::nullopt;
  }

  // Pass 0: downwards from the end of standard memory; pass 1: upwards
  // from interleaved memory; pass 2: upwards from the lowest address.
  std::optional<int64_t> TryPlace(size_t i, bool soft, int pass) const {
    int64_t min_at = LowestAddress(i), max_end = map_.capacity;
    if (pass == 0) {
      min_at = std::max(floor_, map_.base);
      max_end = map_.standard_end;
    } else if (pass == 1) {
      min_at = map_.AlignUp(map_.standard_end);
    }
    size_t live_before = 0;
    for (int64_t at : Candidates(i, soft, pass, min_at)) {
      if (at < min_at) continue;
      if (at + size_[i] > max_end) {
        if (pass == 0) continue;
        break;
      }
      if (Fits(i, at, soft, &live_before)) return at;
    }
    return std::nullopt;
  }

  // Addresses worth trying: the region's edge, the edges of live buffers
  // and the first element after each ruled partner; in trying order. The
  // list is the allocator's own, valid until the next call.
  const std::vector<int64_t>& Candidates(size_t i, bool soft, int pass,
                                         int64_t min_at) const {
    // Beside each live buffer (in address order, so mostly sorted), and a
    // few others.
    std::vector<int64_t>& beside = beside_;
    std::vector<int64_t>& others = others_;
    beside.clear();
    others.clear();
    if (pass == 0) {
      others.push_back(map_.AlignDown(map_.standard_end - size_[i]));
      for (size_t j : active_) {
        beside.push_back(map_.AlignDown(result_->offsets[j] - size_[i]));
      }
    } else {
      others.push_back(min_at);
      for (size_t j : active_) {
        beside.push_back(map_.AlignUp(result_->offsets[j] + size_[j]));
      }
      for (const auto& [j, r] : partners_[i]) {
        if (!RuleApplies(j, r, soft)) continue;
        const int64_t last = map_.ElementOf(result_->offsets[j] + std::max<int64_t>(buffers_[j].bytes, 1) - 1);
        others.push_back(map_.AlignUp(map_.ElementStart(last + 1)));
      }
    }
    SortIfNeeded(&beside);
    SortIfNeeded(&others);
    std::vector<int64_t>& candidates = candidates_;
    candidates.resize(beside.size() + others.size());
    std::merge(beside.begin(), beside.end(), others.begin(), others.end(),
               candidates.begin());
    candidates.erase(std::unique(candidates.begin(), candidates.end()),
                     candidates.end());
    if (pass == 0) std::reverse(candidates.begin(), candidates.end());
    return candidates;
  }

  bool Fits(size_t i, int64_t at, bool soft, size_t* live_before) const {
    if (OverlapsLive(at, size_[i], live_before)) return false;
    for (const auto& [j, r] : partners_[i]) {
      if (RuleApplies(j, r, soft) && ElementClash(i, at, j)) return false;
    }
    return true;
  }

  // Placed ignoring soft rules: record each soft rule the place breaks.
  void DropClashingSoftRules(size_t i, int64_t at) {
    for (const auto& [j, r] : partners_[i]) {
      if (placed_[j] && !rules_[r].hard && !dropped_[r] && ElementClash(i, at, j)) {
        dropped_[r] = true;
        result_->soft_dropped.push_back(static_cast<int>(r));
      }
    }
  }

  // What was live and how fragmented the region was when `i` did not fit.
  void DescribeFailure(size_t i, AllocFailure* failure) const {
    const AllocBuffer& buf = buffers_[i];
    const int64_t lo = LowestAddress(i);
    failure->buffer = buf.id;
    failure->bytes = size_[i];
    failure->interleaved = buf.interleaved;
    failure->slot = buf.start;
    failure->live.clear();
    failure->live_bytes = 0;
    std::vector<std::pair<int64_t, int64_t>> used;
    for (size_t j : active_) {
      failure->live.push_back(buffers_[j].id);
      failure->live_bytes += size_[j];
      used.push_back({result_->offsets[j], result_->offsets[j] + size_[j]});
    }
    std::sort(used.begin(), used.end());
    failure->region_bytes = map_.capacity - lo;
    int64_t cursor = lo, gap = 0;
    for (const auto& [b, e] : used) {
      if (e <= lo) continue;
      gap = std::max(gap, std::max<int64_t>(b, lo) - cursor);
      cursor = std::max(cursor, e);
    }
    gap = std::max(gap, map_.capacity - cursor);
    failure->largest_gap = std::max<int64_t>(gap, 0);
    failure->element_partners.clear();
    for (const auto& [j, r] : partners_[i]) {
      if (rules_[r].hard && std::find(active_.begin(), active_.end(), j) !=
                                active_.end()) {
        failure->element_partners.push_back(buffers_[j].id);
      }
    }
  }

  const MemoryMap& map_;
  const std::vector<AllocBuffer>& buffers_;
  const std::vector<AllocRule>& rules_;
  AllocResult* result_;
  const int64_t floor_;
  const AllocOrder order_;
  const size_t n_;
  std::vector<std::vector<std::pair<size_t, size_t>>> partners_;
  std::vector<int64_t> size_;  // aligned bytes
  std::vector<bool> placed_;
  // Placed and possibly still live, in address order (Insert).
  std::vector<size_t> active_;
  // Largest first: every placed buffer, in address order.
  std::vector<size_t> by_address_;
  std::vector<int64_t> live_starts_, live_max_end_;  // IndexLive
  // Candidates' lists, kept to save their allocations.
  mutable std::vector<int64_t> beside_, others_, candidates_;
  std::vector<bool> dropped_;
};

}  // namespace

bool AllocateTile(const MemoryMap& map, const std::vector<AllocBuffer>& buffers,
                  const std::vector<AllocRule>& rules, AllocResult* result,
                  AllocFailure* failure, int64_t floor, AllocOrder order) {
  return TileAllocator(map, buffers, rules, result, floor, order).Run(failure);
}

}  // namespace tilec::lower
