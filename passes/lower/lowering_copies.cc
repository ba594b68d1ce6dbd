// Lowering of the ops that only move rows: Redistribute (one ownership to
// another) and CopyRows (the shared row plan, passes/core/row_plan.h).

#include "passes/lower/lowering.h"

#include <set>

#include "passes/core/ownership.h"
#include "passes/core/row_plan.h"
#include "passes/lower/lowering_internal.h"

namespace tilec::lower {
namespace {

using passes::HeldBoxes;
using passes::TilesUsed;

}  // namespace

Status Lowering::LowerRedistribute(const fb::OperationT& op, OpProgram* out) {
  const std::string where = OpWhere(op);
  if (op.operands.size() != 1 || op.results.size() != 1) {
    return Status::BadInput(where + ": a redistribution has one operand and "
                                    "one result");
  }
  const uint32_t x_id = op.operands[0], y_id = op.results[0];
  const fb::ValueT* X = value(x_id);
  const fb::ValueT* Y = value(y_id);
  if (!X->ownership) {
    return Status::BadInput(where + ": operand has no ownership");
  }
  if (X->dtype != Y->dtype || X->fp8_scale_exp != Y->fp8_scale_exp ||
      X->shape != Y->shape) {
    return Status::BadInput(where + ": source and result differ in dtype or "
                                    "shape");
  }
  OpNotes& notes = notes_[op.id];
  PhaseList list;
  Phase* copies = NewPhase(&list, Phase::Kind::kCompute, "local copies");
  Phase* exchange = NewPhase(&list, Phase::Kind::kExchange, "redistribute");
  std::set<int> aliased;
  for (int t : TilesUsed(*Y->ownership, Y->shape)) {
    ++notes.tiles;
    const Segments natural =
        Consecutive(HeldBoxes(*Y->ownership, Y->shape, t));
    if (options_.alias_in_place && !store_in_.count(y_id) &&
        !HeldBoxes(*X->ownership, X->shape, t).empty()) {
      StatusOr<const Storage*> xs = Operand(x_id, t, op.id);
      if (!xs.ok()) return xs.status();
      if ((*xs)->segments == natural) {
        std::vector<Storage>& per_tile = storage_[y_id];
        if (per_tile.empty()) per_tile.resize(tiles_);
        per_tile[t] = **xs;
        aliased.insert(t);
        ++notes.aliased_tiles;
        continue;
      }
    }
    NewValueStorage(y_id, t, op.id, BufferKind::kValue, nullptr, false);
  }
  // The planner chose the form (passes::RedistributeOpCost).
  exchange->unicast = op.recipe && op.recipe->unicast;
  const passes::TransferPlan plan = passes::PlanTransfers(
      *X->ownership, *Y->ownership, X->shape, ir::DTypeBytes(X->dtype));
  for (const passes::Transfer& tr : plan.transfers) {
    StatusOr<const Storage*> from = Operand(x_id, tr.source_tile, op.id);
    if (!from.ok()) return from.status();
    for (int dst : tr.destination_tiles) {
      const Storage* to = Find(y_id, dst);
      if (!to) return Status::Internal(where + ": no destination storage");
      TILEC_RETURN_IF_ERROR(Move(tr.box, tr.source_tile, **from, dst, *to,
                                 X->dtype, op.id, copies, exchange));
    }
  }
  for (const passes::LocalCopy& lc : plan.local_copies) {
    if (aliased.count(lc.tile)) continue;
    StatusOr<const Storage*> from = Operand(x_id, lc.tile, op.id);
    if (!from.ok()) return from.status();
    TILEC_RETURN_IF_ERROR(Move(lc.box, lc.tile, **from, lc.tile,
                               *Find(y_id, lc.tile), X->dtype, op.id, copies,
                               exchange));
  }
  out->phases = Normalize(&list);
  return Status::Ok();
}

// The shared row plan (passes/core/row_plan.h): local copies first, then
// one exchange phase. Move sees the operand's storage shifted into the
// result's rows, so one box names the rows on both sides.
Status Lowering::LowerCopyRows(const fb::OperationT& op, OpProgram* out) {
  const std::string where = OpWhere(op);
  if (op.operands.empty() || op.results.size() != 1) {
    return Status::BadInput(where + ": a row copy has operands and one "
                                    "result");
  }
  const uint32_t y_id = op.results[0];
  const fb::ValueT* Y = value(y_id);
  std::vector<passes::RowOperand> operands;
  for (uint32_t id : op.operands) {
    const fb::ValueT* X = value(id);
    if (!X->ownership) {
      return Status::BadInput(where + ": operand %" + std::to_string(id) +
                              " has no ownership");
    }
    if (X->dtype != Y->dtype || X->fp8_scale_exp != Y->fp8_scale_exp) {
      return Status::BadInput(where + ": operand %" + std::to_string(id) +
                              " and the result differ in dtype or scale");
    }
    operands.push_back({X->ownership.get(), X->shape});
  }
  const std::vector<ir::RowSegment> rows = ir::RowSegments(op);
  OpNotes& notes = notes_[op.id];
  PhaseList list;
  Phase* copies = NewPhase(&list, Phase::Kind::kCompute, "local copies");
  Phase* exchange = NewPhase(&list, Phase::Kind::kExchange, "copy rows");
  for (int t : TilesUsed(*Y->ownership, Y->shape)) {
    ++notes.tiles;
    NewValueStorage(y_id, t, op.id, BufferKind::kValue, nullptr, false);
  }
  const passes::RowCopyPlan plan = passes::PlanRowCopies(
      operands, *Y->ownership, Y->shape, rows, ir::DTypeBytes(Y->dtype));
  auto move = [&](int k, const Box& box, int src_tile, int dst_tile,
                  int64_t shift) -> Status {
    StatusOr<const Storage*> from = Operand(op.operands[k], src_tile, op.id);
    if (!from.ok()) return from.status();
    const Storage* to = Find(y_id, dst_tile);
    if (!to) return Status::Internal(where + ": no destination storage");
    const Storage shifted{(*from)->buffer,
                          passes::ShiftRows((*from)->segments, shift)};
    return Move(passes::ShiftBox(box, shift), src_tile, shifted, dst_tile,
                *to, Y->dtype, op.id, copies, exchange);
  };
  for (const passes::RowTransfer& tr : plan.transfers) {
    for (const passes::RowDestination& d : tr.destinations) {
      TILEC_RETURN_IF_ERROR(
          move(tr.operand, tr.box, tr.source_tile, d.tile, d.shift));
    }
  }
  for (const passes::RowLocalCopy& lc : plan.local_copies) {
    TILEC_RETURN_IF_ERROR(move(lc.operand, lc.box, lc.tile, lc.tile, lc.shift));
  }
  out->phases = Normalize(&list);
  return Status::Ok();
}

}  // namespace tilec::lower
