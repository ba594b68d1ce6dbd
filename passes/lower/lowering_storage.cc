// Lowering's storage and buffers: values' storage per tile, new buffers,
// operands (created lazily for inputs and weights), calls and moves.

#include "passes/lower/lowering.h"

#include <algorithm>

#include "formats/print.h"
#include "kernels/kernel_names.h"
#include "kernels/registry.h"
#include "passes/core/ownership.h"
#include "passes/lower/lowering_internal.h"

namespace tilec::lower {
namespace {

using passes::HeldBoxes;
using passes::TilesUsed;

// Binary elementwise kernels (MemoryRule::kBinaryInputs in the registry):
// their two inputs should be in different memory elements.
bool IsBinaryKernel(const std::string& kernel) {
  const kernels::KernelInfo* info = kernels::FindKernel(kernel);
  return info != nullptr &&
         info->memory_rule == kernels::MemoryRule::kBinaryInputs;
}

}  // namespace

Lowering::Lowering(const fb::ModuleT& module, const kernels::CostModel& model,
                   LoweringOptions options)
    : module_(&module), model_(model), options_(options) {
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
  if (!buffers_[a.buffer].interleaved || !module_->target) return true;
  const fb::TargetT& t = *module_->target;
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

}  // namespace tilec::lower
