// Lowering of the ops that run where their result's rows live: elementwise
// and fused bodies, row-wise ops (Softmax, LayerNorm), Moments and
// Normalize, and LayerNorm over split columns (partial moments combined).

#include "passes/lower/lowering.h"

#include <algorithm>
#include <deque>

#include "formats/print.h"
#include "kernels/fused_body.h"
#include "kernels/kernel_names.h"
#include "kernels/kernels.h"
#include "passes/core/ownership.h"
#include "passes/lower/lowering_internal.h"

namespace tilec::lower {
namespace {

using passes::Box2;
using passes::HeldBoxes;
using passes::TilesUsed;

}  // namespace

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

// ---------------------------------------------------------------- statistics

namespace {

// The rows box [r0, r1) x [0, 3) of a moments value.
Box MomentRows(int64_t r0, int64_t r1) { return Box2(r0, r1, 0, 3); }

}  // namespace

StatusOr<int> Lowering::PartialMoments(const fb::OperationT& op, int tile,
                                       const Box& box, std::string_view role,
                                       Phase* phase) {
  StatusOr<VSlice> x = Contiguous(op.operands[0], tile, box, op, role, phase);
  if (!x.ok()) return x.status();
  const int buffer = NewBuffer(tile, BoxRows(box) * 3, fb::DType::F32, 0, -1,
                               op.id, BufferKind::kPartial,
                               op.name + ".partial", false);
  VCall call;
  call.tile = tile;
  call.kernel = kernels::names::kLnMoments;
  call.op = op.id;
  call.args = {*x, {buffer, 0, BoxRows(box) * 12}};
  call.params = {BoxRows(box), BoxWidth(box)};
  AddCall(phase, std::move(call));
  return buffer;
}

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
      StatusOr<int> buffer = PartialMoments(op, t, box, "operand", compute);
      if (!buffer.ok()) return buffer.status();
      MomentPartial p;
      p.tile = t;
      p.rows = box;
      p.storage.segments = {Segment{MomentRows(box.begin[0], box.end[0]), 0}};
      p.storage.buffer = *buffer;
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

// Partial moments of every column slice of the plan, in `stats`.
Status Lowering::SplitMomentPartials(const fb::OperationT& op,
                                     const passes::SplitRowPlan& plan,
                                     Phase* stats,
                                     std::vector<LayerNormSlice>* slices) {
  for (const passes::RowSlice& slice : plan.slices) {
    StatusOr<int> buffer =
        PartialMoments(op, slice.tile, slice.box, "x", stats);
    if (!buffer.ok()) return buffer.status();
    slices->push_back({slice.tile, slice.box, *buffer});
  }
  return Status::Ok();
}

// Slice `s`'s row group (indices into `slices`, in column order) gathered
// on its tile (exchange into a remote buffer, local copies from its own
// tile's other slices) and combined in column order into the rows'
// moments; returns that buffer.
StatusOr<int> Lowering::CombineRowGroup(
    const fb::OperationT& op, const std::vector<LayerNormSlice>& slices,
    int s, const std::vector<int>& group, Phase* exchange, Phase* norm) {
  OpNotes& notes = notes_[op.id];
  const LayerNormSlice& self = slices[s];
  const int64_t rows = BoxRows(self.box), n = rows * 3;
  const Box mrows = MomentRows(self.box.begin[0], self.box.end[0]);
  const int remote = static_cast<int>(group.size()) - 1;
  const int rbuf =
      remote > 0 ? NewBuffer(self.tile, remote * n, fb::DType::F32, 0, -1,
                             op.id, BufferKind::kRemote, op.name + ".remote",
                             false)
                 : -1;
  const int full = NewBuffer(self.tile, n, fb::DType::F32, 0, -1, op.id,
                             BufferKind::kResult, op.name + ".moments", false);
  VCall combine;
  combine.tile = self.tile;
  combine.kernel = kernels::names::kMomentsCombine;
  combine.op = op.id;
  combine.params = {rows};
  int slot = 0;
  for (int i : group) {
    if (i == s) {
      combine.args.push_back({self.partial, 0, n * 4});
      ++notes.seeds_in_place;
      continue;
    }
    const LayerNormSlice& o = slices[i];
    Storage src{o.partial, {Segment{mrows, 0}}};
    Storage dst{rbuf, {Segment{mrows, int64_t{slot} * n}}};
    TILEC_RETURN_IF_ERROR(Move(mrows, o.tile, src, self.tile, dst,
                               fb::DType::F32, op.id, norm, exchange));
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
  // The slices, their row groups and the gather are passes/core's plan,
  // the one the planner prices.
  StatusOr<passes::SplitRowPlan> plan =
      passes::PlanSplitRows(*Y->ownership, Y->shape, where);
  if (!plan.ok()) return plan.status();
  std::vector<LayerNormSlice> slices;
  TILEC_RETURN_IF_ERROR(SplitMomentPartials(op, *plan, stats, &slices));
  for (size_t s = 0; s < slices.size(); ++s) {
    ++notes.tiles;
    StatusOr<int> full = CombineRowGroup(op, slices, static_cast<int>(s),
                                         plan->groups[s], exchange, norm);
    if (!full.ok()) return full.status();
    TILEC_RETURN_IF_ERROR(NormalizeSlice(op, slices[s], *full, norm));
  }
  out->phases = Normalize(&list);
  return Status::Ok();
}

}  // namespace tilec::lower
