#include "passes/lower/lowering.h"

#include "passes/core/attention_plan.h"

#include <algorithm>
#include <deque>
#include <set>
#include <tuple>

#include "formats/basics.h"
#include "formats/print.h"
#include "kernels/fused_body.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "passes/core/ownership.h"
#include "passes/core/row_plan.h"

namespace tilec::lower {
namespace {

using passes::Box2;
using passes::HeldBoxes;
using passes::TilesUsed;

std::string OpWhere(const fb::OperationT& op) {
  return "op " + std::to_string(op.id) + " (" + ir::OpKindText(op.kind) + " " +
         op.name + ")";
}

// Binary elementwise kernels (MemoryRule::kBinaryInputs in the registry):
// their two inputs should be in different memory elements.
bool IsBinaryKernel(const std::string& kernel) {
  const kernels::KernelInfo* info = kernels::FindKernel(kernel);
  return info != nullptr &&
         info->memory_rule == kernels::MemoryRule::kBinaryInputs;
}

// Phases under construction; stable addresses for the transfer index.
using PhaseList = std::deque<Phase>;

Phase* NewPhase(PhaseList* list, Phase::Kind kind, std::string label) {
  list->emplace_back();
  list->back().kind = kind;
  list->back().label = std::move(label);
  return &list->back();
}

// Drops empty exchange and compute phases and merges neighbouring compute
// phases (their calls keep their order, so per-tile order is unchanged).
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

}  // namespace


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

// ---------------------------------------------------------------- GEMM grid

StatusOr<GemmGrid> ReadGemmGrid(const fb::ModuleT& module,
                                const fb::OperationT& op) {
  const std::string where = OpWhere(op);
  auto find = [&](uint32_t id) -> const fb::ValueT* {
    for (const auto& v : module.values) {
      if (v->id == id) return v.get();
    }
    return nullptr;
  };
  if (op.operands.size() != 2 || op.results.size() != 1) {
    return Status::BadInput(where + ": a GEMM needs 2 operands and 1 result");
  }
  const fb::ValueT* a = find(op.operands[0]);
  const fb::ValueT* b = find(op.operands[1]);
  const fb::ValueT* c = find(op.results[0]);
  if (!a || !b || !c || a->shape.size() != 2 || b->shape.size() != 2) {
    return Status::BadInput(where + ": operands must be [M,K] and [K,N]");
  }
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Gemm ||
      !op.recipe->layout) {
    return Status::BadInput(where +
                            ": has no gemm recipe with a tile grid layout "
                            "(run plan-ownership first)");
  }
  const fb::RecipeT& r = *op.recipe;
  const fb::OwnershipT& l = *r.layout;
  if (l.kind != fb::OwnershipKind::Blocked || l.partitions.size() != 3 ||
      l.replicas != 1 || !l.sub_partitions.empty()) {
    return Status::BadInput(where + ": recipe layout " +
                            ir::OwnershipText(l) +
                            " is not a blocked [m, k, n] grid "
                            "(docs/planning.md)");
  }
  GemmGrid g;
  g.M = a->shape[0];
  g.K = a->shape[1];
  g.N = b->shape[1];
  g.m = l.partitions[0];
  g.k = l.partitions[1];
  g.n = l.partitions[2];
  g.first = l.first_tile;
  g.stride = l.tile_stride;
  if (g.m != r.m_split || g.n != r.n_split || g.k != r.k_split) {
    return Status::BadInput(
        where + ": recipe splits m" + std::to_string(r.m_split) + " k" +
        std::to_string(r.k_split) + " n" + std::to_string(r.n_split) +
        " disagree with its grid layout " + ir::OwnershipText(l));
  }
  if (b->shape[0] != g.K || c->shape.size() != 2 || c->shape[0] != g.M ||
      c->shape[1] != g.N) {
    return Status::BadInput(where + ": shapes do not form [M,K] x [K,N]");
  }
  if (g.m > g.M || g.k > g.K || g.n > g.N) {
    return Status::BadInput(
        where + ": grid m" + std::to_string(g.m) + " k" + std::to_string(g.k) +
        " n" + std::to_string(g.n) + " has more parts than [M,K,N] = [" +
        std::to_string(g.M) + "," + std::to_string(g.K) + "," +
        std::to_string(g.N) + "]");
  }
  const int64_t last =
      g.first + (int64_t{g.m} * g.n * g.k - 1) * int64_t{g.stride};
  if (module.target && last >= module.target->tiles) {
    return Status::BadInput(where + ": grid uses tile " + std::to_string(last) +
                            " but the target has " +
                            std::to_string(module.target->tiles));
  }
  if (r.staging != fb::Staging::Complete && r.chunk_k < 1) {
    return Status::BadInput(where + ": staged recipe without chunk_k");
  }
  g = passes::MakeGemmGrid(g.M, g.K, g.N, g.m, g.k, g.n, g.first, g.stride,
                           r.staging, r.chunk_k, r.batch_chunks);
  return g;
}

Lowering::Lowering(const fb::ModuleT& module, const kernels::CostModel& model,
                   LoweringOptions options)
    : module_(module), model_(model), options_(options) {
  tiles_ = module.target ? module.target->tiles : 0;
  for (const auto& v : module.values) values_[v->id] = v.get();
  for (const auto& op : module.ops) {
    for (uint32_t r : op->results) producer_[r] = op.get();
  }
}

const fb::ValueT* Lowering::value(uint32_t id) const {
  auto it = values_.find(id);
  return it == values_.end() ? nullptr : it->second;
}

const Storage* Lowering::Find(uint32_t value, int tile) const {
  auto it = storage_.find(value);
  if (it == storage_.end() || tile < 0 || tile >= tiles_) return nullptr;
  const Storage& s = it->second[tile];
  return s.buffer < 0 ? nullptr : &s;
}

std::vector<int> Lowering::TilesOf(uint32_t value) const {
  std::vector<int> out;
  auto it = storage_.find(value);
  if (it == storage_.end()) return out;
  for (int t = 0; t < tiles_; ++t) {
    if (it->second[t].buffer >= 0) out.push_back(t);
  }
  return out;
}

std::map<int, int> Lowering::StoreLike(uint32_t value, uint32_t like) {
  std::map<int, int> copies;
  const fb::ValueT* v = values_.at(value);
  std::vector<Storage>& per_tile = storage_[value];
  per_tile.assign(tiles_, Storage{});
  for (int t : TilesOf(like)) {
    const Storage& from = storage_.at(like)[t];
    VBuffer b = buffers_[from.buffer];
    b.id = static_cast<int>(buffers_.size());
    b.value = value;
    b.scale_exp = ir::StorageScaleExp(b.dtype, v->fp8_scale_exp);
    b.name = v->name;
    copies[from.buffer] = b.id;
    per_tile[t] = Storage{b.id, from.segments};
    buffers_.push_back(std::move(b));
  }
  return copies;
}

int64_t Lowering::ScratchBytesPerTile(uint32_t op) const {
  std::map<int, int64_t> per_tile;
  for (const VBuffer& b : buffers_) {
    if (b.op == op && b.kind != BufferKind::kValue) per_tile[b.tile] += b.bytes;
  }
  int64_t most = 0;
  for (const auto& [t, bytes] : per_tile) most = std::max(most, bytes);
  return most;
}

int Lowering::NewBuffer(int tile, int64_t elements, fb::DType dtype,
                        int scale_exp, int64_t value, uint32_t op,
                        BufferKind kind, const std::string& name,
                        bool interleaved) {
  VBuffer b;
  b.id = static_cast<int>(buffers_.size());
  b.tile = tile;
  b.bytes = elements * ir::DTypeBytes(dtype);
  b.dtype = dtype;
  b.scale_exp = ir::StorageScaleExp(dtype, scale_exp);
  b.value = value;
  b.op = op;
  b.kind = kind;
  b.name = name;
  b.interleaved = interleaved;
  buffers_.push_back(std::move(b));
  return buffers_.back().id;
}

Storage* Lowering::NewValueStorage(uint32_t value, int tile, uint32_t op,
                                   BufferKind kind, const Segments* segments,
                                   bool interleaved) {
  const fb::ValueT* v = values_.at(value);
  std::vector<Storage>& per_tile = storage_[value];
  if (per_tile.empty()) per_tile.resize(tiles_);
  Storage& s = per_tile[tile];
  if (segments) {
    s.segments = *segments;
  } else {
    s.segments = Consecutive(HeldBoxes(*v->ownership, v->shape, tile));
  }
  if (auto home = store_in_.find(value); home != store_in_.end()) {
    const Storage* h = Find(home->second, tile);
    if (h != nullptr && h->segments == s.segments &&
        buffers_[h->buffer].dtype == v->dtype &&
        buffers_[h->buffer].scale_exp == v->fp8_scale_exp) {
      s.buffer = h->buffer;
      buffers_[h->buffer].interleaved |= interleaved;
      return &s;
    }
  }
  s.buffer = NewBuffer(tile, Extent(s.segments), v->dtype,
                       v->fp8_scale_exp, value, op, kind, v->name,
                       interleaved);
  return &s;
}

StatusOr<const Storage*> Lowering::Operand(uint32_t value, int tile,
                                           uint32_t op) {
  if (const Storage* s = Find(value, tile)) return s;
  const fb::ValueT* v = this->value(value);
  if (v == nullptr) {
    return Status::BadInput("op " + std::to_string(op) +
                            " reads undefined value %" + std::to_string(value));
  }
  const bool host = v->role == fb::ValueRole::Input ||
                    v->role == fb::ValueRole::Weight;
  if (!host && !options_.assume_operands) {
    return Status::Internal("op " + std::to_string(op) + " reads %" +
                            std::to_string(value) + " on tile " +
                            std::to_string(tile) +
                            " where its producer left nothing");
  }
  if (!v->ownership) {
    return Status::BadInput("value %" + std::to_string(value) + " (" +
                            v->name +
                            ") has no ownership (run plan-ownership first)");
  }
  // The host places every tile of the value at once.
  for (int t : TilesUsed(*v->ownership, v->shape)) {
    if (Find(value, t)) continue;
    Storage* s = NewValueStorage(value, t, op, BufferKind::kValue, nullptr, false);
    VBuffer& b = buffers_[s->buffer];
    b.host_written = host;
    b.resident = v->role == fb::ValueRole::Weight;
  }
  if (const Storage* s = Find(value, tile)) return s;
  return Status::BadInput("op " + std::to_string(op) + " needs %" +
                          std::to_string(value) + " (" + v->name +
                          ") on tile " + std::to_string(tile) +
                          " but its ownership " +
                          ir::OwnershipText(*v->ownership) +
                          " puts nothing there");
}

// A GEMM's result must lie in interleaved memory, in another memory element
// than its left operand: an operand that is itself in interleaved memory
// (another GEMM's result) can be used in place only if that region has a
// second element.
bool Lowering::CanUseInPlace(const Storage& a) const {
  if (!buffers_[a.buffer].interleaved || !module_.target) return true;
  const fb::TargetT& t = *module_.target;
  const int64_t interleaved =
      int64_t{t.sram_bytes} - int64_t{t.standard_elements} * t.element_bytes;
  return t.interleaved_element_bytes > 0 &&
         interleaved >= 2 * int64_t{t.interleaved_element_bytes};
}

void Lowering::AddCall(Phase* phase, VCall call) {
  const kernels::KernelInfo* info = kernels::FindKernel(call.kernel);
  if (info && info->memory_rule == kernels::MemoryRule::kGemmAccumulator &&
      call.args.size() == 3) {
    rules_.push_back({call.args[0].buffer, call.args[2].buffer, true, call.op});
  } else if (IsBinaryKernel(call.kernel) && call.args.size() >= 2 &&
             call.args[0].buffer != call.args[1].buffer) {
    rules_.push_back({call.args[0].buffer, call.args[1].buffer, false, call.op});
  }
  phase->calls.push_back(std::move(call));
}

StatusOr<VSlice> Lowering::Contiguous(uint32_t value, int tile,
                                      const Box& box, const fb::OperationT& op,
                                      std::string_view role, Phase* phase) {
  StatusOr<const Storage*> s = Operand(value, tile, op.id);
  if (!s.ok()) return s.status();
  const fb::ValueT* v = this->value(value);
  const int eb = ir::DTypeBytes(v->dtype);
  if (const std::optional<int64_t> off = ContiguousOffset(box, (*s)->segments)) {
    return VSlice{(*s)->buffer, *off * eb, box.Elements() * eb};
  }
  std::vector<Run> runs;
  if (!LocateRuns(box, (*s)->segments, &runs)) {
    return Status::BadInput(
        OpWhere(op) + ": " + std::string(role) + " %" + std::to_string(value) +
        " (" + v->name + ") does not hold " + passes::FormatBox(box) +
        " on tile " + std::to_string(tile) + " (it is owned " +
        ir::OwnershipText(*v->ownership) +
        "; a Redistribute to the op's layout is missing)");
  }
  Storage temp;
  temp.segments = {Segment{box, 0}};
  temp.buffer = NewBuffer(tile, box.Elements(), v->dtype, v->fp8_scale_exp, -1,
                          op.id, BufferKind::kTemp, v->name + ".gathered",
                          false);
  const Storage from = **s;
  TILEC_RETURN_IF_ERROR(
      Move(box, tile, from, tile, temp, v->dtype, op.id, phase, phase));
  ++notes_[op.id].gathers;
  return VSlice{temp.buffer, 0, box.Elements() * eb};
}

Status Lowering::Move(const Box& box, int src_tile, const Storage& src,
                      int dst_tile, const Storage& dst, fb::DType dtype,
                      uint32_t op, Phase* copies, Phase* exchange) {
  std::vector<Run> runs;
  if (!MoveRuns(box, src.segments, dst.segments, &runs)) {
    return Status::Internal("op " + std::to_string(op) + ": box " +
                            passes::FormatBox(box) + " is not held by tile " +
                            std::to_string(src_tile) + " [" +
                            SegmentsText(src.segments) + "] or tile " +
                            std::to_string(dst_tile) + " [" +
                            SegmentsText(dst.segments) + "]");
  }
  const int eb = ir::DTypeBytes(dtype);
  if (src_tile != dst_tile) {
    // Runs of equal length at constant pitches travel as strided transfers
    // (transfers.h: pieces merge into multicasts as one-piece transfers
    // would, so cycles are those of one transfer per run).
    for (const StridedRun& r : GroupRuns(runs, eb)) {
      transfers_.Add(exchange, src_tile, src.buffer, r, dst_tile, dst.buffer,
                     dtype, op);
    }
    return Status::Ok();
  }
  for (const Run& r : runs) {
    const VSlice from{src.buffer, r.src * eb, r.count * eb};
    if (src.buffer == dst.buffer && r.src == r.dst) continue;
    VCall c;
    c.tile = src_tile;
    c.kernel = kernels::names::kCopy;
    c.args = {from, VSlice{dst.buffer, r.dst * eb, r.count * eb}};
    c.params = {r.count * eb};
    c.op = op;
    AddCall(copies, std::move(c));
    ++notes_[op].local_copy_runs;
  }
  return Status::Ok();
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
    StatusOr<GemmGrid> g = ReadGemmGrid(module_, op);
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
  for (Phase& ph : out.phases) CompactTransfers(&ph.transfers);
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

// ---------------------------------------------------------------- GEMM

// One GEMM being lowered: its grid, operands, phases and per-tile state.
struct Lowering::GemmState {
  const fb::OperationT* op = nullptr;
  ReductionChoice choice;
  GemmGrid g;
  std::string where;
  uint32_t a_id = 0, b_id = 0, c_id = 0;
  const fb::ValueT* A = nullptr;
  const fb::ValueT* B = nullptr;
  const fb::ValueT* C = nullptr;
  // The calls write C directly: no K split, and no staged calls that would
  // round an F16 output again.
  bool to_value = false;
  fb::DType partials = fb::DType::F32;  // the partial / accumulator dtype
  // Phases: C0 X0 C1 X1 ... X(L-1) CL, then the reduction epochs.
  PhaseList list;
  std::vector<Phase*> cphase, xphase;
  // The left operand's delivery plan (the whole panel; chunks clip it).
  passes::TransferPlan a_plan;
  struct Tile {
    bool aliased = false;
    std::vector<Storage> chunk;  // staged chunk c -> its buffer and box
    Storage partial;             // accumulator / partials (or C's storage)
  };
  std::map<int, Tile> tiles;
};

Status Lowering::LowerGemm(const fb::OperationT& op,
                           const ReductionChoice& choice, OpProgram* out) {
  GemmState s;
  TILEC_RETURN_IF_ERROR(StartGemm(op, choice, &s));
  TILEC_RETURN_IF_ERROR(PlanGemmTiles(&s));
  TILEC_RETURN_IF_ERROR(DeliverLeftOperand(&s));
  if (s.g.k == 1) {
    TILEC_RETURN_IF_ERROR(ConvertAccumulators(&s));
  } else {
    TILEC_RETURN_IF_ERROR(ReducePartials(&s));
  }
  out->phases = Normalize(&s.list);
  return Status::Ok();
}

Status Lowering::StartGemm(const fb::OperationT& op,
                           const ReductionChoice& choice, GemmState* s) {
  StatusOr<GemmGrid> grid = ReadGemmGrid(module_, op);
  if (!grid.ok()) return grid.status();
  s->op = &op;
  s->choice = choice;
  s->g = *grid;
  s->where = OpWhere(op);
  s->a_id = op.operands[0];
  s->b_id = op.operands[1];
  s->c_id = op.results[0];
  s->A = value(s->a_id);
  s->B = value(s->b_id);
  s->C = value(s->c_id);
  if (!s->A->ownership || !s->B->ownership || !s->C->ownership) {
    return Status::BadInput(s->where +
                            ": operands have no ownership (run "
                            "plan-ownership first)");
  }
  if (!passes::SameOwnership(*s->C->ownership, s->g.ResultOwnership())) {
    return Status::BadInput(s->where + ": the result must be owned " +
                            ir::OwnershipText(s->g.ResultOwnership()) +
                            " as the grid reduces it (docs/planning.md), not " +
                            ir::OwnershipText(*s->C->ownership));
  }
  const GemmGrid& g = s->g;
  s->to_value = g.k == 1 && (!g.staged || s->C->dtype == fb::DType::F32);
  s->partials = g.k > 1 ? choice.partials : fb::DType::F32;
  int chunks = 1;
  for (int ki = 0; ki < g.k; ++ki) chunks = std::max(chunks, g.Chunks(ki));
  s->cphase.push_back(NewPhase(&s->list, Phase::Kind::kCompute, "stage"));
  for (int c = 0; c < chunks; ++c) {
    s->xphase.push_back(NewPhase(
        &s->list, Phase::Kind::kExchange,
        chunks == 1 ? std::string("stage A") : "stage A " + std::to_string(c)));
    s->cphase.push_back(NewPhase(&s->list, Phase::Kind::kCompute, "gemm"));
  }
  s->a_plan = passes::PlanTransfers(*s->A->ownership, g.ANeeded(), s->A->shape,
                                    ir::DTypeBytes(s->A->dtype));
  return Status::Ok();
}

// Per tile: where its output goes, how it holds A and the parts of its
// panel it copies (passes/core/tile_plan.h decides, as the planner prices),
// its staging buffers and its GEMM calls, one per K piece of each chunk.
Status Lowering::PlanGemmTiles(GemmState* s) {
  const GemmGrid& g = s->g;
  const uint32_t op_id = s->op->id;
  OpNotes& notes = notes_[op_id];
  std::multimap<int, Box> local_boxes;  // tile -> boxes it copies locally
  for (const passes::LocalCopy& lc : s->a_plan.local_copies) {
    local_boxes.insert({lc.tile, lc.box});
  }
  const int a_eb = ir::DTypeBytes(s->A->dtype);
  const int b_eb = ir::DTypeBytes(s->B->dtype);
  StatusOr<kernels::DType> a_kdtype = kernels::DTypeFromFb(s->A->dtype);
  if (!a_kdtype.ok()) return a_kdtype.status();
  const int align = module_.target ? module_.target->alignment : 8;
  passes::GemmTilePlanner planner(g, model_, *a_kdtype, a_eb, align);
  // Calls of tiles that use their left operand in place join the first
  // GEMM phase of the staged tiles (or run alone if none is staged).
  Phase in_place;
  int64_t stage_bytes = 0;
  for (int mi = 0; mi < g.m; ++mi) {
    for (int ki = 0; ki < g.k; ++ki) {
      for (int ni = 0; ni < g.n; ++ni) {
        const int t = g.Tile(mi, ki, ni);
        GemmState::Tile& ts = s->tiles[t];
        const int64_t bm = g.rows.Size(mi), bn = g.cols.Size(ni);
        ++notes.tiles;
        StatusOr<const Storage*> b_store = Operand(s->b_id, t, op_id);
        if (!b_store.ok()) return b_store.status();
        const Storage& bs = **b_store;
        TILEC_RETURN_IF_ERROR(PlaceGemmOutput(s, mi, ki, ni, &ts.partial));
        const Storage* a_here = nullptr;
        if (!HeldBoxes(*s->A->ownership, s->A->shape, t).empty()) {
          StatusOr<const Storage*> a_store = Operand(s->a_id, t, op_id);
          if (!a_store.ok()) return a_store.status();
          a_here = *a_store;
        }
        std::vector<Box> local;
        auto range = local_boxes.equal_range(t);
        for (auto it = range.first; it != range.second; ++it) {
          local.push_back(it->second);
        }
        passes::GemmTileInput in;
        in.mi = mi;
        in.ni = ni;
        in.ki = ki;
        in.a_storage = a_here ? &a_here->segments : nullptr;
        in.local = local;
        in.alias_in_place =
            options_.alias_in_place && a_here && CanUseInPlace(*a_here);
        // Several K pieces accumulate: only into F32, never into an output
        // or 16-bit partial that each call would round again.
        in.k_pieces = options_.k_pieces && !s->to_value &&
                      s->partials == fb::DType::F32;
        StatusOr<passes::GemmTilePlan> plan = planner.Plan(in);
        if (!plan.ok()) return plan.status();
        // One GEMM call per K piece of the operand: [bm, w] x [w, bn].
        auto gemm_calls = [&](Phase* phase, const Storage& a_store,
                              bool accumulate) -> Status {
          for (const Segment& piece : a_store.segments) {
            const int64_t kc0 = piece.box.begin[1], kc1 = piece.box.end[1];
            const int64_t w = kc1 - kc0;
            const std::optional<int64_t> b_off = ContiguousOffset(
                Box2(kc0, kc1, g.cols.Begin(ni), g.cols.End(ni)), bs.segments);
            if (!b_off) {
              return Status::BadInput(
                  s->where + ": right operand %" + std::to_string(s->b_id) +
                  " on tile " + std::to_string(t) + " does not hold rows [" +
                  std::to_string(kc0) + ", " + std::to_string(kc1) +
                  ") of its block contiguously (resident blocks must follow "
                  "the grid, docs/planning.md)");
            }
            const int p_eb = ir::DTypeBytes(buffers_[ts.partial.buffer].dtype);
            VCall call;
            call.tile = t;
            call.kernel = kernels::names::kGemm;
            call.args = {{a_store.buffer, piece.offset * a_eb, bm * w * a_eb},
                         {bs.buffer, *b_off * b_eb, w * bn * b_eb},
                         {ts.partial.buffer, 0, bm * bn * p_eb}};
            call.params = {bm, w, bn, accumulate ? 1 : 0};
            call.op = op_id;
            AddCall(phase, std::move(call));
            accumulate = true;
          }
          return Status::Ok();
        };
        if (plan->aliased) {
          ts.aliased = true;
          ++notes.aliased_tiles;
          const Box a_box = g.ABox(mi, ki);
          Storage view;
          view.buffer = a_here->buffer;
          view.segments = {
              Segment{a_box, *ContiguousOffset(a_box, a_here->segments)}};
          TILEC_RETURN_IF_ERROR(gemm_calls(&in_place, view, false));
          continue;
        }
        notes.k_pieced_tiles += plan->k_pieced;
        StatusOr<int64_t> bytes = StageGemmChunks(s, t, mi, *plan);
        if (!bytes.ok()) return bytes.status();
        stage_bytes = std::max(stage_bytes, *bytes);
        ++notes.staged_tiles;
        for (size_t c = 0; c < ts.chunk.size(); ++c) {
          TILEC_RETURN_IF_ERROR(gemm_calls(s->cphase[c + 1], ts.chunk[c], c > 0));
        }
      }
    }
  }
  notes.stage_bytes_per_tile = stage_bytes;
  Phase* target = notes.staged_tiles > 0 ? s->cphase[1] : s->cphase[0];
  for (VCall& c : in_place.calls) target->calls.push_back(std::move(c));
  return Status::Ok();
}

// Where tile (mi, ki, ni)'s calls write: C's block itself (to_value), or
// an accumulator / partial buffer of the block in interleaved memory.
Status Lowering::PlaceGemmOutput(GemmState* s, int mi, int ki, int ni,
                                 Storage* out) {
  const GemmGrid& g = s->g;
  const int t = g.Tile(mi, ki, ni);
  const Box block = g.CBox(mi, ni);
  if (s->to_value) {
    Storage* cs = NewValueStorage(s->c_id, t, s->op->id, BufferKind::kValue,
                                  nullptr, /*interleaved=*/true);
    if (cs->segments.size() != 1 || !(cs->segments[0].box == block)) {
      return Status::Internal(s->where + ": tile " + std::to_string(t) +
                              " does not hold its block of the result");
    }
    *out = *cs;
    return Status::Ok();
  }
  out->segments = {Segment{block, 0}};
  out->buffer = NewBuffer(t, block.Elements(), s->partials, 0, -1, s->op->id,
                          BufferKind::kPartial,
                          s->op->name + (g.k > 1 ? ".partials" : ".accumulator"),
                          /*interleaved=*/true);
  return Status::Ok();
}

// A staged tile's chunks of K, each one panel or cut into K pieces (the
// plan), in two alternating buffers. Returns the tile's staging bytes.
StatusOr<int64_t> Lowering::StageGemmChunks(GemmState* s, int t, int mi,
                                            const passes::GemmTilePlan& plan) {
  const GemmGrid& g = s->g;
  const int a_eb = ir::DTypeBytes(s->A->dtype);
  const int align = module_.target ? module_.target->alignment : 8;
  const int chunks = static_cast<int>(plan.chunks.size());
  std::vector<Segments> segments(chunks);
  int64_t extent[2] = {0, 0};
  for (int c = 0; c < chunks; ++c) {
    const std::vector<int64_t>& cuts = plan.chunks[c].cuts;
    std::vector<Box> boxes;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      boxes.push_back(Box2(g.rows.Begin(mi), g.rows.End(mi), cuts[i], cuts[i + 1]));
    }
    segments[c] = AlignedPieces(boxes, a_eb, align);
    extent[c % 2] = std::max(extent[c % 2], Extent(segments[c]));
  }
  const int nbuf = std::min(chunks, 2);
  int buf[2] = {-1, -1};
  int64_t bytes = 0;
  for (int i = 0; i < nbuf; ++i) {
    buf[i] = NewBuffer(t, extent[i], s->A->dtype, s->A->fp8_scale_exp, -1,
                       s->op->id, BufferKind::kStage,
                       s->op->name + ".stage" + (nbuf > 1 ? std::to_string(i) : ""),
                       false);
    bytes += buffers_[buf[i]].bytes;
  }
  GemmState::Tile& ts = s->tiles[t];
  for (int c = 0; c < chunks; ++c) {
    Storage chunk;
    chunk.buffer = buf[c % 2];
    chunk.segments = segments[c];
    ts.chunk.push_back(chunk);
  }
  return bytes;
}

// The left operand's transfers and local copies, clipped to each chunk.
Status Lowering::DeliverLeftOperand(GemmState* s) {
  OpNotes& notes = notes_[s->op->id];
  if (notes.staged_tiles > 0) {
    auto deliver = [&](const Box& box, int src, int dst) -> Status {
      auto it = s->tiles.find(dst);
      if (it == s->tiles.end() || it->second.aliased) return Status::Ok();
      StatusOr<const Storage*> from = Operand(s->a_id, src, s->op->id);
      if (!from.ok()) return from.status();
      const std::vector<Storage>& chunk = it->second.chunk;
      for (size_t c = 0; c < chunk.size(); ++c) {
        Box span = chunk[c].segments.front().box;
        span.end[1] = chunk[c].segments.back().box.end[1];
        const Box part = IntersectBoxes(box, span);
        if (part.Empty()) continue;
        TILEC_RETURN_IF_ERROR(Move(part, src, **from, dst, chunk[c],
                                   s->A->dtype, s->op->id, s->cphase[c],
                                   s->xphase[c]));
      }
      return Status::Ok();
    };
    for (const passes::Transfer& tr : s->a_plan.transfers) {
      for (int dst : tr.destination_tiles) {
        TILEC_RETURN_IF_ERROR(deliver(tr.box, tr.source_tile, dst));
      }
    }
    for (const passes::LocalCopy& lc : s->a_plan.local_copies) {
      TILEC_RETURN_IF_ERROR(deliver(lc.box, lc.tile, lc.tile));
    }
  }
  for (const Phase* x : s->xphase) notes.stage_phases += !x->transfers.empty();
  return Status::Ok();
}

// k = 1 with staged calls: each tile's F32 accumulator into C, with the
// cheaper of a cast and a one-partial reduction.
Status Lowering::ConvertAccumulators(GemmState* s) {
  if (s->to_value) return Status::Ok();
  const int c_eb = ir::DTypeBytes(s->C->dtype);
  Phase* last = s->cphase.back();
  for (auto& [t, ts] : s->tiles) {
    const Box cbox = ts.partial.segments[0].box;
    Storage* cs = NewValueStorage(s->c_id, t, s->op->id, BufferKind::kValue,
                                  nullptr, false);
    const int64_t n = cbox.Elements();
    VCall cast;
    cast.tile = t;
    cast.kernel = kernels::names::kCast;
    cast.args = {{ts.partial.buffer, 0, n * 4}, {cs->buffer, 0, n * c_eb}};
    cast.params = {BoxRows(cbox), BoxWidth(cbox)};
    cast.op = s->op->id;
    VCall reduce = cast;
    reduce.kernel = kernels::names::kReducePartials;
    reduce.params = {n};
    StatusOr<int64_t> cc = CallCycles(model_, buffers_, cast);
    StatusOr<int64_t> rc = CallCycles(model_, buffers_, reduce);
    if (!cc.ok()) return cc.status();
    if (!rc.ok()) return rc.status();
    const bool use_reduce = *rc < *cc;
    notes_[s->op->id].converter = std::string(
        use_reduce ? kernels::names::kReducePartials : kernels::names::kCast);
    AddCall(last, use_reduce ? std::move(reduce) : std::move(cast));
  }
  return Status::Ok();
}

// k > 1: tile (mi, ki, ni) reduces its share of block (mi, ni)'s rows: its
// own partial's rows in place (the seed), the same rows of the k - 1 other
// partials received one contiguous piece each, at most
// choice.partials_per_epoch of them per exchange phase, summed in ki order
// straight into C.
Status Lowering::ReducePartials(GemmState* s) {
  const GemmGrid& g = s->g;
  const uint32_t op_id = s->op->id;
  OpNotes& notes = notes_[op_id];
  const int per_epoch =
      s->choice.partials_per_epoch > 0 ? s->choice.partials_per_epoch : g.k;
  // The ki of each epoch's partials (the seed joins the first epoch).
  auto groups_of = [&](int seed_ki) {
    std::vector<std::vector<int>> groups;
    std::vector<int> cur;
    int remote = 0;
    for (int ki = 0; ki < g.k; ++ki) {
      cur.push_back(ki);
      if (ki != seed_ki && ++remote == per_epoch) {
        groups.push_back(cur);
        cur.clear();
        remote = 0;
      }
    }
    if (!cur.empty()) {
      const bool has_remote = std::any_of(
          cur.begin(), cur.end(), [&](int ki) { return ki != seed_ki; });
      if (!groups.empty() && !has_remote) {
        groups.back().insert(groups.back().end(), cur.begin(), cur.end());
      } else {
        groups.push_back(cur);
      }
    }
    return groups;
  };
  int epochs = 1;
  for (int ki = 0; ki < g.k; ++ki) {
    epochs = std::max<int>(epochs, groups_of(ki).size());
  }
  notes.reduce_epochs = epochs;
  notes.partials = ir::DTypeText(s->partials);
  std::vector<Phase*> rx, rc;
  for (int e = 0; e < epochs; ++e) {
    rx.push_back(NewPhase(&s->list, Phase::Kind::kExchange,
                          epochs == 1 ? std::string("partials")
                                      : "partials " + std::to_string(e)));
    rc.push_back(NewPhase(&s->list, Phase::Kind::kCompute, "reduce"));
  }
  const int pb = ir::DTypeBytes(s->partials);
  const int c_eb = ir::DTypeBytes(s->C->dtype);
  for (int mi = 0; mi < g.m; ++mi) {
    for (int ki = 0; ki < g.k; ++ki) {
      for (int ni = 0; ni < g.n; ++ni) {
        const int R = g.Tile(mi, ki, ni);
        const Box rows = g.ResultBox(mi, ki, ni);
        if (rows.Empty()) continue;
        const int64_t n = rows.Elements();
        const int64_t seed_offset =
            (rows.begin[0] - g.rows.Begin(mi)) * BoxWidth(rows);
        ++notes.ranges;
        ++notes.seeds_in_place;
        ++notes.direct_writes;
        Storage* cs = NewValueStorage(s->c_id, R, op_id, BufferKind::kValue,
                                      nullptr, false);
        const VSlice seed = {s->tiles[R].partial.buffer, seed_offset * pb,
                             n * pb};
        const VSlice result = {cs->buffer, 0, n * c_eb};
        const std::vector<std::vector<int>> groups = groups_of(ki);
        int slots = 0;
        for (const auto& group : groups) {
          slots = std::max<int>(slots, group.size() -
                                           std::count(group.begin(), group.end(), ki));
        }
        const int remote = NewBuffer(R, int64_t{slots} * n, s->partials, 0, -1,
                                     op_id, BufferKind::kRemote,
                                     s->op->name + ".remote", false);
        VSlice accumulator;
        if (groups.size() > 1) {
          const int acc = NewBuffer(R, n, fb::DType::F32, 0, -1, op_id,
                                    BufferKind::kResult,
                                    s->op->name + ".accumulator", false);
          accumulator = {acc, 0, n * 4};
        }
        for (size_t e = 0; e < groups.size(); ++e) {
          VCall call;
          call.tile = R;
          call.kernel = kernels::names::kReducePartials;
          call.op = op_id;
          call.params = {n};
          if (e > 0) call.args.push_back(accumulator);
          int slot = 0;
          for (int kj : groups[e]) {
            if (kj == ki) {
              call.args.push_back(seed);
              continue;
            }
            Storage dst;
            dst.buffer = remote;
            dst.segments = {Segment{rows, int64_t{slot} * n}};
            const int T = g.Tile(mi, kj, ni);
            TILEC_RETURN_IF_ERROR(Move(rows, T, s->tiles[T].partial, R, dst,
                                       s->partials, op_id, rc[e], rx[e]));
            call.args.push_back({remote, int64_t{slot} * n * pb, n * pb});
            ++slot;
          }
          call.args.push_back(e + 1 == groups.size() ? result : accumulator);
          AddCall(rc[e], std::move(call));
        }
      }
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- elementwise

namespace {

// Moments go straight into the moments value `M` when every tile holds whole
// rows of `Y` and the moments of exactly those rows; otherwise each tile
// writes partial moments of its slice and they are combined on the moments'
// owners.
bool DirectMoments(const fb::ValueT& Y, const fb::ValueT& M) {
  bool direct =
      TilesUsed(*Y.ownership, Y.shape) == TilesUsed(*M.ownership, M.shape);
  for (int t : TilesUsed(*Y.ownership, Y.shape)) {
    const std::vector<Box> yb = HeldBoxes(*Y.ownership, Y.shape, t);
    const std::vector<Box> mb = HeldBoxes(*M.ownership, M.shape, t);
    direct = direct && yb.size() == 1 && mb.size() == 1 &&
             BoxWidth(yb[0]) == Y.shape[1] &&
             mb[0].begin[0] == yb[0].begin[0] && mb[0].end[0] == yb[0].end[0];
  }
  return direct;
}

}  // namespace

// One elementwise (or fused) op being lowered, and the tile at hand.
struct Lowering::ElementwiseState {
  const fb::OperationT* op = nullptr;
  const fb::ValueT* Y = nullptr;
  const fb::ValueT* M = nullptr;  // the moments result, if any
  std::vector<kernels::BodyKernel> steps;
  bool trailing_moments = false;  // last step ln_moments reads the result
  size_t value_steps = 0;         // the steps that produce values
  bool direct_moments = false;
  PhaseList list;
  Phase* phase = nullptr;
  std::vector<MomentPartial> partials;
  // The tile being lowered: its result and moments storage, and each
  // operand's whole range when the body runs once over it.
  int tile = 0;
  Storage* ys = nullptr;
  Storage* ms = nullptr;
  std::map<uint32_t, VSlice> whole;
};

Status Lowering::StartElementwise(const fb::OperationT& op,
                                  ElementwiseState* s) {
  const std::string where = OpWhere(op);
  s->op = &op;
  s->Y = value(op.results[0]);
  // The calls are the one definition the planner prices too
  // (kernels/fused_body.h).
  StatusOr<std::vector<fb::FusedStepT>> body = kernels::BodySteps(op, *s->Y);
  if (!body.ok()) return body.status();
  StatusOr<std::vector<kernels::BodyKernel>> compiled = kernels::CompileBody(
      *body, op.operands.size(), op.results.size(), where);
  if (!compiled.ok()) return compiled.status();
  s->steps = *std::move(compiled);
  // ln_moments reads the stored result; it is not a value-producing step.
  s->trailing_moments = s->steps.back().kernel == kernels::names::kLnMoments;
  s->value_steps = s->steps.size() - (s->trailing_moments ? 1 : 0);
  const fb::ValueT* Y = s->Y;
  const fb::ValueT* M = op.results.size() == 2 ? value(op.results[1]) : nullptr;
  if (M && (Y->shape.size() != 2 || M->shape.size() != 2 ||
            M->shape[0] != Y->shape[0] || M->shape[1] != 3)) {
    return Status::BadInput(where + ": moments result must be F32 [rows, 3] "
                                    "of a [rows, w] value");
  }
  if (M && M->dtype != fb::DType::F32) {
    return Status::BadInput(where + ": moments result must be F32");
  }
  s->M = M;
  s->phase = NewPhase(&s->list, Phase::Kind::kCompute, ir::OpKindText(op.kind));
  s->direct_moments = M != nullptr && DirectMoments(*Y, *M);
  return Status::Ok();
}

// A body whose steps need no rows (no per-column operand, no moments) runs
// once over a tile's whole range where the result and every full-size
// operand hold it contiguously in the same boxes (a flat range cut into row
// boxes): one call per step as [1, n]. Each such operand's whole range, or
// none.
StatusOr<std::map<uint32_t, VSlice>> Lowering::WholeRanges(
    const ElementwiseState& s) {
  std::map<uint32_t, VSlice> whole;
  bool row_free = !s.trailing_moments;
  for (size_t i = 0; i < s.value_steps; ++i) {
    row_free = row_free && kernels::RowFree(s.steps[i]);
  }
  const Segments& y_segs = s.ys->segments;
  if (!row_free || y_segs.size() <= 1) return whole;
  std::vector<uint32_t> ids;
  std::vector<Segments> operands;
  for (uint32_t id : s.op->operands) {
    if (value(id)->shape != s.Y->shape) continue;
    StatusOr<const Storage*> xs = Operand(id, s.tile, s.op->id);
    if (!xs.ok()) return xs.status();
    ids.push_back(id);
    operands.push_back((*xs)->segments);
  }
  if (!passes::SameContiguousRange(y_segs, operands)) return whole;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int eb = ir::DTypeBytes(value(ids[i])->dtype);
    whole[ids[i]] = {Find(ids[i], s.tile)->buffer, operands[i][0].offset * eb,
                     TotalElements(y_segs) * eb};
  }
  return whole;
}

// Where the row moments of box `b` go: the moments value's rows, or a new
// partial of this slice.
VSlice Lowering::MomentsSlice(ElementwiseState* s, const Box& b) {
  if (s->ms != nullptr) {
    const int64_t off =
        *ContiguousOffset(Box2(b.begin[0], b.end[0], 0, 3), s->ms->segments);
    return {s->ms->buffer, off * 4, BoxRows(b) * 12};
  }
  MomentPartial p;
  p.tile = s->tile;
  p.rows = b;
  p.storage.segments = {Segment{Box2(b.begin[0], b.end[0], 0, 3), 0}};
  p.storage.buffer =
      NewBuffer(s->tile, BoxRows(b) * 3, fb::DType::F32, 0, -1, s->op->id,
                BufferKind::kPartial, s->op->name + ".moments_partial", false);
  s->partials.push_back(p);
  return {p.storage.buffer, 0, BoxRows(b) * 12};
}

// The body's calls on one unit of the tile (a segment of the result, or
// its whole range as [1, n]): each step reads the running value, writes a
// temporary or, last, the result.
Status Lowering::ElementwiseCalls(ElementwiseState* s, const Segment& seg) {
  const fb::OperationT& op = *s->op;
  const int t = s->tile;
  const Box& box = seg.box;
  const int64_t rows = BoxRows(box), w = BoxWidth(box), n = box.Elements();
  const int y_eb = ir::DTypeBytes(s->Y->dtype);
  auto locate = [&](uint32_t id, const Box& b,
                    std::string_view role) -> StatusOr<VSlice> {
    if (!s->whole.empty()) return s->whole.at(id);
    return Contiguous(id, t, b, op, role, s->phase);
  };
  StatusOr<VSlice> running = locate(op.operands[0], box, "operand");
  if (!running.ok()) return running.status();
  VSlice cur = *running;
  for (size_t i = 0; i < s->value_steps; ++i) {
    const kernels::BodyKernel& k = s->steps[i];
    VCall call;
    call.tile = t;
    call.kernel = k.kernel;
    call.op = op.id;
    call.args.push_back(cur);
    if (k.operand >= 0) {
      Box b = box;
      if (k.bias) {
        b.rank = 1;
        b.begin = {box.begin[box.rank - 1], 0, 0, 0};
        b.end = {box.end[box.rank - 1], 0, 0, 0};
      }
      if (k.column) {  // the box's rows of the [rows, 1] column
        b.begin[1] = 0;
        b.end[1] = 1;
      }
      StatusOr<VSlice> extra = locate(op.operands[k.operand], b,
                                      k.bias     ? "bias"
                                      : k.column ? "column"
                                                 : "operand");
      if (!extra.ok()) return extra.status();
      call.args.push_back(*extra);
    }
    VSlice result;
    if (i + 1 == s->value_steps) {
      result = {s->ys->buffer, seg.offset * y_eb, n * y_eb};
    } else {
      const int buf =
          NewBuffer(t, n, k.dtype, k.scale_exp, -1, op.id, BufferKind::kTemp,
                    op.name + ".step" + std::to_string(i), false);
      result = {buf, 0, n * ir::DTypeBytes(k.dtype)};
    }
    call.args.push_back(result);
    if (k.moments) call.args.push_back(MomentsSlice(s, box));
    call.params = kernels::BodyKernelParams(k, rows, w);
    call.fparams = kernels::BodyKernelFparams(k);
    AddCall(s->phase, std::move(call));
    cur = result;
  }
  if (s->trailing_moments) {
    VCall call;
    call.tile = t;
    call.kernel = kernels::names::kLnMoments;
    call.op = op.id;
    call.args = {cur, MomentsSlice(s, box)};
    call.params = {rows, w};
    AddCall(s->phase, std::move(call));
  }
  return Status::Ok();
}

Status Lowering::LowerElementwiseTile(ElementwiseState* s, int t) {
  const fb::OperationT& op = *s->op;
  ++notes_[op.id].tiles;
  s->tile = t;
  const Segments y_segments =
      Consecutive(HeldBoxes(*s->Y->ownership, s->Y->shape, t));
  s->ys = NewValueStorage(op.results[0], t, op.id, BufferKind::kValue,
                          &y_segments, false);
  s->ms = nullptr;
  if (s->M && s->direct_moments) {
    s->ms = NewValueStorage(op.results[1], t, op.id, BufferKind::kValue,
                            nullptr, false);
  }
  StatusOr<std::map<uint32_t, VSlice>> whole = WholeRanges(*s);
  if (!whole.ok()) return whole.status();
  s->whole = *std::move(whole);
  std::vector<Segment> units;
  if (!s->whole.empty()) {
    Box flat;  // the whole range as [1, n]
    flat.rank = 2;
    flat.end = {1, TotalElements(s->ys->segments), 0, 0};
    units.push_back({flat, 0});
    ++notes_[op.id].whole_range_tiles;
  } else {
    units = s->ys->segments;
  }
  for (const Segment& seg : units) {
    TILEC_RETURN_IF_ERROR(ElementwiseCalls(s, seg));
  }
  return Status::Ok();
}

Status Lowering::LowerElementwise(const fb::OperationT& op, OpProgram* out) {
  ElementwiseState s;
  TILEC_RETURN_IF_ERROR(StartElementwise(op, &s));
  for (int t : TilesUsed(*s.Y->ownership, s.Y->shape)) {
    TILEC_RETURN_IF_ERROR(LowerElementwiseTile(&s, t));
  }
  if (s.M && !s.direct_moments) {
    TILEC_RETURN_IF_ERROR(
        CombineMoments(op, op.results[1], s.partials, &s.list));
  }
  out->phases = Normalize(&s.list);
  return Status::Ok();
}

// ---------------------------------------------------------------- row-wise

Status Lowering::LowerRowWise(const fb::OperationT& op, OpProgram* out) {
  const std::string where = OpWhere(op);
  const uint32_t y_id = op.results[0];
  const fb::ValueT* Y = value(y_id);
  const int64_t width = Y->shape.back();
  for (int t : TilesUsed(*Y->ownership, Y->shape)) {
    for (const Box& b : HeldBoxes(*Y->ownership, Y->shape, t)) {
      if (BoxWidth(b) != width) {
        if (op.kind == fb::OpKind::LayerNorm) {
          return LowerSplitLayerNorm(op, out);
        }
        return Status::BadInput(where + ": needs complete rows per tile but "
                                        "its result is owned " +
                                ir::OwnershipText(*Y->ownership));
      }
    }
  }
  PhaseList list;
  Phase* phase = NewPhase(&list, Phase::Kind::kCompute, ir::OpKindText(op.kind));
  const int y_eb = ir::DTypeBytes(Y->dtype);
  for (int t : TilesUsed(*Y->ownership, Y->shape)) {
    ++notes_[op.id].tiles;
    Storage* ys = NewValueStorage(y_id, t, op.id, BufferKind::kValue, nullptr,
                                  false);
    const Segments segments = ys->segments;
    const int y_buffer = ys->buffer;
    for (const Segment& seg : segments) {
      const Box& box = seg.box;
      auto locate = [&](uint32_t id, const Box& b) -> StatusOr<VSlice> {
        return Contiguous(id, t, b, op, "operand", phase);
      };
      StatusOr<VSlice> x = locate(op.operands[0], box);
      if (!x.ok()) return x.status();
      VCall call;
      call.tile = t;
      call.op = op.id;
      call.params = {BoxRows(box), width};
      const VSlice y{y_buffer, seg.offset * y_eb, box.Elements() * y_eb};
      if (op.kind == fb::OpKind::LayerNorm) {
        if (op.operands.size() != 3) {
          return Status::BadInput(where + ": needs x, gamma and beta");
        }
        Box row;
        row.rank = 1;
        row.end[0] = width;
        StatusOr<VSlice> gamma = locate(op.operands[1], row);
        if (!gamma.ok()) return gamma.status();
        StatusOr<VSlice> beta = locate(op.operands[2], row);
        if (!beta.ok()) return beta.status();
        call.kernel = kernels::names::kLayerNorm;
        call.args = {*x, *gamma, *beta, y};
        call.fparams = {op.eps};
      } else {
        call.kernel = kernels::names::kSoftmax;
        call.args = {*x, y};
        call.fparams = {op.scale};
      }
      AddCall(phase, std::move(call));
    }
  }
  out->phases = Normalize(&list);
  return Status::Ok();
}

// ---------------------------------------------------------------- copies

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

// ---------------------------------------------------------------- statistics

namespace {

// The rows box [r0, r1) x [0, 3) of a moments value.
Box MomentRows(int64_t r0, int64_t r1) { return Box2(r0, r1, 0, 3); }

}  // namespace

Status Lowering::CombineMoments(const fb::OperationT& op, uint32_t m_id,
                                const std::vector<MomentPartial>& partials,
                                std::deque<Phase>* list) {
  const std::string where = OpWhere(op);
  const fb::ValueT* M = value(m_id);
  OpNotes& notes = notes_[op.id];
  notes.moment_partials += static_cast<int>(partials.size());
  // Row blocks, each with one partial per column block (the first tile
  // holding it; replicas hold the same numbers), in column order.
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, const MomentPartial*>>
      blocks;
  for (const MomentPartial& p : partials) {
    auto& cols = blocks[{p.rows.begin[0], p.rows.end[0]}];
    if (!cols.count(p.rows.begin[1])) cols[p.rows.begin[1]] = &p;
  }
  Phase* exchange = NewPhase(list, Phase::Kind::kExchange, "moments");
  Phase* combine = NewPhase(list, Phase::Kind::kCompute, "combine moments");
  for (int R : TilesUsed(*M->ownership, M->shape)) {
    Storage* ms = NewValueStorage(m_id, R, op.id, BufferKind::kValue, nullptr,
                                  false);
    const Segments m_segments = ms->segments;
    const int m_buffer = ms->buffer;
    for (const Segment& seg : m_segments) {
      for (const auto& [rows, cols] : blocks) {
        const int64_t a = std::max(rows.first, seg.box.begin[0]);
        const int64_t b = std::min(rows.second, seg.box.end[0]);
        if (a >= b) continue;
        const Box range = MomentRows(a, b);
        const int64_t n = (b - a) * 3;
        ++notes.ranges;
        VCall call;
        call.tile = R;
        call.kernel = kernels::names::kMomentsCombine;
        call.op = op.id;
        call.params = {b - a};
        int remote_slots = 0;
        for (const auto& [c0, p] : cols) remote_slots += p->tile != R;
        int rbuf = -1;
        if (remote_slots > 0) {
          rbuf = NewBuffer(R, int64_t{remote_slots} * n, fb::DType::F32, 0, -1,
                           op.id, BufferKind::kRemote, op.name + ".remote",
                           false);
        }
        int slot = 0;
        for (const auto& [c0, p] : cols) {
          // The partial's rows [a, b) as stored on its tile (its storage
          // holds rows p->rows.begin[0].. as a [rows, 3] block).
          Storage src = p->storage;
          src.segments = {Segment{MomentRows(p->rows.begin[0], p->rows.end[0]),
                                  p->storage.segments[0].offset}};
          if (p->tile == R) {
            const std::optional<int64_t> off = ContiguousOffset(range, src.segments);
            call.args.push_back({src.buffer, *off * 4, n * 4});
            ++notes.seeds_in_place;
            continue;
          }
          Storage dst;
          dst.buffer = rbuf;
          dst.segments = {Segment{range, int64_t{slot} * n}};
          TILEC_RETURN_IF_ERROR(Move(range, p->tile, src, R, dst,
                                     fb::DType::F32, op.id, combine, exchange));
          call.args.push_back({rbuf, int64_t{slot} * n * 4, n * 4});
          ++slot;
        }
        const std::optional<int64_t> out_off = ContiguousOffset(range, m_segments);
        if (!out_off) {
          return Status::Internal(where + ": moments rows not contiguous");
        }
        call.args.push_back({m_buffer, *out_off * 4, n * 4});
        ++notes.direct_writes;
        AddCall(combine, std::move(call));
      }
    }
  }
  return Status::Ok();
}

Status Lowering::LowerMoments(const fb::OperationT& op, const ReductionChoice&,
                              OpProgram* out) {
  const std::string where = OpWhere(op);
  if (op.operands.size() != 1 || op.results.size() != 1) {
    return Status::BadInput(where + ": Moments takes x and gives [rows, 3]");
  }
  const fb::ValueT* X = value(op.operands[0]);
  const fb::ValueT* M = value(op.results[0]);
  if (X->shape.size() != 2 || M->shape != std::vector<int64_t>{X->shape[0], 3} ||
      M->dtype != fb::DType::F32) {
    return Status::BadInput(where + ": Moments of [rows, w] is F32 [rows, 3]");
  }
  const fb::OwnershipT& layout =
      op.recipe && op.recipe->layout ? *op.recipe->layout : *X->ownership;
  PhaseList list;
  Phase* compute = NewPhase(&list, Phase::Kind::kCompute, "moments");
  std::vector<MomentPartial> partials;
  for (int t : TilesUsed(layout, X->shape)) {
    for (const Box& box : HeldBoxes(layout, X->shape, t)) {
      StatusOr<VSlice> x = Contiguous(op.operands[0], t, box, op, "operand", compute);
      if (!x.ok()) return x.status();
      MomentPartial p;
      p.tile = t;
      p.rows = box;
      p.storage.segments = {Segment{MomentRows(box.begin[0], box.end[0]), 0}};
      p.storage.buffer = NewBuffer(t, BoxRows(box) * 3, fb::DType::F32, 0, -1,
                                   op.id, BufferKind::kPartial,
                                   op.name + ".partial", false);
      VCall call;
      call.tile = t;
      call.kernel = kernels::names::kLnMoments;
      call.op = op.id;
      call.args = {*x, {p.storage.buffer, 0, BoxRows(box) * 12}};
      call.params = {BoxRows(box), BoxWidth(box)};
      AddCall(compute, std::move(call));
      partials.push_back(std::move(p));
    }
  }
  TILEC_RETURN_IF_ERROR(CombineMoments(op, op.results[0], partials, &list));
  out->phases = Normalize(&list);
  return Status::Ok();
}

Status Lowering::LowerNormalize(const fb::OperationT& op, OpProgram* out) {
  const std::string where = OpWhere(op);
  if (op.operands.size() != 4 || op.results.size() != 1) {
    return Status::BadInput(where + ": Normalize takes x, moments, gamma, beta");
  }
  const uint32_t y_id = op.results[0];
  const fb::ValueT* Y = value(y_id);
  PhaseList list;
  Phase* phase = NewPhase(&list, Phase::Kind::kCompute, "normalize");
  const int y_eb = ir::DTypeBytes(Y->dtype);
  for (int t : TilesUsed(*Y->ownership, Y->shape)) {
    ++notes_[op.id].tiles;
    Storage* ys = NewValueStorage(y_id, t, op.id, BufferKind::kValue, nullptr,
                                  false);
    const Segments segments = ys->segments;
    const int y_buffer = ys->buffer;
    for (const Segment& seg : segments) {
      const Box& box = seg.box;
      Box cols;
      cols.rank = 1;
      cols.begin[0] = box.begin[1];
      cols.end[0] = box.end[1];
      StatusOr<VSlice> x = Contiguous(op.operands[0], t, box, op, "x", phase);
      if (!x.ok()) return x.status();
      StatusOr<VSlice> m = Contiguous(op.operands[1], t,
                                      MomentRows(box.begin[0], box.end[0]), op,
                                      "moments", phase);
      if (!m.ok()) return m.status();
      StatusOr<VSlice> gamma = Contiguous(op.operands[2], t, cols, op, "gamma", phase);
      if (!gamma.ok()) return gamma.status();
      StatusOr<VSlice> beta = Contiguous(op.operands[3], t, cols, op, "beta", phase);
      if (!beta.ok()) return beta.status();
      VCall call;
      call.tile = t;
      call.kernel = kernels::names::kNormalize;
      call.op = op.id;
      call.args = {*x, *m, *gamma, *beta,
                   {y_buffer, seg.offset * y_eb, box.Elements() * y_eb}};
      call.params = {BoxRows(box), BoxWidth(box)};
      call.fparams = {op.eps};
      AddCall(phase, std::move(call));
    }
  }
  out->phases = Normalize(&list);
  return Status::Ok();
}

// Partial moments of every column slice of `Y` (the op's result), in
// `stats`.
Status Lowering::SplitMomentPartials(const fb::OperationT& op,
                                     const fb::ValueT& Y, Phase* stats,
                                     std::vector<LayerNormSlice>* slices) {
  for (int t : TilesUsed(*Y.ownership, Y.shape)) {
    for (const Box& box : HeldBoxes(*Y.ownership, Y.shape, t)) {
      StatusOr<VSlice> x = Contiguous(op.operands[0], t, box, op, "x", stats);
      if (!x.ok()) return x.status();
      const int buf =
          NewBuffer(t, BoxRows(box) * 3, fb::DType::F32, 0, -1, op.id,
                    BufferKind::kPartial, op.name + ".partial", false);
      VCall call;
      call.tile = t;
      call.kernel = kernels::names::kLnMoments;
      call.op = op.id;
      call.args = {*x, {buf, 0, BoxRows(box) * 12}};
      call.params = {BoxRows(box), BoxWidth(box)};
      AddCall(stats, std::move(call));
      slices->push_back({t, box, buf});
    }
  }
  return Status::Ok();
}

// The row group of slice `s`: one slice per column block over the same
// rows, by first column (`s` itself for its own block, else the first
// slice found, preferring one on `s`'s tile).
StatusOr<std::map<int64_t, const Lowering::LayerNormSlice*>> Lowering::RowGroup(
    const std::vector<LayerNormSlice>& slices, const LayerNormSlice& s,
    const std::string& where) {
  std::map<int64_t, const LayerNormSlice*> group;
  for (const LayerNormSlice& o : slices) {
    if (o.box.begin[0] != s.box.begin[0] || o.box.end[0] != s.box.end[0]) {
      if (o.box.begin[0] < s.box.end[0] && s.box.begin[0] < o.box.end[0]) {
        return Status::BadInput(where +
                                ": column slices of different row "
                                "blocks overlap; LayerNorm over split "
                                "rows needs aligned row blocks");
      }
      continue;
    }
    if (o.tile == s.tile) {
      group[o.box.begin[1]] = &o;
    } else if (!group.count(o.box.begin[1])) {
      group[o.box.begin[1]] = &o;
    }
  }
  group[s.box.begin[1]] = &s;
  return group;
}

// The group's partials gathered on `s`'s tile (exchange into a remote
// buffer) and combined in column order into the rows' moments; returns that
// buffer.
StatusOr<int> Lowering::CombineRowGroup(
    const fb::OperationT& op, const LayerNormSlice& s,
    const std::map<int64_t, const LayerNormSlice*>& group, Phase* exchange,
    Phase* norm) {
  OpNotes& notes = notes_[op.id];
  const int64_t rows = BoxRows(s.box), n = rows * 3;
  const Box mrows = MomentRows(s.box.begin[0], s.box.end[0]);
  const int remote = static_cast<int>(group.size()) - 1;
  const int rbuf =
      remote > 0 ? NewBuffer(s.tile, remote * n, fb::DType::F32, 0, -1, op.id,
                             BufferKind::kRemote, op.name + ".remote", false)
                 : -1;
  const int full = NewBuffer(s.tile, n, fb::DType::F32, 0, -1, op.id,
                             BufferKind::kResult, op.name + ".moments", false);
  VCall combine;
  combine.tile = s.tile;
  combine.kernel = kernels::names::kMomentsCombine;
  combine.op = op.id;
  combine.params = {rows};
  int slot = 0;
  for (const auto& [c0, o] : group) {
    if (o == &s) {
      combine.args.push_back({s.partial, 0, n * 4});
      ++notes.seeds_in_place;
      continue;
    }
    Storage src{o->partial, {Segment{mrows, 0}}};
    Storage dst{rbuf, {Segment{mrows, int64_t{slot} * n}}};
    TILEC_RETURN_IF_ERROR(Move(mrows, o->tile, src, s.tile, dst, fb::DType::F32,
                               op.id, norm, exchange));
    combine.args.push_back({rbuf, int64_t{slot} * n * 4, n * 4});
    ++slot;
  }
  combine.args.push_back({full, 0, n * 4});
  ++notes.ranges;
  notes.moment_partials += static_cast<int>(group.size());
  AddCall(norm, std::move(combine));
  return full;
}

// Slice `s` normalized with its rows' moments (buffer `full`) into the
// result.
Status Lowering::NormalizeSlice(const fb::OperationT& op,
                                const LayerNormSlice& s, int full,
                                Phase* norm) {
  const uint32_t y_id = op.results[0];
  const int y_eb = ir::DTypeBytes(value(y_id)->dtype);
  const int64_t rows = BoxRows(s.box), n = rows * 3;
  Box cols;
  cols.rank = 1;
  cols.begin[0] = s.box.begin[1];
  cols.end[0] = s.box.end[1];
  StatusOr<VSlice> x = Contiguous(op.operands[0], s.tile, s.box, op, "x", norm);
  if (!x.ok()) return x.status();
  StatusOr<VSlice> gamma =
      Contiguous(op.operands[1], s.tile, cols, op, "gamma", norm);
  if (!gamma.ok()) return gamma.status();
  StatusOr<VSlice> beta =
      Contiguous(op.operands[2], s.tile, cols, op, "beta", norm);
  if (!beta.ok()) return beta.status();
  Storage* ys =
      storage_.count(y_id) ? const_cast<Storage*>(Find(y_id, s.tile)) : nullptr;
  if (ys == nullptr) {
    ys = NewValueStorage(y_id, s.tile, op.id, BufferKind::kValue, nullptr,
                         false);
  }
  const std::optional<int64_t> off = ContiguousOffset(s.box, ys->segments);
  VCall call;
  call.tile = s.tile;
  call.kernel = kernels::names::kNormalize;
  call.op = op.id;
  call.args = {*x,
               {full, 0, n * 4},
               *gamma,
               *beta,
               {ys->buffer, *off * y_eb, s.box.Elements() * y_eb}};
  call.params = {rows, BoxWidth(s.box)};
  call.fparams = {op.eps};
  AddCall(norm, std::move(call));
  return Status::Ok();
}

Status Lowering::LowerSplitLayerNorm(const fb::OperationT& op, OpProgram* out) {
  // LayerNorm whose tiles hold column slices of their rows: partial moments
  // on each slice, every tile of a row group receives the others' partials
  // (an all-gather: each tile needs the whole rows' statistics), combines
  // them in column order (the same order on every tile, so every slice is
  // normalized with bit-identical statistics) and normalizes its slice.
  const std::string where = OpWhere(op);
  if (op.operands.size() != 3) {
    return Status::BadInput(where + ": needs x, gamma and beta");
  }
  const fb::ValueT* Y = value(op.results[0]);
  if (Y->shape.size() != 2) {
    return Status::BadInput(where + ": split rows need a [rows, w] value");
  }
  OpNotes& notes = notes_[op.id];
  PhaseList list;
  Phase* stats = NewPhase(&list, Phase::Kind::kCompute, "moments");
  Phase* exchange = NewPhase(&list, Phase::Kind::kExchange, "moments");
  Phase* norm = NewPhase(&list, Phase::Kind::kCompute, "normalize");
  std::vector<LayerNormSlice> slices;
  TILEC_RETURN_IF_ERROR(SplitMomentPartials(op, *Y, stats, &slices));
  for (const LayerNormSlice& s : slices) {
    ++notes.tiles;
    StatusOr<std::map<int64_t, const LayerNormSlice*>> group =
        RowGroup(slices, s, where);
    if (!group.ok()) return group.status();
    StatusOr<int> full = CombineRowGroup(op, s, *group, exchange, norm);
    if (!full.ok()) return full.status();
    TILEC_RETURN_IF_ERROR(NormalizeSlice(op, s, *full, norm));
  }
  out->phases = Normalize(&list);
  return Status::Ok();
}


// ---------------------------------------------------------------- attention

// passes/core/attention_plan.h decides; this builds it: per tile staging
// buffers for its q/k (scores) or v (context) block, filled by local
// copies and one exchange phase, then one kernel call writing the tile's
// block of the result.
Status Lowering::LowerAttention(const fb::OperationT& op, OpProgram* out) {
  const bool scores = op.kind == fb::OpKind::AttentionScores;
  const std::string where = OpWhere(op);
  // Cross-attention scores read q (operand 0, in place) and stage kv.
  const bool cross_scores = scores && op.operands.size() == 2;
  if ((!scores && op.operands.size() != 2) ||
      (scores && op.operands.size() != 1 && !cross_scores) ||
      op.results.size() != 1) {
    return Status::BadInput(where + ": wrong operand count for " +
                            ir::OpKindText(op.kind));
  }
  const uint32_t qkv_id = op.operands[scores && !cross_scores ? 0 : 1];
  const uint32_t y_id = op.results[0];
  const fb::ValueT* QKV = value(qkv_id);
  const fb::ValueT* Y = value(y_id);
  const fb::ValueT* P = scores ? nullptr : value(op.operands[0]);
  if (!QKV || !Y || (!scores && !P)) {
    return Status::BadInput(where + ": reads an undefined value");
  }
  if (!op.recipe || op.recipe->kind != fb::RecipeKind::Attention) {
    return Status::BadInput(where + ": needs an attention recipe (run "
                            "plan-ownership first)");
  }
  if (!QKV->ownership) {
    return Status::BadInput(where + ": qkv %" + std::to_string(qkv_id) +
                            " has no ownership");
  }
  const fb::RecipeT& r = *op.recipe;
  StatusOr<passes::AttentionGrid> grid = passes::MakeAttentionGrid(
      scores ? passes::AttentionPart::kScores
             : passes::AttentionPart::kContext,
      QKV->shape, scores ? Y->shape : P->shape, op.heads, op.head_dim,
      r.m_split, r.n_split, r.layout ? r.layout->first_tile : 0);
  if (!grid.ok()) return Status::BadInput(where + ": " + grid.status().message());
  const passes::AttentionGrid& g = *grid;
  if (g.first + g.Tiles() > tiles_) {
    return Status::BadInput(where + ": its grid needs tiles up to " +
                            std::to_string(g.first + g.Tiles() - 1) +
                            " of " + std::to_string(tiles_));
  }
  if (!passes::SameOwnership(*Y->ownership, g.ResultOwnership())) {
    return Status::BadInput(
        where + ": result owned " + ir::OwnershipText(*Y->ownership) +
        " but the recipe writes " + ir::OwnershipText(g.ResultOwnership()));
  }
  PhaseList list;
  Phase* copies = NewPhase(&list, Phase::Kind::kCompute, "stage qkv");
  Phase* exchange = NewPhase(&list, Phase::Kind::kExchange, "deliver qkv");
  Phase* calls = NewPhase(
      &list, Phase::Kind::kCompute,
      std::string(scores ? kernels::names::kGemmNt : kernels::names::kGemm));
  // Staging: one buffer per staged box of each tile.
  static constexpr const char* kViewNames[] = {".q", ".k", ".v"};
  const std::vector<int> views = g.StagedViews();
  std::map<int, std::vector<Storage>> staged;
  g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
    const std::vector<Box> boxes = g.StagedBoxes(b, h, mi, ni);
    for (size_t i = 0; i < boxes.size(); ++i) {
      Storage st;
      st.segments = {Segment{boxes[i], 0}};
      st.buffer = NewBuffer(t, boxes[i].Elements(), QKV->dtype,
                            QKV->fp8_scale_exp, -1, op.id, BufferKind::kStage,
                            op.name + kViewNames[views[i]] + ".stage", false);
      staged[t].push_back(st);
    }
  });
  OpNotes& notes = notes_[op.id];
  notes.staged_tiles = static_cast<int>(staged.size());
  auto deliver = [&](const Box& box, int src, int dst) -> Status {
    StatusOr<const Storage*> from = Operand(qkv_id, src, op.id);
    if (!from.ok()) return from.status();
    for (const Storage& st : staged[dst]) {
      if (IntersectBoxes(st.segments[0].box, box).Empty()) continue;
      return Move(box, src, **from, dst, st, QKV->dtype, op.id, copies,
                  exchange);
    }
    return Status::Internal(where + ": tile " + std::to_string(dst) +
                            " stages no box around " + passes::FormatBox(box));
  };
  const passes::TransferPlan plan = passes::AttentionDelivery(
      g, *QKV->ownership, QKV->shape, ir::DTypeBytes(QKV->dtype));
  for (const passes::Transfer& tr : plan.transfers) {
    for (int dst : tr.destination_tiles) {
      TILEC_RETURN_IF_ERROR(deliver(tr.box, tr.source_tile, dst));
    }
  }
  for (const passes::LocalCopy& lc : plan.local_copies) {
    TILEC_RETURN_IF_ERROR(deliver(lc.box, lc.tile, lc.tile));
  }
  notes.stage_phases = plan.transfers.empty() ? 0 : 1;
  Status status;
  g.ForEachTile([&](int64_t b, int64_t h, int mi, int ni, int t) {
    if (!status.ok()) return;
    status = AttentionCall(op, g, b, h, mi, ni, t, staged[t], calls);
  });
  TILEC_RETURN_IF_ERROR(status);
  notes.tiles = static_cast<int>(g.Tiles());
  out->phases = Normalize(&list);
  return Status::Ok();
}

// Tile t's kernel call: scores = scale * q k^T (gemm_nt) or context = P v
// (gemm), written straight into its block of the result. Cross-attention's
// queries are read where the planner put them (QueryNeeded), like the
// context's probabilities.
Status Lowering::AttentionCall(const fb::OperationT& op,
                               const passes::AttentionGrid& g, int64_t b,
                               int64_t h, int mi, int ni, int t,
                               const std::vector<Storage>& staged,
                               Phase* calls) {
  const bool scores = op.kind == fb::OpKind::AttentionScores;
  const uint32_t y_id = op.results[0];
  const fb::ValueT* Y = value(y_id);
  Storage* ys = NewValueStorage(y_id, t, op.id, BufferKind::kValue, nullptr,
                                /*interleaved=*/true);
  const Box block = g.ResultBox(b, h, mi, ni);
  if (ys->segments.size() != 1 || !(ys->segments[0].box == block)) {
    return Status::Internal(OpWhere(op) + ": tile " + std::to_string(t) +
                            " does not hold its block of the result");
  }
  const int64_t rows = g.rows.Size(mi), cols = g.cols.Size(ni);
  const int64_t inner = g.Inner();
  const int y_eb = ir::DTypeBytes(Y->dtype);
  const int s_eb = ir::DTypeBytes(buffers_[staged[0].buffer].dtype);
  auto whole = [&](const Storage& st) {
    return VSlice{st.buffer, 0, st.segments[0].box.Elements() * s_eb};
  };
  VCall call;
  call.tile = t;
  call.op = op.id;
  call.params = {rows, inner, cols, 0};
  const VSlice result{ys->buffer, 0, rows * cols * y_eb};
  if (scores) {
    call.kernel = kernels::names::kGemmNt;
    if (g.cross) {
      StatusOr<VSlice> q = Contiguous(op.operands[0], t, g.QueryBox(b, h, mi),
                                      op, "queries", calls);
      if (!q.ok()) return q.status();
      call.args = {*q, whole(staged[0]), result};
    } else {
      call.args = {whole(staged[0]), whole(staged[1]), result};
    }
    call.fparams = {op.scale};
  } else {
    StatusOr<VSlice> probs = Contiguous(op.operands[0], t, g.ProbsBox(b, h, mi),
                                        op, "probabilities", calls);
    if (!probs.ok()) return probs.status();
    call.kernel = kernels::names::kGemm;
    call.args = {*probs, whole(staged[0]), result};
  }
  AddCall(calls, std::move(call));
  return Status::Ok();
}

}  // namespace tilec::lower
