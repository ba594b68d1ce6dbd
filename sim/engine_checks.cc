// The simulator engine's checks of computes, supersteps, host bindings and
// DeviceProgram.code, before any data is touched (docs/device-program.md).

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/print.h"
#include "kernels/cost.h"
#include "kernels/exchange_schedule.h"
#include "kernels/kernels.h"
#include "kernels/numerics.h"
#include "kernels/registry.h"
#include "sim/engine.h"
#include "sim/patchify.h"

namespace tilec::sim::engine {

namespace {

// The registry says which memory rules apply to a kernel's operands; the
// target's formula says what the slow path costs.
kernels::MemoryRule RuleOf(const std::string& kernel) {
  const kernels::KernelInfo* info = kernels::FindKernel(kernel);
  return info ? info->memory_rule : kernels::MemoryRule::kNone;
}

}  // namespace

Status Engine::ArgSlice(const std::string& where, int tile, int arg,
                        const fb::BufferSliceT& slice, ArgPlan* plan) {
  const std::string what = where + ": arg " + std::to_string(arg) + " " +
                           BufferText(slice.buffer);
  const BufferInfo* info = FindBuffer(slice.buffer);
  if (info == nullptr) return Status::BadInput(what + " does not exist");
  const fb::BufferT& b = *info->buffer;
  if (b.tile != static_cast<uint32_t>(tile)) {
    return Status::BadInput(what + " lives on tile " + std::to_string(b.tile));
  }
  const int64_t end = int64_t{slice.offset} + slice.bytes;
  if (end > b.bytes) {
    return Status::BadInput(what + ": slice [" + std::to_string(slice.offset) +
                            ", " + std::to_string(end) +
                            ") is outside the buffer's " +
                            std::to_string(b.bytes) + " bytes");
  }
  if (slice.offset % info->element_bytes != 0) {
    return Status::BadInput(
        what + ": slice offset " + std::to_string(slice.offset) +
        " is not a whole number of " +
        std::string(kernels::DTypeName(info->dtype)) + " elements");
  }
  plan->buffer = slice.buffer;
  plan->addr = int64_t{b.offset} + slice.offset;
  plan->bytes = slice.bytes;
  plan->dtype = info->dtype;
  plan->scale_exp = info->scale_exp;
  return Status::Ok();
}

Status Engine::CheckCompute(int s, int index, ComputePlan* plan) {
  const fb::ComputeT& c = *plan->compute;
  const std::string where = StepWhere(s, static_cast<int>(c.tile), c.op) +
                            " compute " + std::to_string(index) + " (" +
                            c.kernel + ")";
  if (c.tile >= static_cast<uint32_t>(tiles_)) {
    return Status::BadInput(where + ": tile out of range (target has " +
                            std::to_string(tiles_) + " tiles)");
  }
  for (size_t a = 0; a < c.args.size(); ++a) {
    if (!c.args[a]) {
      return Status::BadInput(where + ": arg " + std::to_string(a) + " is null");
    }
    ArgPlan arg;
    TILEC_RETURN_IF_ERROR(ArgSlice(where, static_cast<int>(c.tile),
                                   static_cast<int>(a), *c.args[a], &arg));
    plan->args.push_back(arg);
  }
  // Operands for the registry's cost function: dtypes and count only.
  std::vector<Operand> operands;
  for (const ArgPlan& a : plan->args) {
    operands.push_back(Operand{nullptr, static_cast<size_t>(a.bytes), a.dtype,
                               a.scale_exp});
  }
  auto args_text = [&]() {
    std::string text;
    for (const ArgPlan& a : plan->args) {
      text += (text.empty() ? "" : ", ") + BufferText(a.buffer);
    }
    return text;
  };
  kernels::StatusOr<int64_t> fast =
      kernels::Cycles(*model_, c.kernel, operands, c.params, c.fparams);
  if (!fast.ok()) {
    return Status::BadInput(where + " on " + args_text() + ": " +
                            fast.status().message());
  }
  int64_t cycles = *fast;
  int64_t extra = 0;
  int64_t macs = 0;
  const kernels::MemoryRule rule = RuleOf(c.kernel);
  if (rule == kernels::MemoryRule::kGemmAccumulator) {
    const ArgPlan& a = plan->args[0];
    const ArgPlan& out = plan->args[2];
    if (out.bytes > 0 && out.addr < standard_end_) {
      return Status::BadInput(
          where + ": output C " + BufferText(out.buffer) + " at [" +
          std::to_string(out.addr) + ", " + std::to_string(out.addr + out.bytes) +
          ") is not in interleaved memory (which starts at " +
          std::to_string(standard_end_) + ")");
    }
    if (ShareElement(a, out)) {
      return Status::BadInput(
          where + ": output C " + BufferText(out.buffer) +
          " shares memory element " + std::to_string(ElementOf(out.addr)) +
          (ElementOf(out.addr + out.bytes - 1) != ElementOf(out.addr)
               ? "-" + std::to_string(ElementOf(out.addr + out.bytes - 1))
               : std::string()) +
          " with left operand A " + BufferText(a.buffer));
    }
    // Saturating: absurd shapes are rejected by the kernel when it runs.
    const __int128 product = static_cast<__int128>(c.params[0]) *
                             c.params[1] * c.params[2];
    macs = product > INT64_MAX ? INT64_MAX : static_cast<int64_t>(product);
  }
  if (rule == kernels::MemoryRule::kBinaryInputs && plan->args.size() >= 2 &&
      ShareElement(plan->args[0], plan->args[1])) {
    kernels::StatusOr<int64_t> slow = kernels::Cycles(
        *model_, c.kernel, operands, c.params, c.fparams, KernelPath::kSlow);
    if (!slow.ok()) {
      return Status::BadInput(where + " on " + args_text() + ": " +
                              slow.status().message());
    }
    extra = *slow - cycles;
    cycles = *slow;
    // Marks the call as slow even when the formula charges nothing extra.
    if (extra == 0) extra = -1;
  }
  compute_cycles_[s][index] = cycles;
  compute_extra_[s][index] = extra;
  compute_macs_[s][index] = macs;
  return Status::Ok();
}

Status Engine::CheckSuperstep(int s) {
  const fb::SuperstepT* step = program_->supersteps[s].get();
  if (step == nullptr) {
    return Status::BadInput("superstep " + std::to_string(s) + " is null");
  }
  steps_[s] = StepPlan{};
  compute_cycles_[s].assign(step->compute.size(), 0);
  compute_extra_[s].assign(step->compute.size(), 0);
  compute_macs_[s].assign(step->compute.size(), 0);
  std::map<int, std::vector<ComputePlan>> by_tile;
  for (size_t i = 0; i < step->compute.size(); ++i) {
    const fb::ComputeT* c = step->compute[i].get();
    if (c == nullptr) {
      return Status::BadInput("superstep " + std::to_string(s) + " compute " +
                              std::to_string(i) + " is null");
    }
    ComputePlan plan;
    plan.compute = c;
    plan.index = static_cast<int>(i);
    TILEC_RETURN_IF_ERROR(CheckCompute(s, static_cast<int>(i), &plan));
    by_tile[static_cast<int>(c->tile)].push_back(std::move(plan));
  }
  StepPlan& sp = steps_[s];
  for (auto& [tile, plans] : by_tile) {
    sp.tiles.push_back(tile);
    sp.computes.push_back(std::move(plans));
  }
  return CheckTransfers(s);
}

Status Engine::CheckBindingFragment(const std::string& where,
                                    const BindingPlan& binding,
                                    const fb::FragmentT& f,
                                    FragmentPlan* plan) {
  const std::string fwhere = where + " tile " + std::to_string(f.tile) + " " +
                             BufferText(f.buffer);
  const BufferInfo* info = FindBuffer(f.buffer);
  if (info == nullptr) return Status::BadInput(fwhere + " does not exist");
  if (info->buffer->tile != f.tile) {
    return Status::BadInput(fwhere + " lives on tile " +
                            std::to_string(info->buffer->tile));
  }
  const size_t rank = binding.shape.size();
  if (f.begin.size() != rank || f.end.size() != rank) {
    return Status::BadInput(fwhere + ": box " + IndexText(f.begin) + " to " +
                            IndexText(f.end) + " does not have the value's rank " +
                            std::to_string(rank));
  }
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (f.begin[d] < 0 || f.begin[d] > f.end[d] || f.end[d] > binding.shape[d]) {
      return Status::BadInput(fwhere + ": box " + IndexText(f.begin) + " to " +
                              IndexText(f.end) + " is outside the value's shape " +
                              ir::ShapeText(binding.shape));
    }
    elements *= f.end[d] - f.begin[d];
  }
  const int64_t end = int64_t{f.offset} + elements * info->element_bytes;
  if (end > info->buffer->bytes) {
    return Status::BadInput(fwhere + ": box of " + std::to_string(elements) +
                            " " + std::string(kernels::DTypeName(info->dtype)) +
                            " elements at offset " + std::to_string(f.offset) +
                            " needs bytes up to " + std::to_string(end) +
                            " but the buffer holds " +
                            std::to_string(info->buffer->bytes));
  }
  if (f.offset % info->element_bytes != 0) {
    return Status::BadInput(fwhere + ": offset " + std::to_string(f.offset) +
                            " is not a whole number of elements");
  }
  plan->tile = static_cast<int>(f.tile);
  plan->buffer = f.buffer;
  plan->addr = int64_t{info->buffer->offset} + f.offset;
  plan->dtype = info->dtype;
  plan->scale_exp = info->scale_exp;
  plan->begin = f.begin;
  plan->end = f.end;
  return Status::Ok();
}

Status Engine::CheckOutputCoverage(const BindingPlan& binding,
                                   const std::string& where) {
  std::vector<uint8_t> covered(static_cast<size_t>(binding.elements), 0);
  for (const FragmentPlan& f : binding.fragments) {
    ForEachRow(binding.shape, f.begin, f.end,
               [&](int64_t flat, int64_t n, int64_t) {
                 std::memset(covered.data() + flat, 1, static_cast<size_t>(n));
               });
  }
  const auto first = std::find(covered.begin(), covered.end(), 0);
  if (first == covered.end()) return Status::Ok();
  const int64_t missing = std::count(covered.begin(), covered.end(), 0);
  return Status::BadInput(
      where + ": element " +
      IndexText(Unflatten(first - covered.begin(), binding.shape)) +
      " is not read from any fragment (" + std::to_string(missing) + " of " +
      std::to_string(binding.elements) + " elements are not covered)");
}

Status Engine::PatchBinding(const std::string& where, bool outputs,
                            int patch, BindingPlan* plan) {
  const std::vector<int64_t>& image = plan->shape;
  if (outputs || plan->value->role != fb::ValueRole::Input ||
      image.size() != 4) {
    return Status::BadInput(where + ": patch=" + std::to_string(patch) +
                            " is for inputs of shape [B, C, H, W]");
  }
  if (patch < 0 || patch > image[2] || patch > image[3]) {
    return Status::BadInput(where + ": patch=" + std::to_string(patch) +
                            " must be positive and at most the image's height "
                            "and width " + ir::ShapeText(image));
  }
  plan->patch = patch;
  plan->shape = kernels::PatchifiedShape(image, patch);
  return Status::Ok();
}

Status Engine::CheckBindings(bool outputs) {
  const auto& bindings = outputs ? program_->outputs : program_->inputs;
  std::vector<BindingPlan>& plans = outputs ? output_plans_ : input_plans_;
  const std::string kind = outputs ? "output" : "input";
  std::map<uint32_t, int> seen;
  for (size_t i = 0; i < bindings.size(); ++i) {
    const fb::HostBindingT* hb = bindings[i].get();
    if (hb == nullptr) {
      return Status::BadInput(kind + " binding " + std::to_string(i) + " is null");
    }
    auto vit = values_.find(hb->value);
    std::string where = kind + " binding " + std::to_string(i) + " value %" +
                        std::to_string(hb->value);
    if (vit == values_.end()) {
      return Status::BadInput(where + ": no such value in the graph");
    }
    const fb::ValueT& value = *vit->second;
    where += " \"" + value.name + "\"";
    if (seen.count(hb->value)) {
      return Status::BadInput(where + ": value is bound twice (also by " +
                              kind + " binding " +
                              std::to_string(seen[hb->value]) + ")");
    }
    seen[hb->value] = static_cast<int>(i);
    if (!outputs && value.role != fb::ValueRole::Input &&
        value.role != fb::ValueRole::Weight) {
      return Status::BadInput(where +
                              ": the host writes only inputs and weights");
    }
    BindingPlan plan;
    plan.value = &value;
    plan.shape = value.shape;
    for (int64_t d : value.shape) {
      if (d < 0) return Status::BadInput(where + ": negative extent in shape");
      plan.value_elements *= d;
    }
    if (hb->patch != 0) {
      TILEC_RETURN_IF_ERROR(PatchBinding(where, outputs, hb->patch, &plan));
    }
    plan.elements = 1;
    for (int64_t d : plan.shape) plan.elements *= d;
    for (size_t f = 0; f < hb->fragments.size(); ++f) {
      if (!hb->fragments[f]) {
        return Status::BadInput(where + ": fragment " + std::to_string(f) +
                                " is null");
      }
      FragmentPlan fp;
      TILEC_RETURN_IF_ERROR(CheckBindingFragment(
          where + " fragment " + std::to_string(f), plan, *hb->fragments[f],
          &fp));
      plan.fragments.push_back(std::move(fp));
    }
    if (outputs) TILEC_RETURN_IF_ERROR(CheckOutputCoverage(plan, where));
    plans.push_back(std::move(plan));
  }
  if (outputs) {
    for (const auto& v : module_.values) {
      if (v && v->role == fb::ValueRole::Output && !seen.count(v->id)) {
        return Status::BadInput("graph output %" + std::to_string(v->id) +
                                " \"" + v->name +
                                "\" has no output binding: the host cannot "
                                "read it");
      }
    }
  }
  return Status::Ok();
}

// DeviceProgram.code: one entry per tile, in order, each reserving whole
// standard elements for what it claims; the claims are checked against the
// program once every superstep is (CheckCodeSizes).
Status Engine::CheckCodeEntries() {
  if (program_->code.size() != static_cast<size_t>(tiles_)) {
    return Status::BadInput(
        "the program sizes the code of " +
        std::to_string(program_->code.size()) + " tiles, the target has " +
        std::to_string(tiles_) +
        (program_->code.empty()
             ? " (a program written before schema 3: re-run emit-device)"
             : ""));
  }
  for (int t = 0; t < tiles_; ++t) {
    const fb::TileCode& c = program_->code[t];
    const std::string where = "tile " + std::to_string(t) + " code: ";
    if (c.tile() != static_cast<uint32_t>(t)) {
      return Status::BadInput(where + "entry " + std::to_string(t) +
                              " names tile " + std::to_string(c.tile()));
    }
    if (int64_t{c.runtime_bytes()} != code_model_.runtime) {
      return Status::BadInput(where + "runtime of " +
                              std::to_string(c.runtime_bytes()) +
                              " bytes, the target's is " +
                              std::to_string(code_model_.runtime));
    }
    const int64_t total =
        int64_t{c.runtime_bytes()} + c.program_bytes() + c.exchange_bytes();
    if (int64_t{c.reserved_bytes()} != ir::CodeRegionBytes(*target_, total)) {
      return Status::BadInput(
          where + std::to_string(total) + " bytes of code need " +
          std::to_string(ir::CodeRegionBytes(*target_, total)) +
          " bytes of whole elements, the program reserves " +
          std::to_string(c.reserved_bytes()));
    }
    if (int64_t{c.reserved_bytes()} > standard_end_) {
      return Status::Infeasible(
          where + std::to_string(total) + " bytes of code (runtime " +
          std::to_string(c.runtime_bytes()) + ", program " +
          std::to_string(c.program_bytes()) + ", exchange tables " +
          std::to_string(c.exchange_bytes()) + ") do not fit in the " +
          std::to_string(standard_end_) + " bytes of standard memory");
    }
  }
  return Status::Ok();
}

// The program's own code and exchange tables per tile, by the target's byte
// model, must be what DeviceProgram.code claims.
Status Engine::CheckCodeSizes() {
  std::vector<int64_t> program(tiles_, 0), exchange(tiles_, 0);
  for (size_t s = 0; s < program_->supersteps.size(); ++s) {
    // Addresses as written: renames keep every piece's words.
    const kernels::PhaseTraffic traffic = kernels::TrafficOfStep(
        exchange_model_, *program_->supersteps[s],
        [&](uint32_t id) -> int64_t { return buffers_.at(id).buffer->offset; });
    kernels::AddSuperstepCode(code_model_, *program_->supersteps[s], traffic,
                              &program, &exchange);
  }
  for (int t = 0; t < tiles_; ++t) {
    const fb::TileCode& c = program_->code[t];
    if (int64_t{c.program_bytes()} != program[t] ||
        int64_t{c.exchange_bytes()} != exchange[t]) {
      return Status::BadInput(
          "tile " + std::to_string(t) + " code: the program claims " +
          std::to_string(c.program_bytes()) + " bytes of code and " +
          std::to_string(c.exchange_bytes()) +
          " of exchange tables; its supersteps need " +
          std::to_string(program[t]) + " and " + std::to_string(exchange[t]));
    }
  }
  return Status::Ok();
}

}  // namespace tilec::sim::engine
