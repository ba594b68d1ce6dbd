// Lowering's driver: one op dispatched by kind to the lowering of its
// seam (lowering_{storage,gemm,rows,copies,attention}.cc), the helpers those
// share (lowering_internal.h), and the checks of a planned module.

#include "passes/lower/lowering.h"

#include <algorithm>
#include <set>

#include "formats/print.h"
#include "passes/core/ownership.h"
#include "passes/lower/lowering_internal.h"

namespace tilec::lower {
namespace {

using passes::HeldBoxes;
using passes::TilesUsed;

}  // namespace

std::string OpWhere(const fb::OperationT& op) {
  return "op " + std::to_string(op.id) + " (" + ir::OpKindText(op.kind) + " " +
         op.name + ")";
}

Phase* NewPhase(PhaseList* list, Phase::Kind kind, std::string label) {
  list->emplace_back();
  list->back().kind = kind;
  list->back().label = std::move(label);
  return &list->back();
}

std::vector<Phase> Normalize(PhaseList* list) {
  std::vector<Phase> out;
  for (Phase& p : *list) {
    if (p.Empty()) continue;
    if (p.kind == Phase::Kind::kCompute && !out.empty() &&
        out.back().kind == Phase::Kind::kCompute) {
      for (VCall& c : p.calls) out.back().calls.push_back(std::move(c));
      if (out.back().label != p.label) out.back().label += "+" + p.label;
      continue;
    }
    out.push_back(std::move(p));
  }
  return out;
}

ReductionChoice ChoiceFromReduction(const fb::ReductionT* r) {
  ReductionChoice c;
  if (r == nullptr) return c;
  for (const auto& scratch : r->scratch) {
    if (scratch->role == fb::ScratchRole::RemotePartials) {
      c.partials = scratch->dtype;
    }
  }
  c.partials_per_epoch = 0;
  if (r->stages.size() > 1) {
    for (const auto& s : r->stages) {
      c.partials_per_epoch = std::max(c.partials_per_epoch, s->partials);
    }
  }
  return c;
}

StatusOr<OpProgram> Lowering::Lower(const fb::OperationT& op) {
  return Lower(op, ChoiceFromReduction(op.reduction.get()));
}

StatusOr<OpProgram> Lowering::Lower(const fb::OperationT& op,
                                    const ReductionChoice& choice,
                                    bool alias_in_place, bool k_pieces) {
  const LoweringOptions saved = options_;
  options_.alias_in_place = alias_in_place;
  options_.k_pieces = k_pieces;
  StatusOr<OpProgram> result = Lower(op, choice);
  options_ = saved;
  return result;
}

StatusOr<int> Lowering::AliasableTiles(const fb::OperationT& op) {
  int count = 0;
  if (op.kind == fb::OpKind::MatMul) {
    StatusOr<GemmGrid> g = ReadGemmGrid(*module_, op);
    if (!g.ok()) return g.status();
    const fb::ValueT* A = value(op.operands[0]);
    if (!A || !A->ownership) return 0;
    for (int mi = 0; mi < g->m; ++mi) {
      for (int ni = 0; ni < g->n; ++ni) {
        for (int ki = 0; ki < g->k; ++ki) {
          const int t = g->Tile(mi, ni, ki);
          if (HeldBoxes(*A->ownership, A->shape, t).empty()) continue;
          StatusOr<const Storage*> s = Operand(op.operands[0], t, op.id);
          if (!s.ok()) return s.status();
          count += CanUseInPlace(**s) &&
                   ContiguousOffset(g->ABox(mi, ki), (*s)->segments).has_value();
        }
      }
    }
  } else if (op.kind == fb::OpKind::Redistribute && op.operands.size() == 1 &&
             op.results.size() == 1) {
    const fb::ValueT* X = value(op.operands[0]);
    const fb::ValueT* Y = value(op.results[0]);
    if (!X || !Y || !X->ownership || !Y->ownership) return 0;
    for (int t : TilesUsed(*Y->ownership, Y->shape)) {
      if (HeldBoxes(*X->ownership, X->shape, t).empty()) continue;
      StatusOr<const Storage*> s = Operand(op.operands[0], t, op.id);
      if (!s.ok()) return s.status();
      count += (*s)->segments ==
               Consecutive(HeldBoxes(*Y->ownership, Y->shape, t));
    }
  }
  return count;
}

StatusOr<OpProgram> Lowering::Lower(const fb::OperationT& op,
                                    const ReductionChoice& choice) {
  transfers_.Clear();
  notes_[op.id] = OpNotes();
  OpProgram out;
  out.op = op.id;
  out.reads = op.operands;
  out.writes = op.results;
  for (uint32_t r : op.results) {
    const fb::ValueT* v = value(r);
    if (!v || !v->ownership) {
      return Status::BadInput(OpWhere(op) + ": result %" + std::to_string(r) +
                              " has no ownership (run plan-ownership first)");
    }
    if (storage_.count(r)) {
      return Status::Internal(OpWhere(op) + ": result %" + std::to_string(r) +
                              " lowered twice");
    }
  }
  Status status;
  switch (op.kind) {
    case fb::OpKind::MatMul:
      status = LowerGemm(op, choice, &out);
      break;
    case fb::OpKind::BiasAdd:
    case fb::OpKind::Gelu:
    case fb::OpKind::Add:
    case fb::OpKind::Cast:
    case fb::OpKind::Fused:
      status = LowerElementwise(op, &out);
      break;
    case fb::OpKind::LayerNorm:
    case fb::OpKind::Softmax:
      status = LowerRowWise(op, &out);
      break;
    case fb::OpKind::Moments:
      status = LowerMoments(op, choice, &out);
      break;
    case fb::OpKind::Normalize:
      status = LowerNormalize(op, &out);
      break;
    case fb::OpKind::Redistribute:
      status = LowerRedistribute(op, &out);
      break;
    case fb::OpKind::CopyRows:
      status = LowerCopyRows(op, &out);
      break;
    case fb::OpKind::AttentionScores:
    case fb::OpKind::AttentionContext:
      status = LowerAttention(op, &out);
      break;
    case fb::OpKind::Patchify:
      status = LowerHostOp(op);
      break;
    default:
      status = Status::BadInput(OpWhere(op) +
                                ": no lowering for this op kind yet");
  }
  if (!status.ok()) return status;
  transfers_.Clear();
  for (Phase& ph : out.phases) {
    CompactTransfers(&ph.transfers);
    // Compaction joins many transfers, and the program is kept to the end
    // of emit-device (10^6 transfers on a whole model): no spare capacity.
    ph.transfers.shrink_to_fit();
    for (VTransfer& t : ph.transfers) t.destinations.shrink_to_fit();
    ph.calls.shrink_to_fit();
  }
  return out;
}

bool IsHostOp(const fb::OperationT& op) {
  return op.recipe && op.recipe->kind == fb::RecipeKind::Host;
}

Status CheckPlanned(const fb::ModuleT& module) {
  std::set<uint32_t> device_read;
  for (const auto& op : module.ops) {
    if (IsHostOp(*op)) continue;
    device_read.insert(op->operands.begin(), op->operands.end());
  }
  for (const auto& v : module.values) {
    const bool host_only =
        v->role == fb::ValueRole::Input && !device_read.count(v->id);
    if (!v->ownership && !host_only) {
      return Status::BadInput("value %" + std::to_string(v->id) + " (" +
                              v->name +
                              ") has no ownership: run plan-ownership first");
    }
  }
  return Status::Ok();
}

// No phases: the host writes the result's boxes on every tile of its
// ownership before superstep 0, as it writes an input.
Status Lowering::LowerHostOp(const fb::OperationT& op) {
  const fb::ValueT* in =
      op.operands.size() == 1 ? value(op.operands[0]) : nullptr;
  if (!IsHostOp(op) || in == nullptr || in->role != fb::ValueRole::Input) {
    return Status::BadInput(OpWhere(op) +
                            ": patchify runs only on the host (recipe host) "
                            "as it writes a graph input");
  }
  const fb::ValueT* v = value(op.results[0]);
  for (int t : TilesUsed(*v->ownership, v->shape)) {
    Storage* s = NewValueStorage(v->id, t, op.id, BufferKind::kValue, nullptr,
                                 false);
    buffers_[s->buffer].host_written = true;
  }
  return Status::Ok();
}

}  // namespace tilec::lower
