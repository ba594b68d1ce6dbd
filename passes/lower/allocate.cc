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

bool AllocateTile(const MemoryMap& map, const std::vector<AllocBuffer>& buffers,
                  const std::vector<AllocRule>& rules, AllocResult* result,
                  AllocFailure* failure, int64_t floor) {
  const size_t n = buffers.size();
  result->offsets.assign(n, 0);
  result->soft_dropped.clear();
  result->peak = 0;
  std::map<int, size_t> index;  // id -> position
  for (size_t i = 0; i < n; ++i) index[buffers[i].id] = i;
  // Rules by buffer position: (other position, rule index).
  std::vector<std::vector<std::pair<size_t, size_t>>> partners(n);
  for (size_t r = 0; r < rules.size(); ++r) {
    auto a = index.find(rules[r].a), b = index.find(rules[r].b);
    if (a == index.end() || b == index.end() || a->second == b->second) continue;
    partners[a->second].push_back({b->second, r});
    partners[b->second].push_back({a->second, r});
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> size(n);
  for (size_t i = 0; i < n; ++i) size[i] = map.AlignUp(buffers[i].bytes);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    if (buffers[x].start != buffers[y].start) {
      return buffers[x].start < buffers[y].start;
    }
    return size[x] > size[y];
  });
  std::vector<bool> placed(n, false);
  std::vector<size_t> active;  // placed and possibly still live
  std::vector<bool> dropped(rules.size(), false);
  for (size_t i : order) {
    const AllocBuffer& buf = buffers[i];
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](size_t j) { return buffers[j].end < buf.start; }),
                 active.end());
    const int64_t lo =
        buf.interleaved ? map.AlignUp(std::max(map.standard_end, map.base))
                        : map.base;
    auto element_clash = [&](int64_t at, size_t j) {
      if (size[i] == 0 || buffers[j].bytes == 0) return false;
      const int64_t a0 = map.ElementOf(at), a1 = map.ElementOf(at + buffers[i].bytes - 1);
      const int64_t b0 = map.ElementOf(result->offsets[j]);
      const int64_t b1 = map.ElementOf(result->offsets[j] + buffers[j].bytes - 1);
      return a0 <= b1 && b0 <= a1;
    };
    // With a floor, data from before the program is packed downwards from
    // the end of standard memory, no lower than the floor, then upwards
    // from the start of interleaved memory: the bottom of standard memory
    // stays free for buffers that must not share the interleaved element
    // of a GEMM's output (its staged left operand).
    const bool around_boundary = floor >= 0 && buf.start < 0 && !buf.interleaved;
    auto try_place = [&](bool soft, int pass) -> std::optional<int64_t> {
      std::vector<int64_t> candidates;
      int64_t min_at = lo, max_end = map.capacity;
      if (pass == 0) {
        candidates.push_back(map.AlignDown(map.standard_end - size[i]));
        for (size_t j : active) {
          candidates.push_back(map.AlignDown(result->offsets[j] - size[i]));
        }
        min_at = std::max(floor, map.base);
        max_end = map.standard_end;
      } else {
        if (pass == 1) min_at = map.AlignUp(map.standard_end);
        candidates.push_back(min_at);
        for (size_t j : active) {
          candidates.push_back(map.AlignUp(result->offsets[j] + size[j]));
        }
        for (const auto& [j, r] : partners[i]) {
          if (!placed[j] || (!rules[r].hard && !soft)) continue;
          const int64_t last = map.ElementOf(result->offsets[j] + std::max<int64_t>(buffers[j].bytes, 1) - 1);
          candidates.push_back(map.AlignUp(map.ElementStart(last + 1)));
        }
      }
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()),
                       candidates.end());
      if (pass == 0) std::reverse(candidates.begin(), candidates.end());
      for (int64_t at : candidates) {
        if (at < min_at) continue;
        if (at + size[i] > max_end) {
          if (pass == 0) continue;
          break;
        }
        bool ok = true;
        for (size_t j : active) {
          if (size[i] > 0 && size[j] > 0 && at < result->offsets[j] + size[j] &&
              result->offsets[j] < at + size[i]) {
            ok = false;
            break;
          }
        }
        for (const auto& [j, r] : partners[i]) {
          if (!ok) break;
          if (!placed[j] || (!rules[r].hard && !soft)) continue;
          if (element_clash(at, j)) ok = false;
        }
        if (ok) return at;
      }
      return std::nullopt;
    };
    auto place = [&](bool soft) -> std::optional<int64_t> {
      for (int pass = around_boundary ? 0 : 2; pass <= 2; ++pass) {
        if (std::optional<int64_t> at = try_place(soft, pass)) return at;
      }
      return std::nullopt;
    };
    std::optional<int64_t> at = place(true);
    if (!at) {
      at = place(false);
      if (at) {
        for (const auto& [j, r] : partners[i]) {
          if (placed[j] && !rules[r].hard && !dropped[r] && element_clash(*at, j)) {
            dropped[r] = true;
            result->soft_dropped.push_back(static_cast<int>(r));
          }
        }
      }
    }
    if (!at) {
      failure->buffer = buf.id;
      failure->bytes = size[i];
      failure->interleaved = buf.interleaved;
      failure->slot = buf.start;
      failure->live.clear();
      failure->live_bytes = 0;
      std::vector<std::pair<int64_t, int64_t>> used;
      for (size_t j : active) {
        failure->live.push_back(buffers[j].id);
        failure->live_bytes += size[j];
        used.push_back({result->offsets[j], result->offsets[j] + size[j]});
      }
      std::sort(used.begin(), used.end());
      failure->region_bytes = map.capacity - lo;
      int64_t cursor = lo, gap = 0;
      for (const auto& [b, e] : used) {
        if (e <= lo) continue;
        gap = std::max(gap, std::max<int64_t>(b, lo) - cursor);
        cursor = std::max(cursor, e);
      }
      gap = std::max(gap, map.capacity - cursor);
      failure->largest_gap = std::max<int64_t>(gap, 0);
      return false;
    }
    result->offsets[i] = *at;
    placed[i] = true;
    active.push_back(i);
    result->peak = std::max(result->peak, *at + size[i]);
  }
  std::sort(result->soft_dropped.begin(), result->soft_dropped.end());
  return true;
}

}  // namespace tilec::lower
