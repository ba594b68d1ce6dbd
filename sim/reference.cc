#include "sim/reference.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <unordered_set>

#include "formats/basics.h"
#include "formats/op_shapes.h"
#include "formats/repeat.h"
#include "kernels/blas.h"
#include "kernels/kernels.h"
#include "sim/npy.h"
#include "sim/patchify.h"
#include "sim/tensor_data.h"

namespace tilec::kernels {
namespace {

// GEMMs below this many multiply-accumulates are not worth a thread.
constexpr int64_t kMinParallelMacs = int64_t{1} << 22;
// Nor row-wise kernels (LayerNorm, Softmax, GELU, adds) below this many
// elements.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;

// Whether a GEMM must sum in the tile kernels' k order (kernels.h Gemm)
// rather than OpenBLAS's (kernels/blas.h). FP8: the simulator's FP8 tile
// kernels are compared with these sums bit for bit where the planner leaves
// K whole (docs/quantize.md), and one F32 difference can move a result a
// whole FP8 step.
bool ExactOrder(fb::DType x, fb::DType y) {
  return ir::IsFp8(x) || ir::IsFp8(y);
}

// Kernel operands over F32 arrays. Kernels never write their input
// operands, so the const_cast in In() is never acted upon.
Operand In(const float* data, size_t elements) {
  return Operand{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(data)),
                 elements * sizeof(float), DType::kF32, 0};
}
Operand In(const std::vector<float>& data) {
  return In(data.data(), data.size());
}
Operand Out(float* data, size_t elements) {
  return Operand{reinterpret_cast<uint8_t*>(data), elements * sizeof(float),
                 DType::kF32, 0};
}
Operand Out(std::vector<float>& data) { return Out(data.data(), data.size()); }

// rows = product of all but the last dimension, w = the last (a scalar is
// one row of one element).
void RowsAndWidth(const std::vector<int64_t>& shape, int64_t* rows,
                  int64_t* w) {
  *w = shape.empty() ? 1 : shape.back();
  *rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) *rows *= shape[i];
}

// Runs body(begin, end) over [0, n) split into `threads` contiguous parts,
// the first on the calling thread. Returns the first failure in part order
// so that the error does not depend on scheduling.
Status ParallelFor(int64_t n, int threads,
                   const std::function<Status(int64_t, int64_t)>& body) {
  const int parts =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  if (parts <= 1) return body(0, n);
  std::vector<Status> statuses(parts);
  std::vector<std::thread> workers;
  auto bound = [n, parts](int p) { return n * p / parts; };
  for (int p = 1; p < parts; ++p) {
    workers.emplace_back(
        [&, p] { statuses[p] = body(bound(p), bound(p + 1)); });
  }
  statuses[0] = body(bound(0), bound(1));
  for (std::thread& t : workers) t.join();
  for (const Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return ir::ShapeToString(shape);
}

// Runs the ops of one module in order over one ReferenceResult.
class Executor {
 public:
  Executor(const fb::ModuleT& module, const ReferenceOptions& options,
           ReferenceResult* result)
      : module_(module), options_(options), result_(result) {}

  Status Run() {
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

 private:
  // ------------------------------------------------------------ the op loop

  // The result's values, the checks of the graph, and the sources made up
  // front where the result keeps them.
  Status Prepare() {
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

  // Ops [begin, end) in order, in the current iteration's binding.
  Status RunOps(size_t begin, size_t end) {
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

  // ------------------------------------------------------------ repeats

  // Iteration `it` of `body` (docs/repeat.md): body weights read their
  // twins; after the first, carried_in reads what the previous iteration
  // left in carried_out (moved aside, since this iteration makes
  // carried_out anew), and every result of the body is made again.
  void Bind(const ir::RepeatBody& body, uint32_t it) {
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

  void Unbind() {
    body_ = nullptr;
    iteration_ = 0;
    twins_.clear();
    invariant_.clear();
    carried_.reset();
  }

  // Values the body reads that it does not make, other than carried_in and
  // the body weights: every iteration reads the same data, so they live
  // until the last iteration's last read.
  std::unordered_set<uint32_t> LoopInvariants(
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

  // The tensor operand `id` reads in the current iteration: a twin, the
  // carried value, or the value itself; nullptr if it does not exist.
  ReferenceTensor* Bound(uint32_t id) const {
    if (carried_ != nullptr && id == body_->repeat->carried_in) {
      return carried_.get();
    }
    auto twin = twins_.find(id);
    return result_->Mutable(twin == twins_.end() ? id : twin->second);
  }

  // A loop-invariant value is read again by the next iteration.
  bool ReadAgain(uint32_t id) const {
    return body_ != nullptr && iteration_ + 1 < body_->repeat->count &&
           invariant_.count(id) > 0;
  }

  // ------------------------------------------------------------ sources

  // Values that no op produces.
  bool IsSource(uint32_t id) const { return produced_.count(id) == 0; }

  std::vector<const fb::ValueT*> AllSources() const {
    std::vector<const fb::ValueT*> sources;
    for (const auto& value : module_.values) {
      if (IsSource(value->id)) sources.push_back(value.get());
    }
    return sources;
  }

  // Sources are made up front where the result keeps them all anyway;
  // otherwise each just before its first read (twins: their iteration's).
  bool SourcesUpFront() const {
    return options_.keep == ReferenceOptions::Keep::kAll ||
           options_.keep == ReferenceOptions::Keep::kSourcesAndOutputs;
  }

  // The sources `op` reads (as bound) that nothing has made yet (each value
  // once).
  std::vector<const fb::ValueT*> SourcesFirstUsedBy(const fb::OperationT& op) {
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

  // The index of the last op that reads each value.
  void FindLastUses() {
    for (const auto& value : module_.values) value_of_[value->id] = value.get();
    for (size_t i = 0; i < module_.ops.size(); ++i) {
      if (module_.ops[i] == nullptr) continue;
      for (uint32_t id : module_.ops[i]->operands) last_use_[id] = i;
    }
  }

  bool Kept(const ReferenceTensor& t) const {
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

  // Operands (as bound) whose last reader is op `index` in this iteration
  // and that the result does not keep: their memory goes back before the
  // next op runs.
  void FreeDeadOperands(const fb::OperationT& op, size_t index) {
    for (uint32_t id : op.operands) {
      auto last = last_use_.find(id);
      ReferenceTensor* t = Bound(id);
      if (t == nullptr || last == last_use_.end() || last->second != index ||
          ReadAgain(id) || (t != carried_.get() && Kept(*t))) {
        continue;
      }
      std::vector<float>().swap(t->data);
    }
  }

  Status CheckProvided() {
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

  // Sources get their contents (init, sidecar or provided) before an op
  // reads them. Generation is independent per value, so values are spread
  // over the threads; each value's contents do not depend on the split.
  Status MaterializeSources(const std::vector<const fb::ValueT*>& sources) {
    std::vector<Status> statuses(sources.size());
    auto materialize = [&](size_t i) {
      const fb::ValueT& value = *sources[i];
      ReferenceTensor* t = result_->Mutable(value.id);
      auto it = options_.provided.find(value.id);
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

  // ------------------------------------------------------------ helpers

  static std::string Describe(const fb::OperationT& op) {
    const char* kind = fb::EnumNameOpKind(op.kind);
    std::string text =
        "op " + std::to_string(op.id) + " (" +
        ((kind != nullptr && kind[0] != '\0') ? kind : "unknown");
    if (!op.name.empty()) text += " " + op.name;
    return text + ")";
  }

  Status Bad(const fb::OperationT& op, const std::string& what) const {
    return Status::BadInput(Describe(op) + ": " + what);
  }

  // A kernel failure on shapes that were checked first is a bug.
  Status Check(const fb::OperationT& op, const Status& status) const {
    if (status.ok()) return Status::Ok();
    return Status::Internal(Describe(op) + ": " + status.message());
  }

  Status Arity(const fb::OperationT& op, size_t operands,
               size_t results) const {
    if (op.operands.size() == operands && op.results.size() == results) {
      return Status::Ok();
    }
    return Bad(op, "expected " + std::to_string(operands) + " operands and " +
                       std::to_string(results) + " results, got " +
                       std::to_string(op.operands.size()) + " and " +
                       std::to_string(op.results.size()));
  }

  // Operand i as the current iteration binds it, which must have been
  // computed already.
  Status Input(const fb::OperationT& op, size_t i,
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

  // Result i, which must not have been computed yet.
  Status Output(const fb::OperationT& op, size_t i, ReferenceTensor** tensor) {
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

  // Stores an op's F32 result in the value's dtype: where the device rounds.
  void Store(ReferenceTensor* t, std::vector<float> data) {
    RoundToStored(t->dtype, t->fp8_scale_exp, data);
    t->data = std::move(data);
    defined_.insert(t->id);
  }

  Status Elements(const fb::OperationT& op, const std::vector<int64_t>& shape,
                  size_t* count) const {
    return ShapeElements(shape, Describe(op), count);
  }

  // Rounds `data` to `dtype` through the cast kernel (encode into the
  // dtype's bytes, decode back), as a device cast does.
  // Element by element, so in chunks through a small staging buffer,
  // spread over the threads.
  Status CastInPlace(const fb::OperationT& op, fb::DType dtype,
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

  // ------------------------------------------------------------ ops

  Status RunOp(const fb::OperationT& op) {
    switch (op.kind) {
      case fb::OpKind::LayerNorm:
      case fb::OpKind::MatMul:
      case fb::OpKind::BiasAdd:
      case fb::OpKind::Gelu:
      case fb::OpKind::Add:
      case fb::OpKind::Cast:
      case fb::OpKind::Softmax:
      case fb::OpKind::AttentionScores:
      case fb::OpKind::AttentionContext:
      case fb::OpKind::Redistribute:
      case fb::OpKind::Patchify:
      case fb::OpKind::CopyRows: {
        // The kinds with a shape rule: the verifier's checks, run again so
        // the reference never trusts its caller.
        TILEC_RETURN_IF_ERROR(ir::CheckOpShapes(op, module_));
        break;
      }
      case fb::OpKind::Fused:
      case fb::OpKind::Moments:
      case fb::OpKind::Normalize:
        break;  // checked by their own functions
      default:
        return Bad(
            op, "unknown op kind " + std::to_string(static_cast<int>(op.kind)));
    }
    switch (op.kind) {
      case fb::OpKind::LayerNorm:
        return RunLayerNorm(op);
      case fb::OpKind::MatMul:
        return RunMatMul(op);
      case fb::OpKind::BiasAdd:
      case fb::OpKind::Add:
        return RunAdd(op);
      case fb::OpKind::Gelu:
        return RunGelu(op);
      case fb::OpKind::Cast:
      case fb::OpKind::Redistribute:
        return RunCast(op);
      case fb::OpKind::Softmax:
        return RunSoftmax(op);
      case fb::OpKind::AttentionScores:
        return RunAttentionScores(op);
      case fb::OpKind::AttentionContext:
        return RunAttentionContext(op);
      case fb::OpKind::Fused:
        return RunFused(op);
      case fb::OpKind::Moments:
        return RunMoments(op);
      case fb::OpKind::Normalize:
        return RunNormalize(op);
      case fb::OpKind::Patchify:
        return RunPatchify(op);
      case fb::OpKind::CopyRows:
        return RunCopyRows(op);
    }
    return Bad(op, "unknown op kind");  // unreachable: checked above
  }

  // Runs body(first_row, row_count) over blocks of rows on the threads, for
  // kernels whose every output row depends only on the same input row: the
  // split changes nothing but the time. `split` are the arrays the body
  // indexes by row, which must hold rows x w elements (the kernels check
  // the sizes of the slices they are given, not of the whole arrays).
  Status ByRows(const fb::OperationT& op, int64_t rows, int64_t w,
                std::initializer_list<const std::vector<float>*> split,
                const std::function<Status(int64_t, int64_t)>& body) const {
    for (const std::vector<float>* data : split) {
      if (static_cast<int64_t>(data->size()) != rows * w) {
        return Check(op, Status::BadInput(
                             "an operand holds " +
                             std::to_string(data->size()) + " elements, not " +
                             std::to_string(rows) + " x " + std::to_string(w)));
      }
    }
    const int threads = rows * w >= kMinParallelElements ? options_.threads : 1;
    return Check(op,
                 ParallelFor(rows, threads, [&](int64_t begin, int64_t end) {
                   return body(begin, end - begin);
                 }));
  }

  Status RunLayerNorm(const fb::OperationT& op) {
    const ReferenceTensor *x, *gamma, *beta;
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Input(op, 1, &gamma));
    TILEC_RETURN_IF_ERROR(Input(op, 2, &beta));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    std::vector<float> out(x->data.size());
    TILEC_RETURN_IF_ERROR(
        ByRows(op, rows, w, {&x->data, &out}, [&](int64_t r0, int64_t n) {
          return LayerNorm(In(x->data.data() + r0 * w, n * w), In(gamma->data),
                           In(beta->data), Out(out.data() + r0 * w, n * w), n,
                           w, op.eps);
        }));
    Store(y, std::move(out));
    return Status::Ok();
  }

  Status RunMatMul(const fb::OperationT& op) {
    const ReferenceTensor *a, *b;
    ReferenceTensor* c;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &a));
    TILEC_RETURN_IF_ERROR(Input(op, 1, &b));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &c));
    const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
    std::vector<float> out(static_cast<size_t>(m * n));
    const int threads = m * k * n >= kMinParallelMacs ? options_.threads : 1;
    if (!ExactOrder(a->dtype, b->dtype)) {
      BlasProduct p;
      p.m = m, p.k = k, p.n = n;
      p.a = a->data.data(), p.lda = k;
      p.b = b->data.data(), p.ldb = n;
      p.c = out.data(), p.ldc = n;
      TILEC_RETURN_IF_ERROR(Check(op, BlasMultiplyParallel(p, threads)));
      Store(c, std::move(out));
      return Status::Ok();
    }
    // Row blocks of A and C: every C element is still the same k-ordered
    // sum, so the split changes nothing but the time.
    TILEC_RETURN_IF_ERROR(
        Check(op, ParallelFor(m, threads, [&](int64_t begin, int64_t end) {
                const int64_t rows = end - begin;
                return Gemm(In(a->data.data() + begin * k, rows * k),
                            In(b->data), Out(out.data() + begin * n, rows * n),
                            rows, k, n, /*accumulate=*/false);
              })));
    Store(c, std::move(out));
    return Status::Ok();
  }

  Status RunAdd(const fb::OperationT& op) {
    const ReferenceTensor *x, *y;
    ReferenceTensor* z;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Input(op, 1, &y));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &z));
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    std::vector<float> out(x->data.size());
    const bool bias = op.kind == fb::OpKind::BiasAdd;
    // A bias is one row for every row, not split.
    TILEC_RETURN_IF_ERROR(ByRows(
        op, rows, w, {&x->data, bias ? &x->data : &y->data, &out},
        [&](int64_t r0, int64_t n) {
          const Operand xs = In(x->data.data() + r0 * w, n * w);
          const Operand outs = Out(out.data() + r0 * w, n * w);
          return bias ? BiasAdd(xs, In(y->data), outs, n, w)
                      : Add(xs, In(y->data.data() + r0 * w, n * w), outs, n, w);
        }));
    Store(z, std::move(out));
    return Status::Ok();
  }

  Status GeluFormOf(const fb::OperationT& op, fb::GeluForm form,
                    GeluForm* out) const {
    StatusOr<GeluForm> parsed = GeluFormFromInt(static_cast<int>(form));
    if (!parsed.ok()) return Bad(op, parsed.status().message());
    *out = *parsed;
    return Status::Ok();
  }

  Status RunGelu(const fb::OperationT& op) {
    const ReferenceTensor* x;
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    GeluForm form = GeluForm::kTanh;
    TILEC_RETURN_IF_ERROR(GeluFormOf(op, op.gelu, &form));
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    std::vector<float> out(x->data.size());
    TILEC_RETURN_IF_ERROR(
        ByRows(op, rows, w, {&x->data, &out}, [&](int64_t r0, int64_t n) {
          return GeluKernel(In(x->data.data() + r0 * w, n * w),
                            Out(out.data() + r0 * w, n * w), n, w, form);
        }));
    Store(y, std::move(out));
    return Status::Ok();
  }

  // Cast and Redistribute: the operand's values in the result's dtype.
  Status RunCast(const fb::OperationT& op) {
    const ReferenceTensor* x;
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    std::vector<float> out = x->data;
    TILEC_RETURN_IF_ERROR(CastInPlace(op, y->dtype, y->fp8_scale_exp, &out));
    Store(y, std::move(out));
    return Status::Ok();
  }

  // Row copies: the shape rule has checked every segment's bounds and the
  // verifier that operands and result share dtype and scale, so stored
  // values are moved exactly (Store rounds nothing that is not already so).
  Status RunCopyRows(const fb::OperationT& op) {
    std::vector<const ReferenceTensor*> xs(op.operands.size());
    for (size_t i = 0; i < xs.size(); ++i) {
      TILEC_RETURN_IF_ERROR(Input(op, i, &xs[i]));
    }
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    const int64_t w = y->shape[1];
    std::vector<float> out(static_cast<size_t>(y->shape[0] * w));
    for (const auto& r : op.rows) {
      const std::vector<float>& src = xs[r->operand]->data;
      if (static_cast<int64_t>(src.size()) < (r->first + r->count) * w) {
        return Bad(op, "operand " + std::to_string(r->operand) + " holds " +
                           std::to_string(src.size()) + " elements");
      }
      std::copy(src.begin() + r->first * w,
                src.begin() + (r->first + r->count) * w,
                out.begin() + r->at * w);
    }
    Store(y, std::move(out));
    return Status::Ok();
  }

  Status RunSoftmax(const fb::OperationT& op) {
    const ReferenceTensor* x;
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    std::vector<float> out(x->data.size());
    TILEC_RETURN_IF_ERROR(
        ByRows(op, rows, w, {&x->data, &out}, [&](int64_t r0, int64_t n) {
          return Softmax(In(x->data.data() + r0 * w, n * w),
                         Out(out.data() + r0 * w, n * w), n, w, op.scale);
        }));
    Store(y, std::move(out));
    return Status::Ok();
  }

  // Copies columns [column, column + d) of rows [row, row + t) of a
  // row-major matrix with `stride` columns into a dense [t, d] block, or its
  // transpose [d, t].
  static void Gather(const float* src, int64_t stride, int64_t row,
                     int64_t column, int64_t t, int64_t d, bool transpose,
                     float* dst) {
    for (int64_t i = 0; i < t; ++i) {
      const float* s = src + (row + i) * stride + column;
      for (int64_t j = 0; j < d; ++j) {
        if (transpose) {
          dst[j * t + i] = s[j];
        } else {
          dst[i * d + j] = s[j];
        }
      }
    }
  }

  // Where head h's q, k and v columns live: the self form reads all three
  // from one fused qkv [B*T, 3HD]; the cross form reads q from its own
  // operand [B*Tq, HD] and k, v from kv [B*Tk, 2HD] (formats/op_shapes.h).
  struct HeadColumns {
    const ReferenceTensor* q = nullptr;  // scores only
    const ReferenceTensor* kv = nullptr;
    int64_t q_stride = 0, kv_stride = 0;
    int64_t k_column = 0, v_column = 0;  // of head 0 in kv; + h*D per head
  };

  static HeadColumns ColumnsOf(const ReferenceTensor* q,
                               const ReferenceTensor* kv, int64_t hd) {
    HeadColumns c;
    c.q = q;
    c.kv = kv;
    const bool cross = kv->shape[1] == 2 * hd;
    c.kv_stride = kv->shape[1];
    c.q_stride = q == nullptr ? 0 : q->shape[1];
    c.k_column = cross ? 0 : hd;
    c.v_column = cross ? hd : 2 * hd;
    return c;
  }

  Status RunAttentionScores(const fb::OperationT& op) {
    const ReferenceTensor *q, *kv;
    ReferenceTensor* scores;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &q));
    kv = q;
    if (op.operands.size() == 2) TILEC_RETURN_IF_ERROR(Input(op, 1, &kv));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &scores));
    const int64_t batch = scores->shape[0], heads = op.heads,
                  tq = scores->shape[2], tk = scores->shape[3],
                  d = op.head_dim;
    const HeadColumns cols = ColumnsOf(q, kv, heads * d);
    std::vector<float> out(static_cast<size_t>(batch * heads * tq * tk));
    // One GEMM per (batch, head); pairs are independent, so they are spread
    // over the threads.
    const int threads =
        batch * heads * tq * tk * d >= kMinParallelMacs ? options_.threads : 1;
    const bool exact = ExactOrder(q->dtype, kv->dtype);
    auto body = [&](int64_t begin, int64_t end) -> Status {
      std::vector<float> qh, k_t;
      if (exact) {
        qh.resize(static_cast<size_t>(tq * d));
        k_t.resize(static_cast<size_t>(d * tk));
      }
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t b = pair / heads, h = pair % heads;
        float* s = out.data() + pair * tq * tk;
        if (!exact) {
          // q [tq, d] times k [tk, d] transposed, read in place in the
          // fused operands.
          BlasProduct p;
          p.m = tq, p.k = d, p.n = tk;
          p.a = q->data.data() + b * tq * cols.q_stride + h * d;
          p.lda = cols.q_stride;
          p.b =
              kv->data.data() + b * tk * cols.kv_stride + cols.k_column + h * d;
          p.ldb = cols.kv_stride;
          p.transpose_b = true;
          p.c = s, p.ldc = tk;
          TILEC_RETURN_IF_ERROR(BlasMultiply(p));
        } else {
          Gather(q->data.data(), cols.q_stride, b * tq, h * d, tq, d, false,
                 qh.data());
          Gather(kv->data.data(), cols.kv_stride, b * tk, cols.k_column + h * d,
                 tk, d, true, k_t.data());
          TILEC_RETURN_IF_ERROR(
              Gemm(In(qh), In(k_t), Out(s, tq * tk), tq, d, tk, false));
        }
        // The scale multiplies the F32 sums; the result rounds once.
        for (int64_t i = 0; i < tq * tk; ++i) s[i] *= op.scale;
      }
      return Status::Ok();
    };
    TILEC_RETURN_IF_ERROR(Check(op, ParallelFor(batch * heads, threads, body)));
    Store(scores, std::move(out));
    return Status::Ok();
  }

  Status RunAttentionContext(const fb::OperationT& op) {
    const ReferenceTensor *probs, *kv;
    ReferenceTensor* ctx;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &probs));
    TILEC_RETURN_IF_ERROR(Input(op, 1, &kv));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &ctx));
    const int64_t batch = probs->shape[0], heads = op.heads,
                  tq = probs->shape[2], tk = probs->shape[3],
                  d = op.head_dim;
    const HeadColumns cols = ColumnsOf(nullptr, kv, heads * d);
    std::vector<float> out(static_cast<size_t>(batch * tq * heads * d));
    const int threads =
        batch * heads * tq * tk * d >= kMinParallelMacs ? options_.threads : 1;
    const bool exact = ExactOrder(probs->dtype, kv->dtype);
    auto body = [&](int64_t begin, int64_t end) -> Status {
      std::vector<float> v, c;
      if (exact) {
        v.resize(static_cast<size_t>(tk * d));
        c.resize(static_cast<size_t>(tq * d));
      }
      for (int64_t pair = begin; pair < end; ++pair) {
        const int64_t b = pair / heads, h = pair % heads;
        const float* p = probs->data.data() + pair * tq * tk;
        if (!exact) {
          // probs [tq, tk] times the v slice [tk, d] of kv, into columns
          // h*D.. of rows b*Tq.. of the result, in place.
          BlasProduct product;
          product.m = tq, product.k = tk, product.n = d;
          product.a = p, product.lda = tk;
          product.b =
              kv->data.data() + b * tk * cols.kv_stride + cols.v_column + h * d;
          product.ldb = cols.kv_stride;
          product.c = out.data() + b * tq * heads * d + h * d;
          product.ldc = heads * d;
          TILEC_RETURN_IF_ERROR(BlasMultiply(product));
          continue;
        }
        Gather(kv->data.data(), cols.kv_stride, b * tk, cols.v_column + h * d,
               tk, d, false, v.data());
        if (Status st =
                Gemm(In(p, tq * tk), In(v), Out(c), tq, tk, d, false);
            !st.ok()) {
          return st;
        }
        // Head h fills columns h*D .. h*D+D-1 of rows b*Tq .. b*Tq+Tq-1.
        for (int64_t i = 0; i < tq; ++i) {
          std::copy_n(c.data() + i * d, d,
                      out.data() + (b * tq + i) * heads * d + h * d);
        }
      }
      return Status::Ok();
    };
    TILEC_RETURN_IF_ERROR(Check(op, ParallelFor(batch * heads, threads, body)));
    Store(ctx, std::move(out));
    return Status::Ok();
  }

  // sim/patchify.h: the gather the simulator's host also applies.
  Status RunPatchify(const fb::OperationT& op) {
    const ReferenceTensor* image;
    ReferenceTensor* patches;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &image));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &patches));
    Store(patches, Patchify(image->data, image->shape, op.patch));
    return Status::Ok();
  }

  // Moments results are F32 [rows, 3] ({count, mean, M2} per row).
  Status CheckMomentsValue(const fb::OperationT& op, const ReferenceTensor& m,
                           int64_t rows, const char* role) const {
    const std::vector<int64_t> expected = {rows, kMomentFloats};
    if (m.shape != expected) {
      return Bad(op, std::string(role) + " (value " + std::to_string(m.id) +
                         " " + m.name + ") has shape " + ShapeText(m.shape) +
                         ", expected " + ShapeText(expected) +
                         " ({count, mean, M2} per row)");
    }
    if (m.dtype != fb::DType::F32) {
      return Bad(op, std::string(role) + " (value " + std::to_string(m.id) +
                         " " + m.name + ") is " +
                         std::string(DTypeName(KernelDType(m.dtype))) +
                         ", moments are F32");
    }
    return Status::Ok();
  }

  Status RunMoments(const fb::OperationT& op) {
    TILEC_RETURN_IF_ERROR(Arity(op, 1, 1));
    const ReferenceTensor* x;
    ReferenceTensor* m;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &m));
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    TILEC_RETURN_IF_ERROR(CheckMomentsValue(op, *m, rows, "result 0"));
    std::vector<float> out(static_cast<size_t>(rows) * kMomentFloats);
    TILEC_RETURN_IF_ERROR(Check(op, LnMoments(In(x->data), Out(out), rows, w)));
    Store(m, std::move(out));
    return Status::Ok();
  }

  Status RunNormalize(const fb::OperationT& op) {
    TILEC_RETURN_IF_ERROR(Arity(op, 4, 1));
    const ReferenceTensor *x, *m, *gamma, *beta;
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Input(op, 1, &m));
    TILEC_RETURN_IF_ERROR(Input(op, 2, &gamma));
    TILEC_RETURN_IF_ERROR(Input(op, 3, &beta));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    TILEC_RETURN_IF_ERROR(CheckMomentsValue(op, *m, rows, "operand 1"));
    const std::vector<int64_t> row = {w};
    if (gamma->shape != row || beta->shape != row) {
      return Bad(op, "gamma " + ShapeText(gamma->shape) + " and beta " +
                         ShapeText(beta->shape) + " must both be " +
                         ShapeText(row) + " (the last axis of operand 0 " +
                         ShapeText(x->shape) + ")");
    }
    if (y->shape != x->shape) {
      return Bad(op, "result 0 has shape " + ShapeText(y->shape) +
                         ", expected " + ShapeText(x->shape) +
                         " (the shape of operand 0)");
    }
    std::vector<float> out(x->data.size());
    TILEC_RETURN_IF_ERROR(
        Check(op, Normalize(In(x->data), In(m->data), In(gamma->data),
                            In(beta->data), Out(out), rows, w, op.eps)));
    Store(y, std::move(out));
    return Status::Ok();
  }

  // The operand a body step names, with the shape it must have.
  Status StepOperand(const fb::OperationT& op, size_t step_index,
                     const fb::FusedStepT& step,
                     const std::vector<int64_t>& expected,
                     const ReferenceTensor** tensor) const {
    const char* kind = fb::EnumNameFusedStepKind(step.kind);
    const std::string where =
        "body step " + std::to_string(step_index) + " (" + kind + ")";
    if (step.operand < 0 ||
        static_cast<size_t>(step.operand) >= op.operands.size()) {
      return Bad(op, where + " names operand " + std::to_string(step.operand) +
                         ", the op has " + std::to_string(op.operands.size()));
    }
    TILEC_RETURN_IF_ERROR(Input(op, static_cast<size_t>(step.operand), tensor));
    if ((*tensor)->shape != expected) {
      return Bad(op, where + ": operand " + std::to_string(step.operand) +
                         " has shape " + ShapeText((*tensor)->shape) +
                         ", expected " + ShapeText(expected));
    }
    return Status::Ok();
  }

  Status RunFused(const fb::OperationT& op) {
    if (op.operands.empty() || op.results.empty() || op.results.size() > 2) {
      return Bad(op, "expected at least 1 operand and 1 or 2 results, got " +
                         std::to_string(op.operands.size()) + " and " +
                         std::to_string(op.results.size()));
    }
    const ReferenceTensor* x;
    ReferenceTensor* y;
    TILEC_RETURN_IF_ERROR(Input(op, 0, &x));
    TILEC_RETURN_IF_ERROR(Output(op, 0, &y));
    if (y->shape != x->shape) {
      return Bad(op, "result 0 has shape " + ShapeText(y->shape) +
                         ", expected " + ShapeText(x->shape) +
                         " (the shape of operand 0)");
    }
    int64_t rows, w;
    RowsAndWidth(x->shape, &rows, &w);
    ReferenceTensor* moments_out = nullptr;
    if (op.results.size() == 2) {
      TILEC_RETURN_IF_ERROR(Output(op, 1, &moments_out));
      TILEC_RETURN_IF_ERROR(
          CheckMomentsValue(op, *moments_out, rows, "result 1"));
      const bool has_moments =
          std::any_of(op.body.begin(), op.body.end(), [](const auto& step) {
            return step != nullptr && step->kind == fb::FusedStepKind::Moments;
          });
      if (!has_moments) {
        return Bad(op, "has a second result but no Moments step to fill it");
      }
    }

    std::vector<float> v = x->data;
    std::vector<float> moments;
    bool moments_done = false;
    for (size_t i = 0; i < op.body.size(); ++i) {
      if (op.body[i] == nullptr) return Bad(op, "empty body step");
      const fb::FusedStepT& step = *op.body[i];
      const ReferenceTensor* operand = nullptr;
      switch (step.kind) {
        case fb::FusedStepKind::BiasAdd:
          TILEC_RETURN_IF_ERROR(StepOperand(op, i, step, {w}, &operand));
          TILEC_RETURN_IF_ERROR(
              Check(op, BiasAdd(In(v), In(operand->data), Out(v), rows, w)));
          break;
        case fb::FusedStepKind::Gelu: {
          GeluForm form = GeluForm::kTanh;
          TILEC_RETURN_IF_ERROR(GeluFormOf(op, step.gelu, &form));
          TILEC_RETURN_IF_ERROR(
              ByRows(op, rows, w, {&v}, [&](int64_t r0, int64_t n) {
                return GeluKernel(In(v.data() + r0 * w, n * w),
                                  Out(v.data() + r0 * w, n * w), n, w, form);
              }));
          break;
        }
        case fb::FusedStepKind::Cast:
          if (step.dtype < fb::DType::MIN || step.dtype > fb::DType::MAX) {
            return Bad(op, "body step " + std::to_string(i) +
                               " casts to unknown dtype " +
                               std::to_string(static_cast<int>(step.dtype)));
          }
          TILEC_RETURN_IF_ERROR(
              CastInPlace(op, step.dtype, step.fp8_scale_exp, &v));
          break;
        case fb::FusedStepKind::ResidualAdd:
          TILEC_RETURN_IF_ERROR(StepOperand(op, i, step, x->shape, &operand));
          TILEC_RETURN_IF_ERROR(
              Check(op, Add(In(v), In(operand->data), Out(v), rows, w)));
          break;
        case fb::FusedStepKind::Scale:
          TILEC_RETURN_IF_ERROR(
              Check(op, ScaleKernel(In(v), Out(v), rows, w, step.scale)));
          break;
        case fb::FusedStepKind::Unary:
          if (!IsUnaryFn(step.fn)) {
            return Bad(op, "body step " + std::to_string(i) +
                               " is Unary with a binary function");
          }
          TILEC_RETURN_IF_ERROR(
              Check(op, Unary(In(v), Out(v), rows, w, step.fn)));
          break;
        case fb::FusedStepKind::Binary: {
          if (IsUnaryFn(step.fn)) {
            return Bad(op, "body step " + std::to_string(i) +
                               " is Binary with a unary function");
          }
          const std::vector<int64_t> operand_shape =
              step.broadcast == fb::Broadcast::Row ? std::vector<int64_t>{w}
              : step.broadcast == fb::Broadcast::Column
                  ? std::vector<int64_t>{rows, 1}
                  : x->shape;
          TILEC_RETURN_IF_ERROR(
              StepOperand(op, i, step, operand_shape, &operand));
          TILEC_RETURN_IF_ERROR(
              Check(op, Binary(In(v), In(operand->data), Out(v), rows, w,
                               step.fn, step.operand_first, step.broadcast)));
          break;
        }
        case fb::FusedStepKind::Moments: {
          if (moments_out == nullptr) break;  // no result to fill: skipped
          if (moments_done) {
            return Bad(op, "has more than one Moments step");
          }
          // Statistics of what result 0 stores, as residual_moments
          // computes them from the stored sum.
          std::vector<float> stored = v;
          RoundToStored(y->dtype, y->fp8_scale_exp, stored);
          moments.resize(static_cast<size_t>(rows) * kMomentFloats);
          TILEC_RETURN_IF_ERROR(
              Check(op, LnMoments(In(stored), Out(moments), rows, w)));
          moments_done = true;
          break;
        }
        default:
          return Bad(op, "body step " + std::to_string(i) +
                             " has unknown kind " +
                             std::to_string(static_cast<int>(step.kind)));
      }
    }
    Store(y, std::move(v));
    if (moments_out != nullptr) Store(moments_out, std::move(moments));
    return Status::Ok();
  }

  const fb::ModuleT& module_;
  const ReferenceOptions& options_;
  ReferenceResult* result_;
  std::unordered_set<uint32_t> defined_;
  std::unordered_set<uint32_t> produced_;  // results of some op
  std::unordered_map<uint32_t, const fb::ValueT*> value_of_;
  std::unordered_map<uint32_t, size_t> last_use_;  // op index
  std::vector<ir::RepeatBody> bodies_;
  // The iteration running (Bind): its body, twins by body weight, the
  // carried value (iteration > 0) and the body's loop invariants.
  const ir::RepeatBody* body_ = nullptr;
  uint32_t iteration_ = 0;
  std::unordered_map<uint32_t, uint32_t> twins_;
  std::unique_ptr<ReferenceTensor> carried_;
  std::unordered_set<uint32_t> invariant_;
};

std::string Format(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", v);
  return text;
}

}  // namespace

// ---------------------------------------------------------------- result

std::string ReferenceTensor::StoredBytes() const {
  return EncodeStored(dtype, fp8_scale_exp, data);
}

const ReferenceTensor* ReferenceResult::Find(uint32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &values_[it->second];
}

const ReferenceTensor* ReferenceResult::FindByName(
    std::string_view name) const {
  for (const ReferenceTensor& t : values_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::vector<const ReferenceTensor*> ReferenceResult::Outputs() const {
  std::vector<const ReferenceTensor*> outputs;
  for (const ReferenceTensor& t : values_) {
    if (t.role == fb::ValueRole::Output) outputs.push_back(&t);
  }
  return outputs;
}

void ReferenceResult::Reset(std::vector<ReferenceTensor> values) {
  values_ = std::move(values);
  by_id_.clear();
  for (size_t i = 0; i < values_.size(); ++i) by_id_.emplace(values_[i].id, i);
}

ReferenceTensor* ReferenceResult::Mutable(uint32_t id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &values_[it->second];
}

Status MaterializeUnrounded(const fb::ValueT& value,
                            const std::string& sidecar_dir,
                            std::vector<float>* data) {
  // An F32 copy of the value's description: rounding to F32 changes nothing.
  fb::ValueT copy;
  copy.id = value.id;
  copy.name = value.name;
  copy.shape = value.shape;
  copy.dtype = fb::DType::F32;
  copy.role = value.role;
  if (value.init) copy.init = std::make_unique<fb::WeightInitT>(*value.init);
  if (value.sidecar) copy.sidecar = std::make_unique<fb::SidecarT>(*value.sidecar);
  return MaterializeValue(copy, sidecar_dir, data);
}

Status RunReference(const fb::ModuleT& module, const ReferenceOptions& options,
                    ReferenceResult* result) {
  return Executor(module, options, result).Run();
}

Status RunReference(const fb::ModuleT& module, ReferenceResult* result) {
  return RunReference(module, ReferenceOptions(), result);
}

// ---------------------------------------------------------------- reports

TensorStats ComputeStats(std::span<const float> data) {
  TensorStats stats;
  stats.count = data.size();
  double sum = 0, sum_sq = 0;
  bool first = true;
  for (float f : data) {
    if (!std::isfinite(f)) {
      ++stats.nonfinite;
      continue;
    }
    const double v = f;
    if (first) {
      stats.min = stats.max = v;
      first = false;
    }
    stats.min = std::min(stats.min, v);
    stats.max = std::max(stats.max, v);
    sum += v;
    sum_sq += v * v;
  }
  const size_t finite = stats.count - stats.nonfinite;
  if (finite > 0) stats.mean = sum / static_cast<double>(finite);
  stats.l2 = std::sqrt(sum_sq);
  return stats;
}

std::string SummaryLine(const ReferenceTensor& tensor) {
  const TensorStats s = ComputeStats(tensor.data);
  std::string line = tensor.name + " " + ShapeText(tensor.shape) + " " +
                     std::string(DTypeName(KernelDType(tensor.dtype)));
  if (ir::StorageScaleExp(tensor.dtype, tensor.fp8_scale_exp) != 0) {
    line += "(scale_exp=" + std::to_string(tensor.fp8_scale_exp) + ")";
  }
  line += " min=" + Format(s.min) + " max=" + Format(s.max) +
          " mean=" + Format(s.mean) + " l2=" + Format(s.l2) +
          " nonfinite=" + std::to_string(s.nonfinite);
  return line;
}

std::string SafeFileName(std::string_view name) {
  std::string safe(name);
  for (char& c : safe) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                      c == '-';
    if (!keep) c = '_';
  }
  if (!safe.empty() && safe[0] == '.') safe[0] = '_';
  return safe;
}

Status WriteTensorFiles(std::span<const ReferenceTensor* const> tensors,
                        const std::string& out_dir,
                        std::vector<std::string>* paths) {
  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    return Status::BadInput(out_dir +
                            ": cannot create directory: " + error.message());
  }
  std::set<std::string> used;
  for (const ReferenceTensor* t : tensors) {
    const bool raw = t->dtype != fb::DType::F32;
    const std::string raw_suffix =
        "." + std::string(DTypeName(KernelDType(t->dtype))) + ".npy";
    std::string base = t->name.empty() ? "value" + std::to_string(t->id)
                                       : SafeFileName(t->name);
    auto clashes = [&](const std::string& b) {
      return used.count(b + ".npy") > 0 ||
             (raw && used.count(b + raw_suffix) > 0);
    };
    if (clashes(base)) base += "_v" + std::to_string(t->id);
    // Only a contrived set of names can clash again; refuse it rather than
    // overwrite a file written moments ago.
    if (clashes(base)) {
      return Status::BadInput(out_dir + ": value names collide on " + base +
                              ".npy");
    }
    const std::string f32_path = out_dir + "/" + base + ".npy";
    const std::vector<int64_t>& shape =
        t->file_shape.empty() ? t->shape : t->file_shape;
    TILEC_RETURN_IF_ERROR(WriteNpyF32(f32_path, shape, t->data));
    used.insert(base + ".npy");
    if (paths != nullptr) paths->push_back(f32_path);
    if (raw) {
      const std::string raw_path = out_dir + "/" + base + raw_suffix;
      TILEC_RETURN_IF_ERROR(WriteNpyStored(raw_path, shape, t->dtype,
                                           t->fp8_scale_exp, t->data));
      used.insert(base + raw_suffix);
      if (paths != nullptr) paths->push_back(raw_path);
    }
  }
  return Status::Ok();
}

}  // namespace tilec::kernels
