// The simulator engine's target and buffer checks: the target's memory
// geometry, every buffer inside its tile's tensor memory, and the memory
// elements a slice touches.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "formats/print.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"
#include "kernels/numerics.h"
#include "sim/engine.h"

namespace tilec::sim::engine {

Status Engine::CheckTarget() {
  if (!module_.target) {
    return Status::BadInput("module has no target description");
  }
  target_ = module_.target.get();
  if (!module_.program) {
    return Status::BadInput(
        "module has no device program (emit-device writes one)");
  }
  program_ = module_.program.get();
  kernels::StatusOr<CostModel> model = CostModel::Create(*target_);
  if (!model.ok()) {
    return Status::BadInput("target '" + target_->name +
                            "': " + model.status().message());
  }
  model_ = std::make_unique<CostModel>(*model);
  tiles_ = target_->tiles;
  sram_bytes_ = target_->sram_bytes;
  if (target_->element_bytes <= 0 || target_->interleaved_element_bytes <= 0 ||
      target_->standard_elements < 0) {
    return Status::BadInput("target '" + target_->name +
                            "': memory elements must have positive sizes");
  }
  standard_end_ = std::min<int64_t>(
      sram_bytes_,
      int64_t{target_->standard_elements} * target_->element_bytes);
  exchange_model_ = kernels::ExchangeModel::FromTarget(*target_);
  code_model_ = kernels::CodeModel::FromTarget(*target_);
  for (const auto& v : module_.values) {
    if (v) values_[v->id] = v.get();
  }
  for (const auto& op : module_.ops) {
    if (op) ops_[op->id] = op.get();
  }
  return Status::Ok();
}

Status Engine::CheckBuffers() {
  tile_extent_.assign(tiles_, 0);
  for (size_t i = 0; i < program_->buffers.size(); ++i) {
    const fb::BufferT* b = program_->buffers[i].get();
    if (b == nullptr) {
      return Status::BadInput("buffer entry " + std::to_string(i) + " is null");
    }
    const std::string where = BufferText(b->id) + " \"" + b->name +
                              "\" on tile " + std::to_string(b->tile) +
                              (b->op >= 0 ? " (op " + std::to_string(b->op) + ")"
                                          : std::string());
    if (buffers_.count(b->id)) {
      return Status::BadInput(where + ": buffer id is used twice");
    }
    if (b->tile >= static_cast<uint32_t>(tiles_)) {
      return Status::BadInput(where + ": tile out of range (target has " +
                              std::to_string(tiles_) + " tiles)");
    }
    if (b->offset % static_cast<uint32_t>(target_->alignment) != 0) {
      return Status::BadInput(where + ": offset " + std::to_string(b->offset) +
                              " is not aligned to " +
                              std::to_string(target_->alignment) + " bytes");
    }
    const int64_t end = int64_t{b->offset} + b->bytes;
    const int64_t code_end = program_->code[b->tile].reserved_bytes();
    if (b->offset < code_end || end > sram_bytes_) {
      return Status::BadInput(
          where + ": bytes [" + std::to_string(b->offset) + ", " +
          std::to_string(end) + ") are outside the tile's tensor memory [" +
          std::to_string(code_end) + ", " + std::to_string(sram_bytes_) +
          ") (code lies below " + std::to_string(code_end) + ")");
    }
    kernels::StatusOr<DType> dtype = kernels::DTypeFromFb(b->dtype);
    if (!dtype.ok()) {
      return Status::BadInput(where + ": " + dtype.status().message());
    }
    if (ir::StorageScaleExp(b->dtype, b->fp8_scale_exp) != b->fp8_scale_exp) {
      return Status::BadInput(where + ": fp8_scale_exp " +
                              std::to_string(b->fp8_scale_exp) +
                              " on a " + std::string(kernels::DTypeName(*dtype)) +
                              " buffer (FP8 only)");
    }
    BufferInfo info;
    info.buffer = b;
    info.dtype = *dtype;
    info.scale_exp = b->fp8_scale_exp;
    info.element_bytes = kernels::DTypeBytes(*dtype);
    buffers_[b->id] = info;
    tile_extent_[b->tile] = std::max(tile_extent_[b->tile], end);
  }
  return Status::Ok();
}

const BufferInfo* Engine::FindBuffer(uint32_t id) const {
  if (!renamed_ids_.empty() && renamed_ids_.count(id)) {
    planning_.touched_renamed = true;
    if (const Renames* renames = planning_.renames) {
      auto r = std::lower_bound(renames->begin(), renames->end(),
                                std::make_pair(id, uint32_t{0}));
      if (r != renames->end() && r->first == id) id = r->second;
    }
  }
  auto it = buffers_.find(id);
  return it == buffers_.end() ? nullptr : &it->second;
}

int64_t Engine::ElementOf(int64_t addr) const {
  if (addr < standard_end_) return addr / target_->element_bytes;
  return target_->standard_elements +
         (addr - standard_end_) / target_->interleaved_element_bytes;
}

bool Engine::ShareElement(const ArgPlan& a, const ArgPlan& b) const {
  if (a.bytes == 0 || b.bytes == 0) return false;
  const int64_t a0 = ElementOf(a.addr), a1 = ElementOf(a.addr + a.bytes - 1);
  const int64_t b0 = ElementOf(b.addr), b1 = ElementOf(b.addr + b.bytes - 1);
  return a0 <= b1 && b0 <= a1;
}

}  // namespace tilec::sim::engine
