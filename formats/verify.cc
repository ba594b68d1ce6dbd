// Structural checks every reader and writer runs (formats/README.md,
// "Reading a file").

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "formats/basics.h"
#include "formats/ir.h"
#include "formats/op_shapes.h"
#include "formats/repeat.h"
#include "formats/target.h"

namespace tilec::ir {
namespace {

Status CheckOwnership(const fb::OwnershipT& owner, const fb::ValueT& value,
                      int target_tiles) {
  std::string where = "value %" + std::to_string(value.id) + " ownership: ";
  auto bad = [&](const std::string& what) {
    return Status::BadInput(where + what);
  };
  if (owner.first_tile < 0 || owner.tile_stride < 1) {
    return bad("first_tile must be >= 0 and tile_stride >= 1");
  }
  int64_t tiles_used = 0;
  if (owner.kind == fb::OwnershipKind::Blocked) {
    if (owner.partitions.size() != value.shape.size()) {
      return bad(std::to_string(owner.partitions.size()) +
                 " partition counts for a rank-" +
                 std::to_string(value.shape.size()) + " value");
    }
    if (owner.replicas < 1) return bad("replicas must be >= 1");
    if (!owner.sub_partitions.empty() &&
        owner.sub_partitions.size() != owner.partitions.size()) {
      return bad("one sub-partition count per axis");
    }
    const size_t grid_axes = owner.sub_partitions.empty()
                                 ? owner.partitions.size() + 1
                                 : 2 * owner.partitions.size() + 1;
    if (!owner.axis_order.empty()) {
      std::vector<bool> seen(grid_axes, false);
      bool permutation = owner.axis_order.size() == seen.size();
      for (int axis : owner.axis_order) {
        if (!permutation || axis < 0 || axis >= static_cast<int>(seen.size()) ||
            seen[axis]) {
          permutation = false;
          break;
        }
        seen[axis] = true;
      }
      if (!permutation) {
        return bad("axis_order must be a permutation of 0.." +
                   std::to_string(grid_axes - 1));
      }
    }
    tiles_used = owner.replicas;
    for (const auto* counts : {&owner.partitions, &owner.sub_partitions}) {
      for (int p : *counts) {
        if (p < 1) return bad("partition counts must be >= 1");
        tiles_used *= p;
        if (tiles_used > (int64_t{1} << 31)) return bad("too many partitions");
      }
    }
  } else {
    if (owner.grain < 1 || owner.tiles < 1) {
      return bad("flat layout needs grain >= 1 and tiles >= 1");
    }
    tiles_used = owner.tiles;
  }
  int64_t last_tile =
      owner.first_tile + (tiles_used - 1) * int64_t{owner.tile_stride};
  if (target_tiles > 0 && last_tile >= target_tiles) {
    return bad("uses tile " + std::to_string(last_tile) + " but the target has " +
               std::to_string(target_tiles) + " tiles");
  }
  return Status::Ok();
}

// FP8 per-tensor scales are powers of two 2^exp; beyond this the scaled
// values are not representable in F32 either.
constexpr int kMaxScaleExp = 64;

Status CheckScaleExp(const std::string& where, fb::DType dtype, int exp) {
  if (StorageScaleExp(dtype, exp) != exp) {
    return Status::BadInput(where + ": fp8_scale_exp " + std::to_string(exp) +
                            " on a value that is not FP8");
  }
  if (exp < -kMaxScaleExp || exp > kMaxScaleExp) {
    return Status::BadInput(where + ": fp8_scale_exp " + std::to_string(exp) +
                            " is outside -" + std::to_string(kMaxScaleExp) +
                            ".." + std::to_string(kMaxScaleExp));
  }
  return Status::Ok();
}

// A declared shape is the value's elements in another shape: positive
// extents whose product is `elements` (checked without overflow: no extent
// and no partial product may exceed it).
Status CheckDeclaredShape(const fb::ValueT& value, int64_t elements) {
  if (value.declared_shape.empty()) return Status::Ok();
  int64_t product = 1;
  for (int64_t extent : value.declared_shape) {
    if (extent < 1 || extent > elements || product > elements / extent) {
      product = -1;
      break;
    }
    product *= extent;
  }
  if (product == elements) return Status::Ok();
  return Status::BadInput("value %" + std::to_string(value.id) +
                          ": declared shape " +
                          ShapeToString(value.declared_shape) +
                          " does not hold the " + std::to_string(elements) +
                          " elements of its shape " +
                          ShapeToString(value.shape));
}

// Extents, element count and bytes of a value: bounded before any tool
// allocates it, against the target's memory when the module has one.
Status CheckValueSize(const fb::ValueT& value, const fb::TargetT* target) {
  const std::string where = "value %" + std::to_string(value.id);
  int64_t elements = 1;
  for (int64_t extent : value.shape) {
    if (extent < 1) {
      return Status::BadInput(where + " has a non-positive extent");
    }
    if (extent > kMaxValueElements || elements > kMaxValueElements / extent) {
      return Status::BadInput(where + " has more than " +
                              std::to_string(kMaxValueElements) +
                              " elements");
    }
    elements *= extent;
  }
  TILEC_RETURN_IF_ERROR(CheckDeclaredShape(value, elements));
  const int64_t bytes = elements * DTypeBytes(value.dtype);
  if (target != nullptr && bytes > TargetTensorBytes(*target)) {
    return Status::Infeasible(
        where + " \"" + value.name + "\" needs " + std::to_string(bytes) +
        " bytes, more than the " + std::to_string(TargetTensorBytes(*target)) +
        " bytes of tensor memory on all tiles of target '" + target->name +
        "'");
  }
  return Status::Ok();
}

Status CheckWeightInit(const std::string& where, const fb::WeightInitT& init) {
  if (init.distribution < fb::Distribution::MIN ||
      init.distribution > fb::Distribution::MAX) {
    return Status::BadInput(where + ": unknown weight distribution " +
                            std::to_string(static_cast<int>(init.distribution)));
  }
  if (!std::isfinite(init.mean) || !std::isfinite(init.stddev) ||
      init.stddev < 0) {
    return Status::BadInput(where + ": weight init needs a finite mean and a "
                            "finite stddev >= 0");
  }
  return Status::Ok();
}

bool IsGeluForm(fb::GeluForm form) {
  return form >= fb::GeluForm::MIN && form <= fb::GeluForm::MAX;
}

// The domain of every attribute an op kind reads (the reference and the
// kernels assume them: a LayerNorm eps <= 0 divides by zero on constant
// rows).
Status CheckAttributes(const fb::OperationT& op, const std::string& where) {
  const bool normalizes = op.kind == fb::OpKind::LayerNorm ||
                          op.kind == fb::OpKind::Normalize;
  if (normalizes && !(std::isfinite(op.eps) && op.eps > 0)) {
    return Status::BadInput(where + ": eps " + std::to_string(op.eps) +
                            " must be finite and > 0");
  }
  if (!std::isfinite(op.eps)) {
    return Status::BadInput(where + ": eps is not finite");
  }
  if (!std::isfinite(op.scale)) {
    return Status::BadInput(where + ": scale is not finite");
  }
  if (!IsGeluForm(op.gelu)) {
    return Status::BadInput(where + ": unknown gelu form " +
                            std::to_string(static_cast<int>(op.gelu)));
  }
  for (size_t i = 0; i < op.body.size(); ++i) {
    const fb::FusedStepT* step = op.body[i].get();
    const std::string swhere = where + " body step " + std::to_string(i);
    if (step == nullptr) return Status::BadInput(swhere + " is null");
    if (step->kind < fb::FusedStepKind::MIN ||
        step->kind > fb::FusedStepKind::MAX) {
      return Status::BadInput(swhere + " has unknown kind " +
                              std::to_string(static_cast<int>(step->kind)));
    }
    if (!IsGeluForm(step->gelu)) {
      return Status::BadInput(swhere + ": unknown gelu form " +
                              std::to_string(static_cast<int>(step->gelu)));
    }
    if (step->fn < fb::ElementwiseFn::MIN ||
        step->fn > fb::ElementwiseFn::MAX) {
      return Status::BadInput(swhere + ": unknown elementwise function " +
                              std::to_string(static_cast<int>(step->fn)));
    }
    if (step->broadcast < fb::Broadcast::MIN ||
        step->broadcast > fb::Broadcast::MAX) {
      return Status::BadInput(swhere + ": unknown broadcast " +
                              std::to_string(static_cast<int>(step->broadcast)));
    }
    if (step->dtype < fb::DType::MIN || step->dtype > fb::DType::MAX) {
      return Status::BadInput(swhere + ": unknown dtype " +
                              std::to_string(static_cast<int>(step->dtype)));
    }
    TILEC_RETURN_IF_ERROR(
        CheckScaleExp(swhere, step->dtype, step->fp8_scale_exp));
    if (!std::isfinite(step->scale)) {
      return Status::BadInput(swhere + ": scale is not finite");
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {

// One value's own fields; inputs and weights are defined from the start.
Status CheckValue(const fb::ValueT& value, const fb::TargetT* target) {
  const std::string where = "value %" + std::to_string(value.id);
  if (value.shape.empty() || value.shape.size() > 4) {
    return Status::BadInput(where + " has rank " +
                            std::to_string(value.shape.size()) +
                            "; ranks 1 to 4 are supported");
  }
  if (value.dtype < fb::DType::MIN || value.dtype > fb::DType::MAX) {
    return Status::BadInput(where + " has unknown dtype " +
                            std::to_string(static_cast<int>(value.dtype)));
  }
  if (value.role < fb::ValueRole::MIN || value.role > fb::ValueRole::MAX) {
    return Status::BadInput(where + " has unknown role " +
                            std::to_string(static_cast<int>(value.role)));
  }
  TILEC_RETURN_IF_ERROR(CheckValueSize(value, target));
  TILEC_RETURN_IF_ERROR(CheckScaleExp(where, value.dtype, value.fp8_scale_exp));
  if (value.init) TILEC_RETURN_IF_ERROR(CheckWeightInit(where, *value.init));
  if (value.sidecar && !IsPlainFileName(value.sidecar->path)) {
    // Readers resolve it in the IR's directory; a path could reach out.
    return Status::BadInput(where + ": sidecar path '" +
                            value.sidecar->path.substr(0, 80) +
                            "' is not a plain file name");
  }
  if (value.ownership) {
    TILEC_RETURN_IF_ERROR(CheckOwnership(*value.ownership, value,
                                         target ? target->tiles : 0));
  }
  return Status::Ok();
}

// Each operand declared and defined before `op`; each result declared and
// defined here for the first time (`defined` gains the results).
Status BindOperandsAndResults(const fb::OperationT& op, const std::string& where,
                              const std::map<uint32_t, const fb::ValueT*>& values,
                              std::set<uint32_t>* defined,
                              std::vector<const fb::ValueT*>* operands,
                              std::vector<const fb::ValueT*>* results) {
  for (uint32_t id : op.operands) {
    auto it = values.find(id);
    if (it == values.end()) {
      return Status::BadInput(where + " uses undefined value %" +
                              std::to_string(id));
    }
    if (!defined->count(id)) {
      return Status::BadInput(where + " uses value %" + std::to_string(id) +
                              " before it is defined");
    }
    operands->push_back(it->second);
  }
  for (uint32_t id : op.results) {
    auto it = values.find(id);
    if (it == values.end()) {
      return Status::BadInput(where + " defines undeclared value %" +
                              std::to_string(id));
    }
    if (!defined->insert(id).second) {
      return Status::BadInput(where + " redefines value %" + std::to_string(id));
    }
    results->push_back(it->second);
  }
  return Status::Ok();
}

Status CheckShapes(const fb::OperationT& op, const std::string& where,
                   const std::vector<const fb::ValueT*>& operands,
                   const std::vector<const fb::ValueT*>& results) {
  for (const auto& r : op.rows) {
    if (r == nullptr) return Status::BadInput(where + " has a null row segment");
  }
  if (!op.rows.empty() && op.kind != fb::OpKind::CopyRows) {
    return Status::BadInput(where + " has row segments but is not CopyRows");
  }
  OpShapeQuery query = ShapeQueryOf(op);
  for (const fb::ValueT* v : operands) query.operands.push_back(v->shape);
  for (const fb::ValueT* v : results) query.results.push_back(v->shape);
  return CheckOpShapes(query);
}

// A row copy moves bytes: every row it writes must already be in the
// result's encoding.
Status CheckRowCopyEncoding(const std::string& where,
                            const std::vector<const fb::ValueT*>& operands,
                            const std::vector<const fb::ValueT*>& results) {
  for (size_t i = 0; i < operands.size(); ++i) {
    for (const fb::ValueT* r : results) {
      if (operands[i]->dtype != r->dtype ||
          operands[i]->fp8_scale_exp != r->fp8_scale_exp) {
        return Status::BadInput(
            where + ": operand " + std::to_string(i) + " is " +
            fb::EnumNameDType(operands[i]->dtype) + " scale " +
            std::to_string(operands[i]->fp8_scale_exp) + ", result is " +
            fb::EnumNameDType(r->dtype) + " scale " +
            std::to_string(r->fp8_scale_exp) +
            " (CopyRows keeps dtype and scale)");
      }
    }
  }
  return Status::Ok();
}

Status CheckOp(const fb::OperationT& op,
               const std::map<uint32_t, const fb::ValueT*>& values,
               std::set<uint32_t>* defined) {
  const std::string where = "op " + std::to_string(op.id) + " (" + op.name + ")";
  if (op.kind < fb::OpKind::MIN || op.kind > fb::OpKind::MAX) {
    return Status::BadInput(where + " has unknown kind " +
                            std::to_string(static_cast<int>(op.kind)));
  }
  TILEC_RETURN_IF_ERROR(CheckAttributes(op, where));
  std::vector<const fb::ValueT*> operands, results;
  TILEC_RETURN_IF_ERROR(BindOperandsAndResults(op, where, values, defined,
                                               &operands, &results));
  TILEC_RETURN_IF_ERROR(CheckShapes(op, where, operands, results));
  if (op.kind == fb::OpKind::CopyRows) {
    TILEC_RETURN_IF_ERROR(CheckRowCopyEncoding(where, operands, results));
  }
  for (const auto& step : op.body) {
    if (step && step->operand >= static_cast<int>(operands.size())) {
      return Status::BadInput(where + " body step names operand " +
                              std::to_string(step->operand) + " of " +
                              std::to_string(operands.size()));
    }
  }
  return Status::Ok();
}

}  // namespace

Status VerifyModule(const fb::ModuleT& module) {
  if (module.target) {
    // Modules of older builds lack formulas added since: not an error here.
    TILEC_RETURN_IF_ERROR(
        ValidateTarget(*module.target, /*require_kernels=*/false)
            .WithContext("invalid target"));
  }
  std::map<uint32_t, const fb::ValueT*> values;
  std::set<uint32_t> defined;
  for (const auto& value : module.values) {
    if (!value) return Status::BadInput("null value entry");
    if (!values.emplace(value->id, value.get()).second) {
      return Status::BadInput("value id %" + std::to_string(value->id) +
                              " is defined twice");
    }
    TILEC_RETURN_IF_ERROR(CheckValue(*value, module.target.get()));
    if (value->role == fb::ValueRole::Input ||
        value->role == fb::ValueRole::Weight) {
      defined.insert(value->id);
    }
  }
  std::set<uint32_t> op_ids;
  for (const auto& op : module.ops) {
    if (!op) return Status::BadInput("null op entry");
    if (!op_ids.insert(op->id).second) {
      return Status::BadInput("op " + std::to_string(op->id) + " (" + op->name +
                              ") id is used twice");
    }
    TILEC_RETURN_IF_ERROR(CheckOp(*op, values, &defined));
  }
  for (const auto& [id, value] : values) {
    if (!defined.count(id)) {
      return Status::BadInput("value %" + std::to_string(id) +
                              " is never defined by an op");
    }
  }
  return VerifyRepeats(module);
}

namespace {

Status MigrateTargetToV3(fb::TargetT* target) {
  fb::TargetT preset;
  if (!LoadTarget(target->name, &preset).ok()) {
    TILEC_RETURN_IF_ERROR(LoadTarget("ipu21", &preset));
  }
  target->reserved_bytes = 0;
  target->sync_cycles = preset.sync_cycles;
  target->exchange_route_latency_cycles = preset.exchange_route_latency_cycles;
  target->exchange_route_latency_per_row =
      preset.exchange_route_latency_per_row;
  target->exchange_tiles_per_row = preset.exchange_tiles_per_row;
  target->exchange_max_packet_words = preset.exchange_max_packet_words;
  target->runtime_code_bytes = preset.runtime_code_bytes;
  target->code_bytes_per_superstep = preset.code_bytes_per_superstep;
  target->code_bytes_per_call = preset.code_bytes_per_call;
  target->code_bytes_per_operand = preset.code_bytes_per_operand;
  target->exchange_code_phase_bytes = preset.exchange_code_phase_bytes;
  target->exchange_code_send_bytes = preset.exchange_code_send_bytes;
  target->exchange_code_long_send_words = preset.exchange_code_long_send_words;
  target->exchange_code_long_send_bytes = preset.exchange_code_long_send_bytes;
  target->exchange_code_receive_bytes = preset.exchange_code_receive_bytes;
  target->exchange_code_pointer_bytes = preset.exchange_code_pointer_bytes;
  target->exchange_code_alignment = preset.exchange_code_alignment;
  target->base_write_cycles = preset.base_write_cycles;
  target->patch_call_cycles = preset.patch_call_cycles;
  target->patch_word_cycles = preset.patch_word_cycles;
  target->notes = preset.notes;
  return Status::Ok();
}

}  // namespace

Status MigrateModule(uint32_t from_version, fb::ModuleT* module) {
  // One step per version, applied in order.
  (void)module;
  uint32_t version = from_version;
  if (version == 1) {
    // Version 2 added repeats (Module.repeats, DeviceProgram.repeats). A
    // version-1 file has none and means the same; the bump keeps a build
    // that would ignore repeats from running a rolled program as if it were
    // written out.
    version = 2;
  }
  if (version == 2) {
    // Version 3 times exchange by static schedules and sizes code per
    // program: the target gains the numbers for both (from the preset of
    // the same name, else ipu21's), drops its fixed reservation, and its
    // sync_cycles becomes the residual beyond a schedule. A device program
    // written before has no schedules; the simulator refuses it by name.
    if (module->target) {
      TILEC_RETURN_IF_ERROR(MigrateTargetToV3(module->target.get()));
    }
    version = 3;
  }
  if (version == kSchemaVersion) return Status::Ok();
  return Status::Internal("no migration from schema version " +
                          std::to_string(from_version));
}

}  // namespace tilec::ir
