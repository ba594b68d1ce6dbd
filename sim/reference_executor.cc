// The reference executor's op loop: the graph's checks and values, repeat
// bodies run iteration by iteration, sources made when first used, operands
// freed after their last use, and the helpers every op uses.

#include <glog/logging.h>

#include <chrono>
#include <memory>
#include <thread>

#include "sim/reference_executor.h"
#include "sim/tensor_data.h"

namespace tilec::kernels::executor {

Status Executor::Run() {
  TILEC_RETURN_IF_ERROR(Prepare());
  size_t next = 0;
  for (const ir::RepeatBody& body : bodies_) {
    TILEC_RETURN_IF_ERROR(RunOps(next, body.begin));
    for (uint32_t it = 0; it < body.repeat->count; ++it) {
      Bind(body, it);
      TILEC_RETURN_IF_ERROR(RunOps(body.begin, body.end));
    }
    Unbind();
    next = body.end;
  }
  return RunOps(next, module_.ops.size());
}

Status Executor::Prepare() {
  std::vector<ReferenceTensor> tensors;
  tensors.reserve(module_.values.size());
  for (const auto& value : module_.values) {
    if (value == nullptr) {
      return Status::BadInput("the module has an empty value");
    }
    if (value->dtype < fb::DType::MIN || value->dtype > fb::DType::MAX) {
      return Status::BadInput(DescribeValue(*value) + " has unknown dtype " +
                              std::to_string(static_cast<int>(value->dtype)));
    }
    ReferenceTensor t;
    t.id = value->id;
    t.name = value->name;
    t.shape = value->shape;
    t.file_shape = value->declared_shape;
    t.dtype = value->dtype;
    t.fp8_scale_exp = value->fp8_scale_exp;
    t.role = value->role;
    tensors.push_back(std::move(t));
  }
  result_->Reset(std::move(tensors));
  if (result_->values().size() != module_.values.size()) {
    return Status::BadInput("the module has duplicate value ids");
  }
  for (const auto& op : module_.ops) {
    if (op == nullptr) return Status::BadInput("the module has an empty op");
  }
  TILEC_RETURN_IF_ERROR(ir::VerifyRepeats(module_));
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(module_);
  if (!bodies.ok()) return bodies.status();
  bodies_ = std::move(*bodies);
  TILEC_RETURN_IF_ERROR(CheckProvided());
  FindLastUses();
  if (SourcesUpFront()) {
    TILEC_RETURN_IF_ERROR(MaterializeSources(AllSources()));
  }
  return Status::Ok();
}

Status Executor::RunOps(size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const fb::OperationT& op = *module_.ops[i];
    const auto start = std::chrono::steady_clock::now();
    if (!SourcesUpFront()) {
      TILEC_RETURN_IF_ERROR(MaterializeSources(SourcesFirstUsedBy(op)));
    }
    TILEC_RETURN_IF_ERROR(RunOp(op));
    if (options_.observe) {
      for (uint32_t id : op.results) {
        options_.observe(*result_->Find(id), iteration_);
      }
    }
    FreeDeadOperands(op, i);
    VLOG(1) << Describe(op) << ": "
            << std::chrono::duration<double>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " s";
  }
  return Status::Ok();
}

void Executor::Bind(const ir::RepeatBody& body, uint32_t it) {
  const fb::RepeatT& r = *body.repeat;
  body_ = &body;
  iteration_ = it;
  twins_.clear();
  for (const auto& [weight, twin] : ir::IterationWeights(r, it)) {
    twins_[weight] = twin;
  }
  if (it == 0) {
    invariant_ = LoopInvariants(body);
    return;
  }
  ReferenceTensor* out = result_->Mutable(r.carried_out);
  std::vector<float> data;
  data.swap(out->data);
  carried_ = std::make_unique<ReferenceTensor>(*out);  // without the data
  carried_->data = std::move(data);
  for (size_t i = body.begin; i < body.end; ++i) {
    for (uint32_t id : module_.ops[i]->results) defined_.erase(id);
  }
}

void Executor::Unbind() {
  body_ = nullptr;
  iteration_ = 0;
  twins_.clear();
  invariant_.clear();
  carried_.reset();
}

std::unordered_set<uint32_t> Executor::LoopInvariants(
    const ir::RepeatBody& body) const {
  const fb::RepeatT& r = *body.repeat;
  std::unordered_set<uint32_t> made, invariant;
  for (size_t i = body.begin; i < body.end; ++i) {
    made.insert(module_.ops[i]->results.begin(),
                module_.ops[i]->results.end());
  }
  const std::unordered_set<uint32_t> weights(r.weights.begin(),
                                             r.weights.end());
  for (size_t i = body.begin; i < body.end; ++i) {
    for (uint32_t id : module_.ops[i]->operands) {
      if (!made.count(id) && id != r.carried_in && !weights.count(id)) {
        invariant.insert(id);
      }
    }
  }
  return invariant;
}

ReferenceTensor* Executor::Bound(uint32_t id) const {
  if (carried_ != nullptr && id == body_->repeat->carried_in) {
    return carried_.get();
  }
  auto twin = twins_.find(id);
  return result_->Mutable(twin == twins_.end() ? id : twin->second);
}

bool Executor::ReadAgain(uint32_t id) const {
  return body_ != nullptr && iteration_ + 1 < body_->repeat->count &&
         invariant_.count(id) > 0;
}

std::vector<const fb::ValueT*> Executor::AllSources() const {
  std::vector<const fb::ValueT*> sources;
  for (const auto& value : module_.values) {
    if (IsSource(value->id)) sources.push_back(value.get());
  }
  return sources;
}

bool Executor::SourcesUpFront() const {
  return options_.keep == ReferenceOptions::Keep::kAll ||
         options_.keep == ReferenceOptions::Keep::kSourcesAndOutputs;
}

std::vector<const fb::ValueT*> Executor::SourcesFirstUsedBy(
    const fb::OperationT& op) {
  std::vector<const fb::ValueT*> sources;
  for (uint32_t operand : op.operands) {
    const ReferenceTensor* bound = Bound(operand);
    if (bound == nullptr || bound == carried_.get()) continue;
    const uint32_t id = bound->id;
    auto it = value_of_.find(id);
    if (it == value_of_.end() || !IsSource(id) || defined_.count(id) ||
        std::find(sources.begin(), sources.end(), it->second) !=
            sources.end()) {
      continue;
    }
    sources.push_back(it->second);
  }
  return sources;
}

void Executor::FindLastUses() {
  for (const auto& value : module_.values) value_of_[value->id] = value.get();
  for (size_t i = 0; i < module_.ops.size(); ++i) {
    if (module_.ops[i] == nullptr) continue;
    for (uint32_t id : module_.ops[i]->operands) last_use_[id] = i;
  }
}

bool Executor::Kept(const ReferenceTensor& t) const {
  switch (options_.keep) {
    case ReferenceOptions::Keep::kAll:
      return true;
    case ReferenceOptions::Keep::kSourcesAndOutputs:
      return t.role == fb::ValueRole::Output || IsSource(t.id);
    case ReferenceOptions::Keep::kInputsAndOutputs:
      return t.role == fb::ValueRole::Output ||
             t.role == fb::ValueRole::Input;
    case ReferenceOptions::Keep::kOutputs:
      return t.role == fb::ValueRole::Output;
  }
  return true;
}

void Executor::FreeDeadOperands(const fb::OperationT& op, size_t index) {
  // The op's operands and results are all held here: the step's peak.
  most_held_ = std::max(most_held_, HeldElements());
  for (uint32_t id : op.operands) {
    auto last = last_use_.find(id);
    ReferenceTensor* t = Bound(id);
    if (t == nullptr || last == last_use_.end() || last->second != index ||
        ReadAgain(id) || (t != carried_.get() && Kept(*t))) {
      continue;
    }
    Recycle(std::move(t->data));
    t->data = {};
  }
}

std::vector<float> Executor::NewBuffer(size_t n) {
  auto best = spare_.end();
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    const size_t c = it->capacity();
    if (c >= n && c <= 2 * n &&
        (best == spare_.end() || c < best->capacity())) {
      best = it;
    }
  }
  if (best == spare_.end()) {
    TrimSpares(n);
    return std::vector<float>(n);
  }
  std::vector<float> v = std::move(*best);
  spare_.erase(best);
  // Within its capacity: no byte is written, where zeros (or a fresh
  // allocation) would cost a pass over the whole buffer on one thread.
  v.resize(n);
  return v;
}

void Executor::Recycle(std::vector<float> data) {
  if (data.capacity() < kMinSpareElements) return;
  if (spare_.size() == kSpareBuffers) spare_.erase(spare_.begin());
  spare_.push_back(std::move(data));
  TrimSpares(0);
}

void Executor::TrimSpares(size_t coming) {
  const size_t held = HeldElements() + coming;
  most_held_ = std::max(most_held_, held);
  size_t spares = 0;
  for (const std::vector<float>& v : spare_) spares += v.capacity();
  while (!spare_.empty() && held + spares > most_held_) {
    spares -= spare_.front().capacity();
    spare_.erase(spare_.begin());
  }
}

size_t Executor::HeldElements() const {
  size_t held = carried_ ? carried_->data.capacity() : 0;
  for (const ReferenceTensor& t : result_->values()) held += t.data.capacity();
  return held;
}

Status Executor::CheckProvided() {
  for (const auto& op : module_.ops) {
    if (op == nullptr) continue;
    produced_.insert(op->results.begin(), op->results.end());
  }
  for (const auto& [id, data] : options_.provided) {
    const ReferenceTensor* t = result_->Find(id);
    if (t == nullptr) {
      return Status::BadInput("provided data for value " +
                              std::to_string(id) + ", which does not exist");
    }
    if (produced_.count(id) > 0) {
      return Status::BadInput("provided data for value " +
                              std::to_string(id) + " (" + t->name +
                              "), which an op computes");
    }
  }
  return Status::Ok();
}

void Executor::GiveSpareBuffers(const std::vector<const fb::ValueT*>& sources) {
  for (const fb::ValueT* value : sources) {
    size_t count = 0;
    if (options_.provided.count(value->id) ||
        !ShapeElements(value->shape, DescribeValue(*value), &count).ok() ||
        count < kMinSpareElements) {
      continue;
    }
    result_->Mutable(value->id)->data = NewBuffer(count);
  }
}

Status Executor::MaterializeSources(
    const std::vector<const fb::ValueT*>& sources) {
  std::vector<Status> statuses(sources.size());
  GiveSpareBuffers(sources);
  auto materialize = [&](size_t i) {
    const fb::ValueT& value = *sources[i];
    ReferenceTensor* t = result_->Mutable(value.id);
    auto it = options_.provided.find(value.id);
    if (it == options_.provided.end() && !options_.observe_source) {
      statuses[i] = MaterializeValue(value, options_.sidecar_dir, &t->data);
      return;
    }
    if (it == options_.provided.end()) {
      // MaterializeValue's steps, with the unrounded data shown between.
      statuses[i] =
          MaterializeUnrounded(value, options_.sidecar_dir, &t->data);
      if (!statuses[i].ok()) return;
      if (options_.observe_source) options_.observe_source(value, t->data);
      RoundToStored(value.dtype, value.fp8_scale_exp, t->data);
      return;
    }
    size_t count = 0;
    statuses[i] = ShapeElements(value.shape, DescribeValue(value), &count);
    if (!statuses[i].ok()) return;
    if (it->second.size() != count) {
      statuses[i] = Status::BadInput(
          "provided data for " + DescribeValue(value) + " has " +
          std::to_string(it->second.size()) + " elements, its shape " +
          ShapeText(value.shape) + " has " + std::to_string(count));
      return;
    }
    t->data = it->second;
    RoundToStored(value.dtype, value.fp8_scale_exp, t->data);
  };
  const int threads = std::max(1, options_.threads);
  std::vector<std::thread> workers;
  for (int w = 1; w < threads; ++w) {
    workers.emplace_back([&, w] {
      for (size_t i = w; i < sources.size(); i += threads) materialize(i);
    });
  }
  for (size_t i = 0; i < sources.size(); i += threads) materialize(i);
  for (std::thread& t : workers) t.join();
  for (size_t i = 0; i < sources.size(); ++i) {
    TILEC_RETURN_IF_ERROR(statuses[i]);
    defined_.insert(sources[i]->id);
  }
  return Status::Ok();
}

std::string Executor::Describe(const fb::OperationT& op) {
  const char* kind = fb::EnumNameOpKind(op.kind);
  std::string text =
      "op " + std::to_string(op.id) + " (" +
      ((kind != nullptr && kind[0] != '\0') ? kind : "unknown");
  if (!op.name.empty()) text += " " + op.name;
  return text + ")";
}

Status Executor::Bad(const fb::OperationT& op, const std::string& what) const {
  return Status::BadInput(Describe(op) + ": " + what);
}

Status Executor::Check(const fb::OperationT& op, const Status& status) const {
  if (status.ok()) return Status::Ok();
  return Status::Internal(Describe(op) + ": " + status.message());
}

Status Executor::Arity(const fb::OperationT& op, size_t operands,
                       size_t results) const {
  if (op.operands.size() == operands && op.results.size() == results) {
    return Status::Ok();
  }
  return Bad(op, "expected " + std::to_string(operands) + " operands and " +
                     std::to_string(results) + " results, got " +
                     std::to_string(op.operands.size()) + " and " +
                     std::to_string(op.results.size()));
}

Status Executor::Input(const fb::OperationT& op, size_t i,
                       const ReferenceTensor** tensor) const {
  const uint32_t id = op.operands[i];
  const ReferenceTensor* t = Bound(id);
  if (t == nullptr) {
    return Bad(op, "operand " + std::to_string(i) + " refers to value " +
                       std::to_string(id) + ", which does not exist");
  }
  if (t != carried_.get() && defined_.count(t->id) == 0) {
    return Bad(op, "operand " + std::to_string(i) + " (value " +
                       std::to_string(t->id) + " " + t->name +
                       ") is used before an op computes it");
  }
  *tensor = t;
  return Status::Ok();
}

Status Executor::Output(const fb::OperationT& op, size_t i,
                        ReferenceTensor** tensor) {
  const uint32_t id = op.results[i];
  ReferenceTensor* t = result_->Mutable(id);
  if (t == nullptr) {
    return Bad(op, "result " + std::to_string(i) + " refers to value " +
                       std::to_string(id) + ", which does not exist");
  }
  if (defined_.count(id) > 0) {
    return Bad(op, "result " + std::to_string(i) + " (value " +
                       std::to_string(id) + " " + t->name +
                       ") is already defined");
  }
  *tensor = t;
  return Status::Ok();
}

void Executor::Store(ReferenceTensor* t, std::vector<float> data) {
  RoundToStored(t->dtype, t->fp8_scale_exp, data);
  Keep(t, std::move(data));
}

void Executor::Keep(ReferenceTensor* t, std::vector<float> data) {
  t->data = std::move(data);
  defined_.insert(t->id);
}

Status Executor::Elements(const fb::OperationT& op,
                          const std::vector<int64_t>& shape,
                          size_t* count) const {
  return ShapeElements(shape, Describe(op), count);
}

Status Executor::CastInPlace(const fb::OperationT& op, fb::DType dtype,
                             int fp8_scale_exp, std::vector<float>* data) {
  const DType kd = KernelDType(dtype);
  const int scale = ir::StorageScaleExp(dtype, fp8_scale_exp);
  const size_t width = static_cast<size_t>(DTypeBytes(kd));
  const int64_t n = static_cast<int64_t>(data->size());
  constexpr int64_t kChunk = int64_t{1} << 14;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = n >= kMinParallelElements ? options_.threads : 1;
  return Check(
      op, ParallelFor(chunks, threads, [&](int64_t first, int64_t end) {
        std::vector<uint8_t> bytes(static_cast<size_t>(kChunk) * width);
        for (int64_t chunk = first; chunk < end; ++chunk) {
          const int64_t begin = chunk * kChunk;
          const int64_t len = std::min(kChunk, n - begin);
          float* part = data->data() + begin;
          const std::span<uint8_t> staged(bytes.data(),
                                          static_cast<size_t>(len) * width);
          const Operand out{staged.data(), staged.size(), kd, scale};
          TILEC_RETURN_IF_ERROR(Cast(In(part, len), out, 1, len));
          LoadArrayAs(kd, staged, scale,
                      std::span<float>(part, static_cast<size_t>(len)));
        }
        return Status::Ok();
      }));
}

}  // namespace tilec::kernels::executor
