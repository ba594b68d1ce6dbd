// The static scheduler of an exchange phase (SchedulePhase,
// PlannedPhaseLength): the busy time of lanes and issue slots, the unions
// of receivers' lanes that wide multicasts are placed through, and the
// orders in which packets are placed.

#include "kernels/exchange_schedule.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <queue>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "glog/logging.h"

namespace tilec::kernels {
namespace {

// Where a search found room: the earliest start that fits, and the latest
// start at which the same free gap still holds it (kNever: no end), so that
// a start moved later by another constraint is checked without searching
// again.
struct Room {
  int64_t start = 0;
  int64_t latest = 0;
};
constexpr int64_t kNever = std::numeric_limits<int64_t>::max() / 4;

// Busy time of one resource (a lane or a tile's issue slots): sorted,
// disjoint, non-touching intervals [begin, end), in blocks of at most
// 2 x kBlock, so that an insertion moves at most one block and a search for
// a gap skips every block whose gaps are all too narrow. Phases of
// thousands of small pieces per tile would otherwise be scheduled in time
// quadratic in their pieces. Most searches start and most intervals are
// added at or after the last busy cycle: the end is kept beside the blocks
// and answers those without a search.
class BusyIntervals {
 public:
  // An interval by block and index: where a search from one cycle stopped,
  // so that a search from a later cycle, with nothing added in between,
  // goes on from there rather than from the start (kUnset: no search yet).
  struct Position {
    static constexpr uint32_t kUnset = UINT32_MAX;
    uint32_t block = kUnset;
    uint32_t index = 0;
  };

  // The earliest t' >= t with [t', t' + d) free, and the latest start the
  // gap it lies in admits. `cursor` (if any) is where a search from an
  // earlier cycle stopped, and is moved to where this one stops.
  Room EarliestFree(int64_t t, int64_t d, Position* cursor = nullptr) const {
    if (d <= 0 || t >= end_) return {t, kNever};  // also where none is busy
    Position unset;
    Position& at = cursor ? *cursor : unset;
    at = FirstEndingAfter(t, at);
    size_t b = at.block, i = at.index;
    if (blocks_[b].v[i].first >= t + d) return {t, blocks_[b].v[i].first - d};
    // Interval (b, i) is in the way: the answer is the end of the first
    // interval from it on whose following gap is at least d.
    for (;;) {
      // A block none of whose gaps is wide enough is not searched.
      if (blocks_[b].widest_gap >= d) {
        const Intervals& v = blocks_[b].v;
        const bool whole_block = i == 0;
        int64_t widest = 0;
        for (; i + 1 < v.size(); ++i) {
          const int64_t gap = v[i + 1].first - v[i].second;
          if (gap >= d) {
            at = {static_cast<uint32_t>(b), static_cast<uint32_t>(i + 1)};
            return {v[i].second, v[i + 1].first - d};
          }
          widest = std::max(widest, gap);
        }
        // Every gap of the block was read: its bound is made exact.
        if (whole_block) blocks_[b].widest_gap = widest;
      }
      for (;;) {
        const int64_t last_end = blocks_[b].end;
        if (b + 1 == blocks_.size()) return {last_end, kNever};
        if (blocks_[b + 1].begin - last_end >= d) {
          at = {static_cast<uint32_t>(b + 1), 0};
          return {last_end, blocks_[b + 1].begin - d};
        }
        ++b;
        if (blocks_[b].widest_gap >= d) break;
      }
      i = 0;
    }
  }

  // Asks for the memory an Add at the lane's end reads, ahead of it: the
  // last block (Prefetch(0)), then once that is in, its last intervals
  // (Prefetch(1)). Each lane's blocks and intervals are allocations of
  // their own, so adding a multicast to every receiver's lanes in turn
  // otherwise waits on several cache misses per lane.
  void Prefetch(int stage) const {
    if (blocks_.empty()) return;
    const Block& last = blocks_.back();
    if (stage == 0) {
      __builtin_prefetch(&last);
    } else if (!last.v.empty()) {
      __builtin_prefetch(&last.v.back());
    }
  }

  // Nothing busy, keeping the first block's memory for the next schedule.
  void Clear() {
    if (end_ == kNoneBusy) return;
    blocks_.resize(1);
    blocks_[0].v.clear();
    end_ = kNoneBusy;
  }

  // Marks [begin, end), which is free, busy.
  void Add(int64_t begin, int64_t end) {
    if (end <= begin) return;
    if (begin >= end_) {
      Append(begin, end);
      return;
    }
    // Before the end, so the end stays.
    const size_t b = BlockEndingFrom(begin);
    Insert(b, begin, end);
    if (blocks_[b].v.size() > 2 * kBlock) Split(b);
  }

  // Marks [begin, end) busy, free or not: it and the intervals it overlaps
  // or touches become one.
  void Merge(int64_t begin, int64_t end) {
    if (end <= begin) return;
    if (begin >= end_) {
      Add(begin, end);
      return;
    }
    // The first interval ending at or after `begin`, and the last starting
    // at or before `end`: those it merges with, if the first is not past
    // `end`.
    const size_t b = BlockEndingFrom(begin);
    Intervals& v = blocks_[b].v;
    const size_t i = IndexEndingFrom(v, begin);
    if (v[i].first > end) {
      Add(begin, end);
      return;
    }
    const size_t last_b = std::upper_bound(blocks_.begin(), blocks_.end(), end,
                                           [](int64_t value, const Block& x) {
                                             return value < x.begin;
                                           }) -
                          blocks_.begin() - 1;
    Intervals& w = blocks_[last_b].v;
    const size_t last_i =
        std::upper_bound(w.begin(), w.end(), end,
                         [](int64_t value, const Interval& x) {
                           return value < x.first;
                         }) -
        w.begin() - 1;
    const Interval merged(std::min<int64_t>(begin, v[i].first),
                          std::max<int64_t>(end, w[last_i].second));
    // Gaps only go: every block's bound still holds.
    if (last_b == b) {
      v.erase(v.begin() + static_cast<std::ptrdiff_t>(i + 1),
              v.begin() + static_cast<std::ptrdiff_t>(last_i + 1));
      v[i] = merged;
    } else {
      w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(last_i + 1));
      if (!w.empty()) blocks_[last_b].begin = w.front().first;
      v.resize(i + 1);
      v[i] = merged;
      // The blocks between, and block last_b if nothing is left of it.
      blocks_.erase(
          blocks_.begin() + static_cast<std::ptrdiff_t>(b + 1),
          blocks_.begin() +
              static_cast<std::ptrdiff_t>(w.empty() ? last_b + 1 : last_b));
    }
    Block& block = blocks_[b];
    block.begin = block.v.front().first;
    block.end = block.v.back().second;
    end_ = std::max<int64_t>(end_, merged.second);
  }

 private:
  static constexpr size_t kBlock = 64;
  // end_ of a lane where nothing is busy: every search starts after it.
  static constexpr int64_t kNoneBusy = std::numeric_limits<int64_t>::min();
  // In 32 bits: half the memory, which large phases' schedules spend their
  // time fetching (Commit keeps every cycle in range).
  using Interval = std::pair<int32_t, int32_t>;
  using Intervals = std::vector<Interval>;
  // A block's intervals, their extent and a bound on their inner gaps, no
  // less than the widest gap between two of them: a gap made raises it,
  // one taken leaves it, and a search that reads every gap of the block
  // makes it exact (it is the searches' filter, not a fact they report:
  // measuring the block again each time its widest gap was taken cost more
  // than the searches it saved). The extent beside the intervals' vector:
  // adding at a lane's end reads one block's line and the last interval's.
  struct Block {
    int64_t begin = 0;
    int64_t end = 0;
    mutable int64_t widest_gap = 0;
    Intervals v;
  };

  // The first block with an interval ending at or after t (<= end_). Almost
  // every interval added before a lane's end goes into its last block
  // (99.5 % on so400m's batch 1 plan), which is asked first.
  size_t BlockEndingFrom(int64_t t) const {
    const size_t last = blocks_.size() - 1;
    if (last == 0 || blocks_[last - 1].end < t) return last;
    return std::lower_bound(
               blocks_.begin(), blocks_.end(), t,
               [](const Block& x, int64_t value) { return x.end < value; }) -
           blocks_.begin();
  }

  // The first of `v` ending at or after t, where v's last interval does
  // (a block BlockEndingFrom(t) found). Searched from the back in steps
  // of 1, 2, 4, ...: such intervals land a few to a few dozen before the
  // block's end, in the lines an append there read last.
  static size_t IndexEndingFrom(const Intervals& v, int64_t t) {
    size_t hi = v.size() - 1;  // v[hi] ends at or after t
    size_t step = 1;
    while (hi >= step && v[hi - step].second >= t) {
      hi -= step;
      step *= 2;
    }
    // Every interval before lo ends before t.
    const size_t lo = hi >= step ? hi - step + 1 : 0;
    return std::lower_bound(v.begin() + static_cast<std::ptrdiff_t>(lo),
                            v.begin() + static_cast<std::ptrdiff_t>(hi), t,
                            [](const Interval& x, int64_t value) {
                              return x.second < value;
                            }) -
           v.begin();
  }

  // The first interval ending after t (< end_), from `from` on: every
  // interval before `from` ends at or before t. A placement's searches of
  // one lane move a few intervals on each time: steps of 1, 2, 4, ... from
  // where the last one stopped stay near what it read.
  Position FirstEndingAfter(int64_t t, Position from) const {
    auto by_end = [](int64_t v, const Interval& x) { return v < x.second; };
    size_t b = from.block;
    size_t lo = 0, hi = 0;  // the answer is in [lo, hi) of block b
    if (b == Position::kUnset) {
      // Ending after t is ending at or after t + 1.
      b = BlockEndingFrom(t + 1);
      return {static_cast<uint32_t>(b),
              static_cast<uint32_t>(IndexEndingFrom(blocks_[b].v, t + 1))};
    } else {
      lo = from.index;
      if (blocks_[b].end <= t) {
        do ++b;
        while (blocks_[b].end <= t);
        lo = 0;
      }
      const Intervals& v = blocks_[b].v;
      // The block ends after t, so its answer is at or after `lo`.
      for (size_t step = 1; v[lo].second <= t; step *= 2) {
        if (lo + step >= v.size() || v[lo + step].second > t) {
          hi = std::min(lo + step, v.size());
          ++lo;
          break;
        }
        lo += step;
      }
      if (hi == 0) hi = lo + 1;
    }
    const Intervals& v = blocks_[b].v;
    const size_t i =
        std::upper_bound(v.begin() + static_cast<std::ptrdiff_t>(lo),
                         v.begin() + static_cast<std::ptrdiff_t>(hi), t,
                         by_end) -
        v.begin();
    return {static_cast<uint32_t>(b), static_cast<uint32_t>(i)};
  }

  // [begin, end) at or after the last busy cycle.
  void Append(int64_t begin, int64_t end) {
    if (end_ == kNoneBusy) {
      if (blocks_.empty()) blocks_.emplace_back();  // else Clear left one
      blocks_[0].v.emplace_back(begin, end);
      blocks_[0].begin = begin;
      blocks_[0].end = end_ = end;
      blocks_[0].widest_gap = 0;
      return;
    }
    const size_t b = blocks_.size() - 1;
    Block& block = blocks_[b];
    if (begin == end_) {
      block.v.back().second = end;
    } else {
      block.widest_gap = std::max(block.widest_gap, begin - end_);
      block.v.emplace_back(begin, end);
    }
    block.end = end_ = end;
    if (block.v.size() > 2 * kBlock) Split(b);
  }

  // Puts [begin, end), which ends before the last busy cycle, into block
  // b (whose last interval ends at or after `begin`), merging with the
  // intervals it touches. Gaps it takes leave the block's bound; a gap it
  // makes before the block's first interval raises it.
  void Insert(size_t b, int64_t begin, int64_t end) {
    Block& block = blocks_[b];
    Intervals& v = block.v;
    const auto it =
        v.begin() + static_cast<std::ptrdiff_t>(IndexEndingFrom(v, begin));
    if (it->second == begin) {
      // Touches its left neighbour, and maybe its right one as well.
      it->second = end;
      if (std::next(it) == v.end()) {
        block.end = end;
        AbsorbNextFront(b);
      } else if (std::next(it)->first == end) {
        it->second = std::next(it)->second;
        v.erase(std::next(it));
      }
    } else if (it->first == end) {
      it->first = begin;
      block.begin = v.front().first;
    } else {
      if (it == v.begin()) {
        block.widest_gap = std::max(block.widest_gap, it->first - end);
        block.begin = begin;
      }
      v.insert(it, Interval(begin, end));
    }
  }

  // Block b's last interval now reaches the next block's first: one
  // interval, kept in block b.
  void AbsorbNextFront(size_t b) {
    if (b + 1 == blocks_.size() ||
        blocks_[b + 1].begin != blocks_[b].v.back().second) {
      return;
    }
    Block& next = blocks_[b + 1];
    blocks_[b].v.back().second = blocks_[b].end = next.v.front().second;
    next.v.erase(next.v.begin());
    if (next.v.empty()) {
      blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(b + 1));
    } else {
      next.begin = next.v.front().first;
    }
  }

  // Block b's upper half as a block of its own; each half keeps b's bound.
  void Split(size_t b) {
    Block upper;
    upper.v.assign(blocks_[b].v.begin() + kBlock, blocks_[b].v.end());
    upper.begin = upper.v.front().first;
    upper.end = upper.v.back().second;
    upper.widest_gap = blocks_[b].widest_gap;
    blocks_[b].v.resize(kBlock);
    blocks_[b].end = blocks_[b].v.back().second;
    blocks_.insert(blocks_.begin() + static_cast<std::ptrdiff_t>(b + 1),
                   std::move(upper));
  }

  std::vector<Block> blocks_;
  int64_t end_ = kNoneBusy;  // the last interval's end
};

// Busy time that several resources add to, so intervals may overlap: kept
// merged. Where it is the union of many lanes' busy time, one search finds
// the earliest start every one of them admits.
class MergedIntervals {
 public:
  // The earliest t' >= t with [t', t' + d) free, and the latest start the
  // gap it lies in admits. A window of no cycles may not start inside busy
  // time either: it is searched as one of a cycle.
  Room EarliestFree(int64_t t, int64_t d,
                    BusyIntervals::Position* cursor = nullptr) const {
    return busy_.EarliestFree(t, std::max<int64_t>(d, 1), cursor);
  }

  void Add(int64_t begin, int64_t end) { busy_.Merge(begin, end); }

 private:
  BusyIntervals busy_;
};

// The lanes of a set of tiles that wide multicasts receive on: the union
// of their busy time, so that a packet to all of them is placed by three
// searches instead of three per tile. Each constraint on a receiver r
// becomes one on the start t:
//   receive lane free on [t, t + d)          -> `receive` free there;
//   issue slot free on [t - w_select, t)      -> `select` free there;
//   issue slot free on [t + latency(r) - w_pointer, t + latency(r))
//                                             -> `pointer` (each tile's
//      issue time shifted by -latency(r)) free on [t - w_pointer, t).
// Each is free exactly when it is free on every tile of the set, so a
// placement meets the same least start.
struct TileUnion {
  MergedIntervals receive, select, pointer;
  // The packet and route latency whose receive windows it took last.
  uint32_t last_packet = UINT32_MAX;
  int64_t last_latency = -1;
};

// How a phase's wide receiver sets are searched through unions of lanes
// (TileUnion): made once per phase, shared by every order's scheduler.
struct ReceiverUnions {
  // A wide packet's receivers: unions and the tiles no union of it holds.
  struct Cover {
    std::vector<int> unions;
    std::vector<int> tiles;
  };
  // None: every packet searched receiver by receiver.
  explicit ReceiverUnions(size_t packets) : cover_of_packet(packets, -1) {}

  std::vector<int> cover_of_packet;  // into covers; -1: each receiver
  std::vector<Cover> covers;
  int count = 0;
  std::vector<std::vector<int>> unions_of_tile;  // empty: no unions
};

// Receiver sets of at least this many tiles are searched through unions:
// below it, the receivers' own lanes are searched as fast as unions are
// kept.
constexpr uint32_t kWideReceivers = 64;
// The smallest aligned tile range kept as a union: smaller runs cost more
// to keep (every busy interval of a tile goes into each union holding it)
// than they save.
constexpr int kSmallestRange = 16;

struct AlignedRanges {
  std::vector<std::pair<int, int>> ranges;  // (first, size)
  std::vector<int> tiles;                   // in no range
};

// `tiles` (sorted, distinct) as the fewest aligned ranges of at least
// kSmallestRange tiles, and the tiles left over.
AlignedRanges AlignedRangesOf(const std::vector<int>& tiles) {
  AlignedRanges out;
  for (size_t i = 0; i < tiles.size();) {
    size_t run = i + 1;
    while (run < tiles.size() && tiles[run] == tiles[run - 1] + 1) ++run;
    const int end = tiles[run - 1] + 1;
    for (int first = tiles[i]; first < end;) {
      int size = 1;
      while (first % (2 * size) == 0 && first + 2 * size <= end) size *= 2;
      if (size < kSmallestRange) {
        out.tiles.push_back(first++);
      } else {
        out.ranges.emplace_back(first, size);
        first += size;
      }
    }
    i = run;
  }
  return out;
}

// Each distinct wide receiver set is covered by aligned tile ranges
// [i * 2^k, (i + 1) * 2^k) of at least kSmallestRange tiles (a broadcast
// to every tile but its sender: two runs, about 2 log(tiles) ranges), so
// that each tile is in at most one range per size whatever the sets. A
// set whose runs are too short for that (every other tile) gets a union
// of its own where two or more packets share it.
ReceiverUnions CoverWideReceiverSets(const PhaseTraffic& traffic) {
  const auto& packets = traffic.packets();
  ReceiverUnions out(packets.size());
  auto new_union = [&](const std::vector<int>& tiles) {
    if (out.unions_of_tile.empty()) {
      out.unions_of_tile.resize(traffic.model().tiles);
    }
    for (int tile : tiles) out.unions_of_tile[tile].push_back(out.count);
    return out.count++;
  };
  std::map<std::vector<int>, std::vector<uint32_t>> sharing;
  for (uint32_t p = 0; p < packets.size(); ++p) {
    if (packets[p].receiver_count < kWideReceivers) continue;
    const std::span<const int> r = traffic.ReceiversOf(packets[p]);
    std::vector<int> set(r.begin(), r.end());
    std::sort(set.begin(), set.end());
    sharing[std::move(set)].push_back(p);
  }
  std::map<std::pair<int, int>, int> range_unions;  // (first, size) -> union
  for (const auto& [set, members] : sharing) {
    ReceiverUnions::Cover cover;
    const AlignedRanges ranges = AlignedRangesOf(set);
    // Ranges, where they leave fewer tiles than a wide set to search one
    // by one.
    if (ranges.tiles.size() < kWideReceivers) {
      for (const auto& [first, size] : ranges.ranges) {
        auto [it, added] = range_unions.try_emplace({first, size}, 0);
        if (added) {
          std::vector<int> range(size);
          std::iota(range.begin(), range.end(), first);
          it->second = new_union(range);
        }
        cover.unions.push_back(it->second);
      }
      cover.tiles = ranges.tiles;
    } else if (members.size() >= 2) {
      cover.unions.push_back(new_union(set));
    } else {
      continue;
    }
    const int c = static_cast<int>(out.covers.size());
    out.covers.push_back(std::move(cover));
    for (uint32_t p : members) out.cover_of_packet[p] = c;
  }
  return out;
}

// Where a packet of d cycles started at t lands its last word: the send's
// end, or with receivers, the arrival's at the farthest (route latency
// `latest`).
int64_t PacketEnd(bool has_receivers, int64_t t, int64_t latest, int64_t d) {
  return has_receivers ? t + latest + d : t + d;
}

// The scheduler's state: every lane's and issue slot's busy time and, when
// it records (emit-device's schedules, not the planner's prices), every
// packet's start (ScheduleFromStarts makes the control instructions of the
// one schedule kept, not every order's as it is tried).
class Scheduler {
 public:
  // Wide multicasts' receivers are searched through `unions` of their
  // lanes where it has them, rather than each receiver's: the same starts.
  Scheduler(const PhaseTraffic& traffic, const ReceiverUnions& unions,
            bool record)
      : traffic_(traffic),
        model_(traffic.model()),
        record_(record),
        cover_(unions),
        unions_(unions.count),
        w_send_(model_.IssueWidth(fb::ControlKind::Send)),
        w_select_(model_.IssueWidth(fb::ControlKind::Select)),
        w_pointer_(model_.IssueWidth(fb::ControlKind::Pointer)) {
    route_latency_.resize(model_.tiles);
    for (int tile = 0; tile < model_.tiles; ++tile) {
      route_latency_[tile] = model_.RouteLatency(tile);
    }
    TakeLanes();
    if (record_) starts_.assign(traffic_.packets().size(), 0);
  }

  ~Scheduler() { GiveLanesBack(); }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Whether a schedule at least this long so far may stop: one that is
  // longer at the end could not be kept.
  using Lost = std::function<bool(int64_t)>;

  // Places the packets in `order`, each at its earliest start; returns the
  // schedule's length, nullopt once `lost` says so (a schedule only gets
  // longer as packets are placed).
  std::optional<int64_t> Run(const std::vector<uint32_t>& order,
                             const Lost& lost) {
    int64_t length = 0;
    for (uint32_t p : order) {
      length = std::max(length, Commit(p, Place(p, first_start_)));
      if (lost(length)) return std::nullopt;
    }
    return length;
  }

  // Places, again and again, the packet that can start earliest (ties: the
  // higher priority, then the lower index), so that whenever lanes free up
  // they take the next packet they can: a matching of free senders to free
  // receivers at every step rather than one sender's packets in a row.
  // Nullopt when its packets were re-placed more than `budget` times: a
  // phase whose packets keep overtaking each other makes it quadratic.
  std::optional<int64_t> RunEarliestFirst(const std::vector<int64_t>& priority,
                                          int64_t budget, const Lost& lost) {
    const size_t n = traffic_.packets().size();
    // The packets by priority, then index: ties between starts go by rank
    // there, so that an entry is two words.
    std::vector<uint32_t> by_rank(n);
    std::iota(by_rank.begin(), by_rank.end(), 0);
    std::stable_sort(by_rank.begin(), by_rank.end(),
                     [&](uint32_t a, uint32_t b) {
                       return priority[a] > priority[b];
                     });
    using Entry = std::pair<int64_t, uint32_t>;  // start, rank
    std::vector<Entry> entries(n);
    for (uint32_t rank = 0; rank < n; ++rank) entries[rank] = {0, rank};
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue(
        std::greater<Entry>(), std::move(entries));
    int64_t length = 0;
    while (!queue.empty()) {
      const auto [start, rank] = queue.top();
      const uint32_t p = by_rank[rank];
      queue.pop();
      // Starts only move later as packets are placed: recheck from where
      // it could start before, and place it only if it is still the
      // earliest.
      const int64_t t = Place(p, std::max(start, first_start_));
      if (t > start) {
        if (--budget < 0) return std::nullopt;
        queue.emplace(t, rank);
        continue;
      }
      length = std::max(length, Commit(p, t));
      if (lost(length)) return std::nullopt;
    }
    return length;
  }

  // The recorded starts (a recording scheduler, once).
  std::vector<uint32_t> TakeStarts() { return std::move(starts_); }

 private:
  // The earliest start from `from` on that every constraint on packet p
  // admits: its sender's lane and issue slot (site 0), then for each union
  // and each tile it is received through (sites 1, ...), the receive lane,
  // the Select's issue and the Pointer's. That least common start does not
  // depend on the order the constraints are met in, so each is searched
  // again only when the start has moved past the room it last found (from
  // where its lane's last search stopped), and the constraints are gone
  // through from the first again whenever the start moves (fewer searches,
  // measured, than going round), until every one admits it.
  int64_t Place(uint32_t p, int64_t from) {
    const auto& packet = traffic_.packets()[p];
    const int64_t d = model_.Duration(packet.words);
    const ReceiverUnions::Cover* cover =
        cover_.cover_of_packet[p] >= 0
            ? &cover_.covers[cover_.cover_of_packet[p]]
            : nullptr;
    const std::span<const int> tiles =
        cover ? std::span<const int>(cover->tiles)
              : traffic_.ReceiversOf(packet);
    const size_t unions = cover ? cover->unions.size() : 0;
    const size_t constraints = kPerSite * (1 + unions + tiles.size());
    if (latest_.size() < constraints) {
      latest_.resize(constraints);
      cursors_.resize(constraints);
    }
    int64_t t = from;
    // The constraints are gone through from the first whenever the start
    // moves, so those from `met` on have not been searched yet.
    size_t met = 0;
    for (size_t k = 0, site = 0, kind = 0; k < constraints;) {
      if (k == met || t > latest_[k]) {
        if (k == met) {
          cursors_[k] = BusyIntervals::Position();
          ++met;
        }
        BusyIntervals::Position* cursor = &cursors_[k];
        const Room room =
            site == 0 ? SendRoom(packet.sender, kind, t, d, cursor)
            : site <= unions
                ? ReceiveRoom(unions_[cover->unions[site - 1]], kind, t, d,
                              cursor)
                : ReceiveRoom(tiles[site - 1 - unions], kind, t, d, cursor);
        latest_[k] = room.latest;
        if (room.start != t) {
          t = room.start;
          k = site = kind = 0;
          continue;
        }
      }
      ++k;
      if (++kind == kPerSite) {
        kind = 0;
        ++site;
      }
    }
    return t;
  }

  // Constraints per site: a sender has two, the third admits any start.
  static constexpr size_t kPerSite = 3;

  // Room for a packet of d cycles starting at t on its sender's lane (kind
  // 0) and issue slot (kind 1).
  Room SendRoom(int sender, size_t kind, int64_t t, int64_t d,
                BusyIntervals::Position* cursor) const {
    switch (kind) {
      case 0:
        return send_[sender].EarliestFree(t, d, cursor);
      case 1:
        return Shifted(
            issue_[sender].EarliestFree(t - w_send_, w_send_, cursor),
            w_send_);
    }
    return {t, kNever};
  }

  // Room on tile r's receive lane (kind 0), and its issue slot for the
  // Select (kind 1) and the Pointer (kind 2).
  Room ReceiveRoom(int r, size_t kind, int64_t t, int64_t d,
                   BusyIntervals::Position* cursor) const {
    switch (kind) {
      case 0:
        return receive_[r].EarliestFree(t, d, cursor);
      case 1:
        return Shifted(
            issue_[r].EarliestFree(t - w_select_, w_select_, cursor),
            w_select_);
    }
    const int64_t latency = route_latency_[r];
    return Shifted(
        issue_[r].EarliestFree(t + latency - w_pointer_, w_pointer_, cursor),
        w_pointer_ - latency);
  }

  // The same for every tile of a union at once.
  Room ReceiveRoom(const TileUnion& u, size_t kind, int64_t t, int64_t d,
                   BusyIntervals::Position* cursor) const {
    switch (kind) {
      case 0:
        return u.receive.EarliestFree(t, d, cursor);
      case 1:
        return Shifted(u.select.EarliestFree(t - w_select_, w_select_, cursor),
                       w_select_);
    }
    return Shifted(u.pointer.EarliestFree(t - w_pointer_, w_pointer_, cursor),
                   w_pointer_);
  }

  // A window's room as room for the packet's start, `offset` after it.
  static Room Shifted(Room room, int64_t offset) {
    return {room.start + offset, room.latest + offset};
  }

  // Marks packet `p` placed at `t`; returns where its last word lands.
  int64_t Commit(uint32_t p, int64_t t) {
    const auto& packet = traffic_.packets()[p];
    const int64_t d = model_.Duration(packet.words);
    // Busy intervals hold 32-bit cycles, as the schedule's starts do: a
    // schedule that long (1.4 s of exchange at 1.5 GHz) is no program's.
    // No window of the packet ends later than this.
    CHECK_LT(t + d + farthest_latency_, std::numeric_limits<int32_t>::max())
        << "an exchange phase of " << traffic_.packets().size()
        << " packets schedules past 2^31 - 1 cycles";
    send_[packet.sender].Add(t, t + d);
    AddIssue(packet.sender, t - w_send_, t);
    if (record_) starts_[p] = static_cast<uint32_t>(t);
    int64_t latest = 0;  // the longest route latency of its receivers
    const std::span<const int> receivers = traffic_.ReceiversOf(packet);
    for (size_t i = 0; i < receivers.size(); ++i) {
      PrefetchReceiver(receivers, i + 2 * kPrefetchAhead, -1);
      PrefetchReceiver(receivers, i + kPrefetchAhead, 0);
      PrefetchReceiver(receivers, i + kPrefetchAhead / 2, 1);
      const int r = receivers[i];
      AddReceiver(r, p, t, d);
      latest = std::max(latest, route_latency_[r]);
    }
    return PacketEnd(packet.receiver_count > 0, t, latest, d);
  }

  // Receivers ahead of the one being added to, in Commit: their lanes in
  // stage -1, then their lanes' blocks (0) and last intervals (1), each
  // stage once the one before it is in cache.
  static constexpr size_t kPrefetchAhead = 8;
  void PrefetchReceiver(std::span<const int> receivers, size_t i,
                        int stage) const {
    if (i >= receivers.size()) return;
    const int r = receivers[i];
    if (stage < 0) {
      __builtin_prefetch(&receive_[r]);
      __builtin_prefetch(&issue_[r]);
      return;
    }
    receive_[r].Prefetch(stage);
    issue_[r].Prefetch(stage);
  }

  // Receiver r's windows for packet p at t. Every
  // receiver of a packet has the same windows but for those its route
  // latency shifts, so a union takes each window once per packet and
  // latency, not once per tile.
  void AddReceiver(int r, uint32_t p, int64_t t, int64_t d) {
    const int64_t latency = route_latency_[r];
    receive_[r].Add(t, t + d);
    issue_[r].Add(t - w_select_, t);
    issue_[r].Add(t + latency - w_pointer_, t + latency);
    if (cover_.unions_of_tile.empty()) return;
    for (int u : cover_.unions_of_tile[r]) {
      TileUnion& x = unions_[u];
      if (x.last_packet != p) {
        x.last_packet = p;
        x.last_latency = -1;
        x.receive.Add(t, t + d);
        x.select.Add(t - w_select_, t);
        x.pointer.Add(t - w_pointer_, t);
      }
      if (x.last_latency != latency) {
        x.last_latency = latency;
        x.select.Add(t + latency - w_pointer_, t + latency);
        x.pointer.Add(t - w_select_ - latency, t - latency);
      }
    }
  }

  void AddIssue(int tile, int64_t begin, int64_t end) {
    issue_[tile].Add(begin, end);
    if (cover_.unions_of_tile.empty()) return;
    const int64_t latency = route_latency_[tile];
    for (int u : cover_.unions_of_tile[tile]) {
      unions_[u].select.Add(begin, end);
      unions_[u].pointer.Add(begin - latency, end - latency);
    }
  }

  // Every tile's lanes, kept from one schedule to the next: a phase
  // touches few of them, and making 3 x tiles interval sets afresh for each
  // order of every phase the planner prices was a sixth of its time in
  // malloc and free. Shared by the threads that try orders, which would
  // otherwise make their own afresh for each large phase.
  using Lanes = std::array<std::vector<BusyIntervals>, 3>;
  struct LanePool {
    std::mutex mutex;
    std::vector<Lanes> lanes;
  };
  static LanePool& Pool() {
    static LanePool pool;
    return pool;
  }
  void TakeLanes() {
    LanePool& pool = Pool();
    {
      std::lock_guard<std::mutex> lock(pool.mutex);
      if (!pool.lanes.empty()) {
        send_.swap(pool.lanes.back()[0]);
        receive_.swap(pool.lanes.back()[1]);
        issue_.swap(pool.lanes.back()[2]);
        pool.lanes.pop_back();
      }
    }
    send_.resize(model_.tiles);
    receive_.resize(model_.tiles);
    issue_.resize(model_.tiles);
  }
  void GiveLanesBack() {
    Lanes lanes;
    lanes[0].swap(send_);
    lanes[1].swap(receive_);
    lanes[2].swap(issue_);
    for (std::vector<BusyIntervals>& v : lanes) {
      for (BusyIntervals& b : v) b.Clear();
    }
    LanePool& pool = Pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    pool.lanes.push_back(std::move(lanes));
  }

  const PhaseTraffic& traffic_;
  const ExchangeModel& model_;
  const bool record_;
  const ReceiverUnions& cover_;
  std::vector<TileUnion> unions_;  // by cover_'s numbers
  std::vector<uint32_t> starts_;
  std::vector<BusyIntervals> send_, receive_, issue_;
  const int64_t w_send_, w_select_, w_pointer_;
  std::vector<int64_t> route_latency_;  // by tile, found without dividing
  const int64_t farthest_latency_ = model_.RouteLatency(model_.tiles - 1);
  // No packet starts before its Send and its Selects have issued.
  const int64_t first_start_ = std::max(w_send_, w_select_);
  // Place's, by constraint: the latest start its room admits, and where
  // its lane's search stopped.
  std::vector<int64_t> latest_;
  std::vector<BusyIntervals::Position> cursors_;
};

// Orders in which the scheduler places packets (SchedulePhase keeps the
// shortest schedule of them).

// Whether packet a goes before b: the busier lanes first, then the larger
// multicast, then the longer packet.
bool BusierFirst(const std::vector<PhaseTraffic::Packet>& packets,
                 const std::vector<int64_t>& priority, uint32_t a,
                 uint32_t b) {
  if (priority[a] != priority[b]) return priority[a] > priority[b];
  if (packets[a].receiver_count != packets[b].receiver_count) {
    return packets[a].receiver_count > packets[b].receiver_count;
  }
  return packets[a].words > packets[b].words;
}

// Each packet's priority among `subset` (packet indices): the largest load
// among the lanes it uses, a lane's load being the cycles its tile must
// send, receive or issue for the packets of `subset`.
void PrioritiesAmong(const PhaseTraffic& traffic,
                     std::span<const uint32_t> subset,
                     std::vector<int64_t>* priority) {
  const ExchangeModel& model = traffic.model();
  const auto& packets = traffic.packets();
  const int64_t w_send = model.IssueWidth(fb::ControlKind::Send);
  const int64_t w_receive = model.IssueWidth(fb::ControlKind::Select) +
                            model.IssueWidth(fb::ControlKind::Pointer);
  std::vector<int64_t> send_load(model.tiles, 0), receive_load(model.tiles, 0),
      issue_load(model.tiles, 0);
  for (uint32_t i : subset) {
    const auto& p = packets[i];
    const int64_t d = model.Duration(p.words);
    send_load[p.sender] += d;
    issue_load[p.sender] += w_send;
    for (int r : traffic.ReceiversOf(p)) {
      receive_load[r] += d;
      issue_load[r] += w_receive;
    }
  }
  for (uint32_t i : subset) {
    const auto& p = packets[i];
    int64_t key = std::max(send_load[p.sender], issue_load[p.sender]);
    for (int r : traffic.ReceiversOf(p)) {
      key = std::max({key, receive_load[r], issue_load[r]});
    }
    (*priority)[i] = key;
  }
}

std::vector<int64_t> PacketPriorities(const PhaseTraffic& traffic) {
  std::vector<uint32_t> all(traffic.packets().size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<int64_t> priority(all.size());
  PrioritiesAmong(traffic, all, &priority);
  return priority;
}

// The packets of each op in turn, ops in program order (of their first
// piece), and within an op by BusiestLaneFirst's rule with the op's own
// lane loads. Empty for a phase of one op. emit-device merges several ops'
// exchanges into one phase; under the phase-wide priority every packet on
// the busiest receiver ties, and the ops' patterns interleave into gaps
// none of them leaves alone (so400m's per-layer weight delivery: 16,915
// cycles merged against 14,122 for its eight ops scheduled apart).
std::vector<uint32_t> OpsInTurn(const PhaseTraffic& traffic) {
  const auto& packets = traffic.packets();
  const auto& pieces = traffic.pieces();
  // Most phases serve one op (every phase the planner prices): nothing to
  // order, found without a map.
  const bool several_ops =
      std::any_of(pieces.begin(), pieces.end(),
                  [&](const PhaseTraffic::Piece& p) {
                    return p.op != pieces.front().op;
                  });
  if (!several_ops) return {};
  std::vector<uint32_t> op_rank(packets.size());
  std::map<uint32_t, uint32_t> rank_of_op;  // op -> order of appearance
  for (size_t i = 0; i < packets.size(); ++i) {
    const uint32_t op = pieces[packets[i].piece].op;
    op_rank[i] = rank_of_op.try_emplace(op, rank_of_op.size()).first->second;
  }
  if (rank_of_op.size() < 2) return {};
  std::vector<uint32_t> order(packets.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return op_rank[a] < op_rank[b];
  });
  std::vector<int64_t> priority(packets.size());
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin;
    while (end < order.size() && op_rank[order[end]] == op_rank[order[begin]]) {
      ++end;
    }
    const std::span<uint32_t> op_packets(order.data() + begin, end - begin);
    PrioritiesAmong(traffic, op_packets, &priority);
    std::stable_sort(op_packets.begin(), op_packets.end(),
                     [&](uint32_t a, uint32_t b) {
                       return BusierFirst(packets, priority, a, b);
                     });
    begin = end;
  }
  return order;
}

// The packets of the busiest lanes first, then larger multicasts, then
// longer packets.
std::vector<uint32_t> BusiestLaneFirst(const PhaseTraffic& traffic,
                                       const std::vector<int64_t>& priority) {
  const auto& packets = traffic.packets();
  std::vector<uint32_t> order(packets.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return BusierFirst(packets, priority, a, b);
  });
  return order;
}

// Rounds: every sender's packets in order of how far their first receiver
// lies after it (tile numbers taken cyclically), then the k-th packet of
// every sender before any (k+1)-th, the busiest lanes first within a round.
// A group of tiles that exchange with each other then sends around a cycle
// (a to b, b to c, c to a) instead of pairing off and leaving a tile idle.
std::vector<uint32_t> Rounds(const PhaseTraffic& traffic,
                             const std::vector<int64_t>& priority) {
  const auto& packets = traffic.packets();
  const int64_t tiles = traffic.model().tiles;
  auto distance = [&](uint32_t p) {
    const auto& packet = packets[p];
    if (packet.receiver_count == 0) return int64_t{0};
    const int r = traffic.ReceiversOf(packet)[0];
    return ((r - packet.sender) % tiles + tiles) % tiles;
  };
  std::vector<uint32_t> by_sender(packets.size());
  std::iota(by_sender.begin(), by_sender.end(), 0);
  std::stable_sort(by_sender.begin(), by_sender.end(),
                   [&](uint32_t a, uint32_t b) {
                     if (packets[a].sender != packets[b].sender) {
                       return packets[a].sender < packets[b].sender;
                     }
                     return distance(a) < distance(b);
                   });
  std::vector<int64_t> round(packets.size(), 0);
  for (size_t i = 1; i < by_sender.size(); ++i) {
    const bool same =
        packets[by_sender[i]].sender == packets[by_sender[i - 1]].sender;
    round[by_sender[i]] = same ? round[by_sender[i - 1]] + 1 : 0;
  }
  std::vector<uint32_t> order = by_sender;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    if (round[a] != round[b]) return round[a] < round[b];
    return priority[a] > priority[b];
  });
  return order;
}

// Each packet's receiver group, numbered from `tiles` on (where packets
// are unicast, its receiver's tile + tiles): a receiver group is a
// connected set of tiles that packets' receiver sets link, so packets to
// different groups share no receiver. Empty where a packet has none.
std::vector<int> ReceiverGroups(const PhaseTraffic& traffic) {
  const auto& packets = traffic.packets();
  const int tiles = traffic.model().tiles;
  std::vector<int> root(tiles);
  std::iota(root.begin(), root.end(), 0);
  auto find = [&](int x) {
    while (root[x] != x) x = root[x] = root[root[x]];
    return x;
  };
  for (const auto& p : packets) {
    const std::span<const int> r = traffic.ReceiversOf(p);
    if (r.empty()) return {};
    for (int x : r.subspan(1)) root[find(x)] = find(r[0]);
  }
  std::vector<int> group(packets.size());
  for (size_t p = 0; p < packets.size(); ++p) {
    group[p] = tiles + find(traffic.ReceiversOf(packets[p])[0]);
  }
  return group;
}

// A proper colouring in `colours` colours (at least the largest degree) of
// the bipartite multigraph whose edge e joins vertices from[e] and to[e]
// (of `vertices`; no vertex is in both lists). Edge e takes a colour a free
// at from[e]; where a is taken at to[e], a and a colour b free there are
// first swapped along the path from to[e] that alternates them (Konig's
// proof that the largest degree's colours suffice).
std::vector<int> EdgeColours(const std::vector<int>& from,
                             const std::vector<int>& to, int vertices,
                             int colours) {
  const size_t edges = from.size();
  // A swap's path reads an edge's two ends together, and the edges of two
  // colours at many vertices: ends side by side, edges by colour, then
  // vertex.
  std::vector<std::pair<int, int>> ends(edges);
  for (size_t e = 0; e < edges; ++e) ends[e] = {from[e], to[e]};
  // at[c * vertices + v]: the edge of colour c at vertex v; -1: none.
  std::vector<int32_t> at(static_cast<size_t>(vertices) * colours, -1);
  std::vector<int> colour(edges, -1);
  std::vector<int> first_free(vertices, 0);  // no free colour below it
  auto slot = [&](int v, int c) -> int32_t& {
    return at[static_cast<size_t>(c) * vertices + v];
  };
  auto free_colour = [&](int v) {
    int& c = first_free[v];
    while (slot(v, c) >= 0) ++c;
    return c;
  };
  std::vector<size_t> path;
  for (size_t e = 0; e < edges; ++e) {
    const auto [u, v] = ends[e];
    const int a = free_colour(u), b = free_colour(v);
    if (slot(v, a) >= 0) {
      // Swap a and b along the path from v that alternates them: then a
      // is free at v, and still at u (bipartite: the path cannot end there).
      path.clear();
      for (int w = v, c = a; slot(w, c) >= 0; c = c == a ? b : a) {
        const size_t f = static_cast<size_t>(slot(w, c));
        path.push_back(f);
        w = w == ends[f].first ? ends[f].second : ends[f].first;
      }
      for (size_t f : path) {
        slot(ends[f].first, colour[f]) = slot(ends[f].second, colour[f]) = -1;
      }
      for (size_t f : path) {
        const int old = colour[f];
        colour[f] = old == a ? b : a;
        slot(ends[f].first, colour[f]) = slot(ends[f].second, colour[f]) =
            static_cast<int32_t>(f);
        first_free[ends[f].first] = std::min(first_free[ends[f].first], old);
        first_free[ends[f].second] = std::min(first_free[ends[f].second], old);
      }
    }
    colour[e] = a;
    slot(u, a) = slot(v, a) = static_cast<int32_t>(e);
  }
  return colour;
}

// Matchings: the packets coloured as edges from their senders to their
// receiver groups (EdgeColours), colour by colour, the busiest lanes first
// within one. Each colour is a round in which no tile sends or receives
// twice, so every tile's lanes are taken round after round without a
// receiver's packets queueing behind each other. Empty where a packet has
// no receivers or the groups are so large that the colours outnumber the
// busiest tile's packets by half (a broadcast's group is every tile).
std::vector<uint32_t> Matchings(const PhaseTraffic& traffic,
                                const std::vector<int64_t>& priority) {
  const auto& packets = traffic.packets();
  const int tiles = traffic.model().tiles;
  const std::vector<int> group = ReceiverGroups(traffic);
  if (group.empty()) return {};
  std::vector<int> sender(packets.size()), send_degree(tiles, 0),
      receive_degree(tiles, 0), group_degree(2 * tiles, 0);
  for (size_t p = 0; p < packets.size(); ++p) {
    sender[p] = packets[p].sender;
    ++send_degree[sender[p]];
    for (int r : traffic.ReceiversOf(packets[p])) ++receive_degree[r];
    ++group_degree[group[p]];
  }
  auto largest = [](const std::vector<int>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  const int colours = std::max(largest(send_degree), largest(group_degree));
  if (2 * colours >
      3 * std::max(largest(send_degree), largest(receive_degree))) {
    return {};
  }
  // The packets by what they carry where, not by their index: the planner
  // and emit-device may list the same packets in different orders, and
  // must price them alike.
  std::vector<uint32_t> order(packets.size());
  std::iota(order.begin(), order.end(), 0);
  auto what_where = [&](uint32_t p) {
    const std::span<const int> r = traffic.ReceiversOf(packets[p]);
    return std::tuple(sender[p], group[p], r[0], r.size(), packets[p].words);
  };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    return what_where(x) < what_where(y);
  });
  std::vector<int> from(packets.size()), to(packets.size());
  for (size_t i = 0; i < order.size(); ++i) {
    from[i] = sender[order[i]];
    to[i] = group[order[i]];
  }
  const std::vector<int> edge_colour =
      EdgeColours(from, to, 2 * tiles, colours);
  std::vector<int> colour(packets.size());
  for (size_t i = 0; i < order.size(); ++i) colour[order[i]] = edge_colour[i];
  std::stable_sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    if (colour[x] != colour[y]) return colour[x] < colour[y];
    return priority[x] > priority[y];
  });
  return order;
}

// The orders SchedulePhase tries: of schedules of equal length, the one of
// the first order here is kept.
enum class Order {
  kBusiestLaneFirst,
  kRounds,
  kEarliestFirst,
  kOpsInTurn,
  kMatchings
};
constexpr size_t kOrderCount = 5;
// The sequence they are tried in, which changes nothing but how soon the
// others give up: matchings, the shortest on most of the costliest phases
// (so400m's layer, where it ends the others early), then rounds, the
// shortest on most others.
constexpr Order kTrialSequence[kOrderCount] = {
    Order::kMatchings, Order::kRounds, Order::kBusiestLaneFirst,
    Order::kEarliestFirst, Order::kOpsInTurn};

// Schedules `traffic` in `order` on `scheduler`; nullopt where
// earliest-first gives up, and ops-in-turn on a phase of one op (it would
// be busiest-lane-first again), and where `lost` stops it. Earliest-first
// is tried only where it stays near linear: at most four re-placements per
// packet (deterministic, unlike a time limit).
std::optional<int64_t> RunOrder(Scheduler& scheduler, Order order,
                                const PhaseTraffic& traffic,
                                const std::vector<int64_t>& priority,
                                const Scheduler::Lost& lost) {
  switch (order) {
    case Order::kBusiestLaneFirst:
      return scheduler.Run(BusiestLaneFirst(traffic, priority), lost);
    case Order::kRounds:
      return scheduler.Run(Rounds(traffic, priority), lost);
    case Order::kEarliestFirst:
      return scheduler.RunEarliestFirst(
          priority, 4 * static_cast<int64_t>(traffic.packets().size()), lost);
    case Order::kOpsInTurn: {
      const std::vector<uint32_t> order = OpsInTurn(traffic);
      if (order.empty()) return std::nullopt;
      return scheduler.Run(order, lost);
    }
    case Order::kMatchings: {
      const std::vector<uint32_t> order = Matchings(traffic, priority);
      if (order.empty()) return std::nullopt;
      return scheduler.Run(order, lost);
    }
  }
  return std::nullopt;
}

// The lengths of one phase's finished orders, shared by the threads that
// try them. The order kept is the shortest, the first (Order) of equals: an
// order whose schedule so far is already longer than a finished later
// order's, or as long as a finished earlier order's, cannot be it, and
// stops. Whatever finishes first, the order kept is the same.
class Race {
 public:
  // Orders at least `beat` long lose too: the caller has a schedule that
  // long already.
  explicit Race(int64_t beat) : beat_(beat) {
    for (std::atomic<int64_t>& length : lengths_) length = kUnfinished;
  }

  void Finish(Order order, std::optional<int64_t> length) {
    if (length) lengths_[static_cast<size_t>(order)] = *length;
  }

  bool Lost(Order order, int64_t length_so_far) const {
    if (length_so_far >= beat_) return true;
    const size_t i = static_cast<size_t>(order);
    for (size_t j = 0; j < kOrderCount; ++j) {
      const int64_t length = lengths_[j].load(std::memory_order_relaxed);
      if (length == kUnfinished || j == i) continue;
      if (j < i ? length_so_far >= length : length_so_far > length) {
        return true;
      }
    }
    return false;
  }

 private:
  static constexpr int64_t kUnfinished = -1;
  const int64_t beat_;
  std::array<std::atomic<int64_t>, kOrderCount> lengths_;
};

// An order's schedule: its length, nullopt where the order gives up or
// lost; the scheduler that placed it where it recorded.
struct Tried {
  Order order = Order::kBusiestLaneFirst;
  std::optional<int64_t> length;
  std::unique_ptr<Scheduler> scheduler;
};

// Whether `a` is kept before `b`.
bool Better(const Tried& a, const Tried& b) {
  if (!a.length) return false;
  if (!b.length) return true;
  return std::tuple(*a.length, a.order) < std::tuple(*b.length, b.order);
}

Tried TryOrder(const PhaseTraffic& traffic,
               const std::vector<int64_t>& priority,
               const ReceiverUnions& unions, Order order, bool record,
               Race& race) {
  Tried tried;
  tried.order = order;
  tried.scheduler = std::make_unique<Scheduler>(traffic, unions, record);
  tried.length =
      RunOrder(*tried.scheduler, order, traffic, priority,
               [&](int64_t length) { return race.Lost(order, length); });
  race.Finish(order, tried.length);
  if (!record) tried.scheduler.reset();
  return tried;
}

// Phases with fewer packet-receiver pairs are scheduled on one thread: a
// thread's start would cost more than it saves.
constexpr int64_t kParallelScheduleWork = 4096;

// A phase's packets and packet-receiver pairs: what scheduling it costs.
int64_t ScheduleWork(const PhaseTraffic& traffic) {
  int64_t work = 0;
  for (const auto& p : traffic.packets()) work += 1 + p.receiver_count;
  return work;
}

// The shortest schedule of the orders (the first of equals), recorded if
// `record`: every order records its starts as it goes, which costs less
// than placing the packets once more in the order found. The orders are
// independent, so on a large phase two threads take them in turn: the
// same result, sooner on two cores. Each keeps only its shortest so far beside the one
// it is trying.
Tried ShortestOrder(const PhaseTraffic& traffic,
                    const std::vector<int64_t>& priority, bool record,
                    bool receiver_unions,
                    int64_t beat = std::numeric_limits<int64_t>::max()) {
  const ReceiverUnions unions = receiver_unions
                                    ? CoverWideReceiverSets(traffic)
                                    : ReceiverUnions(traffic.packets().size());
  Race race(beat);
  std::atomic<size_t> next = 0;
  // One best for both threads: only the best and each thread's current
  // scheduler are held. Better is a strict order, so the one kept does not
  // depend on which thread finishes first.
  std::mutex mutex;
  Tried best;
  auto try_in_turn = [&] {
    for (size_t k; (k = next++) < kOrderCount;) {
      Tried tried = TryOrder(traffic, priority, unions, kTrialSequence[k],
                             record, race);
      Tried dropped;  // freed outside the lock
      std::lock_guard<std::mutex> lock(mutex);
      if (Better(tried, best)) std::swap(tried, best);
      dropped = std::move(tried);
    }
  };
  if (ScheduleWork(traffic) >= kParallelScheduleWork) {
    std::thread thread(try_in_turn);
    try_in_turn();
    thread.join();
  } else {
    try_in_turn();
  }
  // Without `beat` the order kept has a length: busiest-lane-first and
  // rounds never give up, and the shortest never loses.
  return best;
}

// Calls place(tile, instruction) for every control instruction of the
// schedule that starts packet p of `traffic` at starts[p], packet by packet
// (the rules of exchange_schedule.h: the Send on the sender, the Select and
// the Pointer on each receiver); returns the schedule's length.
template <typename Place>
int64_t PlaceInstructions(const PhaseTraffic& traffic,
                          std::span<const uint32_t> starts, Place place) {
  const ExchangeModel& model = traffic.model();
  const auto& packets = traffic.packets();
  int64_t length = 0;
  for (uint32_t p = 0; p < packets.size(); ++p) {
    const auto& packet = packets[p];
    const int64_t t = starts[p];
    const uint32_t cycle = starts[p];
    place(packet.sender, fb::ControlInstruction(cycle, p, 0,
                                                fb::ControlKind::Send));
    const std::span<const int> receivers = traffic.ReceiversOf(packet);
    int64_t latest = 0;
    for (uint32_t i = 0; i < receivers.size(); ++i) {
      const int r = receivers[i];
      const int64_t latency = model.RouteLatency(r);
      place(r, fb::ControlInstruction(cycle, p, i, fb::ControlKind::Select));
      place(r, fb::ControlInstruction(static_cast<uint32_t>(t + latency), p, i,
                                      fb::ControlKind::Pointer));
      latest = std::max(latest, latency);
    }
    length = std::max(length, PacketEnd(!receivers.empty(), t, latest,
                                        model.Duration(packet.words)));
  }
  return length;
}

}  // namespace

fb::ExchangeScheduleT SchedulePhase(const PhaseTraffic& traffic,
                                    bool receiver_unions) {
  return ScheduleFromStarts(traffic,
                            SchedulePhaseStarts(traffic, receiver_unions));
}

std::vector<uint32_t> SchedulePhaseStarts(const PhaseTraffic& traffic,
                                          bool receiver_unions) {
  Tried best = ShortestOrder(traffic, PacketPriorities(traffic),
                             /*record=*/true, receiver_unions);
  return best.scheduler->TakeStarts();
}

std::optional<std::vector<uint32_t>> SchedulePhaseStartsShorterThan(
    const PhaseTraffic& traffic, int64_t beat) {
  Tried best = ShortestOrder(traffic, PacketPriorities(traffic),
                             /*record=*/true, /*receiver_unions=*/true, beat);
  if (!best.length) return std::nullopt;
  return best.scheduler->TakeStarts();
}

fb::ExchangeScheduleT ScheduleFromStarts(const PhaseTraffic& traffic,
                                         std::vector<uint32_t> starts) {
  const int tiles = traffic.model().tiles;
  // Each tile's instructions, counted first so that each vector is made
  // once at its size: a whole model's program holds ~10^7 of them.
  std::vector<uint32_t> count(tiles, 0);
  PlaceInstructions(traffic, starts,
                    [&](int tile, const fb::ControlInstruction&) {
                      ++count[tile];
                    });
  std::vector<std::vector<fb::ControlInstruction>> control(tiles);
  for (int tile = 0; tile < tiles; ++tile) control[tile].reserve(count[tile]);
  const int64_t length = PlaceInstructions(
      traffic, starts, [&](int tile, const fb::ControlInstruction& ins) {
        control[tile].push_back(ins);
      });
  fb::ExchangeScheduleT schedule;
  schedule.starts = std::move(starts);
  for (int tile = 0; tile < tiles; ++tile) {
    if (control[tile].empty()) continue;
    auto tc = std::make_unique<fb::TileControlT>();
    tc->tile = static_cast<uint32_t>(tile);
    tc->instructions = std::move(control[tile]);
    // A total order: a packet's receivers are distinct tiles, so no tile
    // holds two instructions of one packet and kind.
    std::sort(tc->instructions.begin(), tc->instructions.end(),
              [](const fb::ControlInstruction& a,
                 const fb::ControlInstruction& b) {
                return std::tuple(a.cycle(), a.packet(), a.kind()) <
                       std::tuple(b.cycle(), b.packet(), b.kind());
              });
    schedule.tiles.push_back(std::move(tc));
  }
  schedule.length = static_cast<uint32_t>(length);
  schedule.bound = static_cast<uint32_t>(traffic.EndpointBound());
  return schedule;
}

ScheduleFigures FiguresOfStarts(const PhaseTraffic& traffic,
                                std::span<const uint32_t> starts) {
  ScheduleFigures figures;
  int64_t last = -1;
  figures.length = PlaceInstructions(
      traffic, starts, [&](int tile, const fb::ControlInstruction& ins) {
        const int64_t cycle = ins.cycle();
        if (cycle > last || (cycle == last && tile < figures.last_tile)) {
          last = cycle;
          figures.last_tile = tile;
        }
      });
  figures.bound = traffic.EndpointBound();
  return figures;
}

namespace {

// PlannedPhaseLength's lengths of large phases, by PhaseTraffic::Digest.
// One thread schedules a phase; another that needs the same one meanwhile
// waits for it (its cores are better spent on the first one's orders).
class PlannedLengths {
 public:
  using Digest = std::pair<uint64_t, uint64_t>;

  int64_t Get(const Digest& digest, const std::function<int64_t()>& schedule) {
    std::unique_lock lock(mutex_);
    auto [it, claimed] = entries_.try_emplace(digest);
    Entry* entry = &it->second;  // stays valid as others are added
    if (!claimed) {
      done_.wait(lock, [entry] { return entry->state != State::kPending; });
      if (entry->state == State::kKnown) return entry->length;
      lock.unlock();  // the thread that claimed it failed: schedule here
      return schedule();
    }
    lock.unlock();
    int64_t length = 0;
    try {
      length = schedule();
    } catch (...) {
      Settle(entry, State::kFailed, 0);
      throw;
    }
    Settle(entry, State::kKnown, length);
    return length;
  }

 private:
  enum class State { kPending, kKnown, kFailed };
  struct Entry {
    State state = State::kPending;
    int64_t length = 0;
  };
  struct Hash {
    size_t operator()(const Digest& d) const {
      return static_cast<size_t>(d.first);
    }
  };

  void Settle(Entry* entry, State state, int64_t length) {
    {
      std::lock_guard lock(mutex_);
      entry->state = state;
      entry->length = length;
    }
    done_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable done_;
  std::unordered_map<Digest, Entry, Hash> entries_;
};

int64_t ShortestLength(const PhaseTraffic& traffic) {
  return *ShortestOrder(traffic, PacketPriorities(traffic), /*record=*/false,
                        /*receiver_unions=*/true)
              .length;
}

}  // namespace

int64_t PlannedPhaseLength(const PhaseTraffic& traffic) {
  if (traffic.empty()) return 0;
  const ExchangeModel& model = traffic.model();
  if (traffic.packets().size() > kExactPlanningPackets) {
    return traffic.EndpointBound() + model.IssueWidth(fb::ControlKind::Send) +
           model.RouteLatency(model.tiles - 1);
  }
  if (ScheduleWork(traffic) < kMemoPlanningWork) return ShortestLength(traffic);
  static PlannedLengths* const memo = new PlannedLengths;
  return memo->Get(traffic.Digest(),
                   [&traffic] { return ShortestLength(traffic); });
}

}  // namespace tilec::kernels
