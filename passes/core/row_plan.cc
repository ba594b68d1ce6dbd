#include "passes/core/row_plan.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "passes/core/tile_plan.h"

namespace tilec::passes {
namespace {

using BoxKey = std::array<int64_t, 2 * kMaxRank>;

BoxKey KeyOf(const Box& box) {
  BoxKey k{};
  for (int a = 0; a < kMaxRank; ++a) {
    k[a] = box.begin[a];
    k[kMaxRank + a] = box.end[a];
  }
  return k;
}

// One distinct block of an operand: the boxes it holds and the tiles that
// hold them (replicas), ascending, and the rows it spans.
struct Block {
  std::vector<Box> boxes;
  std::vector<int> holders;
  int64_t first_row = 0, end_row = 0;
};

std::vector<Block> BlocksOf(const RowOperand& operand) {
  std::vector<Block> blocks;
  std::map<std::vector<BoxKey>, size_t> index;
  ForEachHeldBoxes(*operand.ownership, operand.shape,
                   [&](int tile, std::span<const Box> boxes) {
    std::vector<BoxKey> key;
    for (const Box& b : boxes) key.push_back(KeyOf(b));
    auto [it, inserted] = index.emplace(std::move(key), blocks.size());
    if (inserted) {
      Block block;
      block.boxes.assign(boxes.begin(), boxes.end());
      block.first_row = boxes.front().begin[0];
      block.end_row = boxes.front().end[0];
      for (const Box& b : boxes) {
        block.first_row = std::min(block.first_row, b.begin[0]);
        block.end_row = std::max(block.end_row, b.end[0]);
      }
      blocks.push_back(std::move(block));
    }
    blocks[it->second].holders.push_back(tile);
  });
  return blocks;
}

// The blocks of one operand by their first row, so that the blocks a row
// range meets are found without reading every block (a destination box
// meets a few of the operand's blocks, and there are as many destinations
// as tiles).
class BlocksByRow {
 public:
  explicit BlocksByRow(const std::vector<Block>& blocks) : blocks_(blocks) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      by_first_.emplace_back(blocks[i].first_row, i);
      tallest_ = std::max(tallest_, blocks[i].end_row - blocks[i].first_row);
    }
    std::sort(by_first_.begin(), by_first_.end());
  }

  // The indices, ascending, of the blocks with rows in [begin, end): a
  // block that ends after `begin` starts less than `tallest_` rows before.
  const std::vector<size_t>& Meeting(int64_t begin, int64_t end) {
    meeting_.clear();
    auto it =
        std::lower_bound(by_first_.begin(), by_first_.end(),
                         std::pair<int64_t, size_t>(begin - tallest_ + 1, 0));
    for (; it != by_first_.end() && it->first < end; ++it) {
      if (blocks_[it->second].end_row > begin) meeting_.push_back(it->second);
    }
    std::sort(meeting_.begin(), meeting_.end());
    return meeting_;
  }

 private:
  const std::vector<Block>& blocks_;
  std::vector<std::pair<int64_t, size_t>> by_first_;
  int64_t tallest_ = 0;
  std::vector<size_t> meeting_;
};

}  // namespace

Box ShiftBox(Box box, int64_t shift) {
  box.begin[0] += shift;
  box.end[0] += shift;
  return box;
}

Segments ShiftRows(const Segments& segments, int64_t shift) {
  Segments out = segments;
  for (Segment& s : out) s.box = ShiftBox(s.box, shift);
  return out;
}

RowCopyPlan PlanRowCopies(std::span<const RowOperand> operands,
                          const fb::OwnershipT& result,
                          std::span<const int64_t> result_shape,
                          std::span<const ir::RowSegment> rows,
                          int element_bytes) {
  std::vector<std::vector<Block>> blocks;
  for (const RowOperand& o : operands) blocks.push_back(BlocksOf(o));
  std::vector<BlocksByRow> by_row;
  for (const std::vector<Block>& b : blocks) by_row.emplace_back(b);
  std::vector<std::pair<int, std::vector<Box>>> held;
  ForEachHeldBoxes(result, result_shape,
                   [&](int tile, std::span<const Box> boxes) {
    held.emplace_back(tile, std::vector<Box>(boxes.begin(), boxes.end()));
  });
  RowCopyPlan plan;
  int tiles = 0;
  for (const std::vector<Block>& operand : blocks) {
    for (const Block& block : operand) {
      tiles = std::max(tiles, block.holders.back() + 1);
    }
  }
  std::vector<int64_t> sent(tiles, 0);  // bytes so far, by source tile
  // (operand, block, piece) -> its transfer.
  std::map<std::tuple<int, size_t, BoxKey>, size_t> transfer_of;
  const int64_t width = result_shape.back();
  for (const ir::RowSegment& s : rows) {
    const int k = static_cast<int>(s.operand);
    const int64_t shift = s.at - s.first;
    const Box span = Box2(s.at, s.at + s.count, 0, width);
    for (const auto& [tile, boxes] : held) {
      for (const Box& box : boxes) {
        const Box wanted = IntersectBoxes(box, span);
        if (wanted.Empty()) continue;
        const Box source = ShiftBox(wanted, -shift);
        for (size_t bi : by_row[k].Meeting(source.begin[0], source.end[0])) {
          const Block& block = blocks[k][bi];
          for (const Box& have : block.boxes) {
            const Box piece = IntersectBoxes(source, have);
            if (piece.Empty()) continue;
            const int64_t elements = piece.Elements();
            const int64_t bytes = elements * element_bytes;
            if (std::binary_search(block.holders.begin(), block.holders.end(),
                                   tile)) {
              plan.local_copies.push_back(
                  {k, tile, piece, shift, elements, bytes});
              continue;
            }
            auto [it, inserted] = transfer_of.emplace(
                std::make_tuple(k, bi, KeyOf(piece)), plan.transfers.size());
            if (inserted) {
              int from = block.holders.front();
              for (int h : block.holders) {
                if (sent[h] < sent[from]) from = h;
              }
              sent[from] += bytes;
              plan.transfers.push_back({k, from, piece, {}, elements, bytes});
            }
            plan.transfers[it->second].destinations.push_back({tile, shift});
          }
        }
      }
    }
  }
  return plan;
}

TransferCost RowExchangeCost(const RowCopyPlan& plan,
                             std::span<const RowOperand> operands,
                             const fb::OwnershipT& result,
                             std::span<const int64_t> result_shape,
                             int element_bytes, const fb::TargetT& target,
                             PhaseTiming timing) {
  // The same loads as a Redistribute's plan: CostOfPlan counts each
  // destination entry in full, so a tile listed twice receives twice.
  TransferPlan as_plan;
  kernels::PhaseTraffic traffic(kernels::ExchangeModel::FromTarget(target));
  OwnershipStorage held(result, result_shape);
  std::vector<OwnershipStorage> sources;
  sources.reserve(operands.size());
  for (const RowOperand& o : operands) {
    sources.emplace_back(*o.ownership, o.shape);
  }
  std::vector<int> receivers;
  std::vector<RunGroup> groups;
  for (const RowTransfer& t : plan.transfers) {
    Transfer x;
    x.source_tile = t.source_tile;
    x.box = t.box;
    for (const RowDestination& d : t.destinations) {
      x.destination_tiles.push_back(d.tile);
    }
    x.elements = t.elements;
    x.bytes = t.bytes;
    // The runs the lowering moves: the box in the sender's storage of its
    // operand and in the first receiver's of the result, shifted.
    const RowDestination& first = t.destinations.front();
    if (!CountRuns(ShiftBox(t.box, first.shift),
                   ShiftRows(sources[t.operand].Of(t.source_tile), first.shift),
                   held.Of(first.tile), &groups)) {
      groups.assign(1, RunGroup{1, t.elements});
    }
    AddRunPieces(groups, element_bytes, t.source_tile, x.destination_tiles,
                 static_cast<uint32_t>(as_plan.transfers.size()), &traffic);
    as_plan.transfers.push_back(std::move(x));
  }
  TransferCost cost = CostOfPlan(as_plan, target);
  TimeExchange(traffic, target, &cost, timing);
  return cost;
}

StatusOr<int64_t> RowCopyCycles(const RowCopyPlan& plan,
                                std::span<const RowOperand> operands,
                                const fb::OwnershipT& result,
                                std::span<const int64_t> result_shape,
                                int element_bytes,
                                const kernels::CostModel& model,
                                int* slowest_tile) {
  std::map<int, int64_t> per_tile;
  std::map<std::pair<int, int>, Segments> sources;  // (operand, tile)
  std::map<int, Segments> destinations;
  CopyPricer copier(model);
  for (const RowLocalCopy& c : plan.local_copies) {
    auto src = sources.find({c.operand, c.tile});
    if (src == sources.end()) {
      const RowOperand& o = operands[c.operand];
      src = sources
                .emplace(std::make_pair(c.operand, c.tile),
                         Consecutive(HeldBoxes(*o.ownership, o.shape, c.tile)))
                .first;
    }
    auto dst = destinations.find(c.tile);
    if (dst == destinations.end()) {
      dst = destinations
                .emplace(c.tile, Consecutive(HeldBoxes(result, result_shape,
                                                       c.tile)))
                .first;
    }
    StatusOr<int64_t> cycles =
        copier.Cycles(ShiftBox(c.box, c.shift), ShiftRows(src->second, c.shift),
                      dst->second, element_bytes);
    if (!cycles.ok()) return cycles.status();
    per_tile[c.tile] += *cycles;
  }
  int64_t slowest = 0;
  int at = -1;
  for (const auto& [tile, cycles] : per_tile) {
    if (cycles > slowest) {
      slowest = cycles;
      at = tile;
    }
  }
  if (slowest_tile != nullptr) *slowest_tile = at;
  return slowest;
}

}  // namespace tilec::passes
