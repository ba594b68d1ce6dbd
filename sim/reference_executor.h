// The reference executor's Executor (sim/reference.h's RunReference): the
// op loop, repeats, sources and helpers in sim/reference_executor.cc, the
// ops in sim/reference_ops.cc and fused bodies in sim/reference_fused.cc.
// Private to the reference library.

#ifndef TILEC_SIM_REFERENCE_EXECUTOR_H_
#define TILEC_SIM_REFERENCE_EXECUTOR_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "formats/basics.h"
#include "formats/op_shapes.h"
#include "formats/repeat.h"
#include "kernels/kernels.h"
#include "sim/reference.h"

namespace tilec::kernels::executor {

// GEMMs below this many multiply-accumulates are not worth a thread.
constexpr int64_t kMinParallelMacs = int64_t{1} << 22;
// Nor row-wise kernels (LayerNorm, Softmax, GELU, adds) below this many
// elements.
constexpr int64_t kMinParallelElements = int64_t{1} << 16;
// Row-wise kernels run on blocks of about this many elements (at least one
// row): 256 KB of F32, which stays in a core's cache.
constexpr int64_t kRowBlockElements = int64_t{1} << 16;

// Kernel operands over F32 arrays. Kernels never write their input
// operands, so the const_cast in In() is never acted upon.
inline Operand In(const float* data, size_t elements) {
  return Operand{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(data)),
                 elements * sizeof(float), DType::kF32, 0};
}
inline Operand In(const std::vector<float>& data) {
  return In(data.data(), data.size());
}
inline Operand Out(float* data, size_t elements) {
  return Operand{reinterpret_cast<uint8_t*>(data), elements * sizeof(float),
                 DType::kF32, 0};
}
inline Operand Out(std::vector<float>& data) {
  return Out(data.data(), data.size());
}

// rows = product of all but the last dimension, w = the last (a scalar is
// one row of one element).
inline void RowsAndWidth(const std::vector<int64_t>& shape, int64_t* rows,
                         int64_t* w) {
  *w = shape.empty() ? 1 : shape.back();
  *rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) *rows *= shape[i];
}

// Runs body(begin, end) over [0, n) split into `threads` contiguous parts,
// the first on the calling thread. Returns the first failure in part order
// so that the error does not depend on scheduling.
inline Status ParallelFor(int64_t n, int threads,
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

inline std::string ShapeText(const std::vector<int64_t>& shape) {
  return ir::ShapeToString(shape);
}

// Runs the ops of one module in order over one ReferenceResult.
class Executor {
 public:
  Executor(const fb::ModuleT& module, const ReferenceOptions& options,
           ReferenceResult* result)
      : module_(module), options_(options), result_(result) {}

  Status Run();

 private:
  // ------------------------------------------------------------ the op loop

  // The result's values, the checks of the graph, and the sources made up
  // front where the result keeps them.
  Status Prepare();

  // Ops [begin, end) in order, in the current iteration's binding.
  Status RunOps(size_t begin, size_t end);

  // ------------------------------------------------------------ repeats

  // Iteration `it` of `body` (docs/repeat.md): body weights read their
  // twins; after the first, carried_in reads what the previous iteration
  // left in carried_out (moved aside, since this iteration makes
  // carried_out anew), and every result of the body is made again.
  void Bind(const ir::RepeatBody& body, uint32_t it);

  void Unbind();

  // Values the body reads that it does not make, other than carried_in and
  // the body weights: every iteration reads the same data, so they live
  // until the last iteration's last read.
  std::unordered_set<uint32_t> LoopInvariants(
      const ir::RepeatBody& body) const;

  // The tensor operand `id` reads in the current iteration: a twin, the
  // carried value, or the value itself; nullptr if it does not exist.
  ReferenceTensor* Bound(uint32_t id) const;

  // A loop-invariant value is read again by the next iteration.
  bool ReadAgain(uint32_t id) const;

  // ------------------------------------------------------------ sources

  // Values that no op produces.
  bool IsSource(uint32_t id) const { return produced_.count(id) == 0; }

  std::vector<const fb::ValueT*> AllSources() const;

  // Sources are made up front where the result keeps them all anyway;
  // otherwise each just before its first read (twins: their iteration's).
  bool SourcesUpFront() const;

  // The sources `op` reads (as bound) that nothing has made yet (each value
  // once).
  std::vector<const fb::ValueT*> SourcesFirstUsedBy(const fb::OperationT& op);

  // The index of the last op that reads each value.
  void FindLastUses();

  bool Kept(const ReferenceTensor& t) const;

  // Operands (as bound) whose last reader is op `index` in this iteration
  // and that the result does not keep: their memory goes back before the
  // next op runs.
  void FreeDeadOperands(const fb::OperationT& op, size_t index);

  Status CheckProvided();

  // Sources get their contents (init, sidecar or provided) before an op
  // reads them. Generation is independent per value, so values are spread
  // over the threads; each value's contents do not depend on the split.
  Status MaterializeSources(const std::vector<const fb::ValueT*>& sources);
  // Seats each large source not provided by the caller on the memory of a
  // freed value (NewBuffer), which generating or reading it writes over:
  // before MaterializeSources' threads, whose NewBuffer it is not to call.
  void GiveSpareBuffers(const std::vector<const fb::ValueT*>& sources);

  // ------------------------------------------------------------ helpers

  static std::string Describe(const fb::OperationT& op);

  Status Bad(const fb::OperationT& op, const std::string& what) const;

  // A kernel failure on shapes that were checked first is a bug.
  Status Check(const fb::OperationT& op, const Status& status) const;

  Status Arity(const fb::OperationT& op, size_t operands,
               size_t results) const;

  // Operand i as the current iteration binds it, which must have been
  // computed already.
  Status Input(const fb::OperationT& op, size_t i,
               const ReferenceTensor** tensor) const;

  // Result i, which must not have been computed yet.
  Status Output(const fb::OperationT& op, size_t i, ReferenceTensor** tensor);

  // Stores an op's F32 result in the value's dtype: where the device rounds.
  void Store(ReferenceTensor* t, std::vector<float> data);
  // Takes `data`, already in the value's dtype, as its contents.
  void Keep(ReferenceTensor* t, std::vector<float> data);

  // A buffer of n elements for an op's result, its contents unspecified
  // (the op writes every element): the memory of a value freed
  // earlier in the run (Recycle) that holds n to 2n elements, else new. A
  // layer's values recur every iteration, and memory in use is mapped
  // already, where the fresh pages of a batch 8 value (up to hundreds of
  // MB) cost a page fault each, every time.
  std::vector<float> NewBuffer(size_t n);
  // Keeps the memory of a freed value for NewBuffer (the kSpareBuffers
  // last ones, of kMinSpareElements or more), as far as TrimSpares allows.
  void Recycle(std::vector<float> data);
  // Drops the oldest spares until the values held, `coming` more elements
  // and the spares take no more memory than the most the values have held
  // so far (most_held_, raised to held + coming): spares fill the room the
  // run's own peak leaves, and never raise it.
  void TrimSpares(size_t coming);
  // Elements the values' memory holds now.
  size_t HeldElements() const;
  static constexpr size_t kSpareBuffers = 4;
  static constexpr size_t kMinSpareElements = size_t{1} << 16;

  Status Elements(const fb::OperationT& op, const std::vector<int64_t>& shape,
                  size_t* count) const;

  // Rounds `data` to `dtype` through the cast kernel (encode into the
  // dtype's bytes, decode back), as a device cast does.
  // Element by element, so in chunks through a small staging buffer,
  // spread over the threads.
  Status CastInPlace(const fb::OperationT& op, fb::DType dtype,
                     int fp8_scale_exp, std::vector<float>* data);

  // ------------------------------------------------------------ ops

  Status RunOp(const fb::OperationT& op);

  // Runs body(first_row, row_count) over blocks of rows on the threads, for
  // kernels whose every output row depends only on the same input row: the
  // split changes nothing but the time. `split` are the arrays the body
  // indexes by row, which must hold rows x w elements (the kernels check
  // the sizes of the slices they are given, not of the whole arrays).
  Status ByRows(const fb::OperationT& op, int64_t rows, int64_t w,
                std::initializer_list<const std::vector<float>*> split,
                const std::function<Status(int64_t, int64_t)>& body) const;
  // ByRows for a body that writes its rows of `out` (one of `split`), then
  // Store(y, out) but for where it rounds: each block in y's dtype on its
  // thread as soon as it is made, in cache, not the whole tensor after.
  // The same numbers (rounding is per element).
  Status ByRowsStored(const fb::OperationT& op, int64_t rows, int64_t w,
                      std::initializer_list<const std::vector<float>*> split,
                      std::vector<float>* out, ReferenceTensor* y,
                      const std::function<Status(int64_t, int64_t)>& body);

  Status RunLayerNorm(const fb::OperationT& op);

  // Whether a GEMM of these operand dtypes sums in the tile kernels' k
  // order (kernels.h Gemm) rather than OpenBLAS's (kernels/blas.h). FP8:
  // the simulator's FP8 tile kernels are compared with these sums bit for
  // bit where the planner leaves K whole (docs/quantize.md), and one F32
  // difference can move a result a whole FP8 step; unless the options say
  // no simulator result is compared with this run.
  bool KOrder(fb::DType x, fb::DType y) const {
    return options_.fp8_in_k_order && (ir::IsFp8(x) || ir::IsFp8(y));
  }

  Status RunMatMul(const fb::OperationT& op);

  Status RunAdd(const fb::OperationT& op);

  Status GeluFormOf(const fb::OperationT& op, fb::GeluForm form,
                    GeluForm* out) const;

  Status RunGelu(const fb::OperationT& op);

  // Cast and Redistribute: the operand's values in the result's dtype.
  Status RunCast(const fb::OperationT& op);

  // Row copies: the shape rule has checked every segment's bounds and the
  // verifier that operands and result share dtype and scale, so stored
  // values are moved exactly (Store rounds nothing that is not already so).
  Status RunCopyRows(const fb::OperationT& op);

  Status RunSoftmax(const fb::OperationT& op);

  // Copies columns [column, column + d) of rows [row, row + t) of a
  // row-major matrix with `stride` columns into a dense [t, d] block, or its
  // transpose [d, t].
  static void Gather(const float* src, int64_t stride, int64_t row,
                     int64_t column, int64_t t, int64_t d, bool transpose,
                     float* dst);

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
                               const ReferenceTensor* kv, int64_t hd);

  Status RunAttentionScores(const fb::OperationT& op);

  Status RunAttentionContext(const fb::OperationT& op);

  // sim/patchify.h: the gather the simulator's host also applies.
  Status RunPatchify(const fb::OperationT& op);

  // Moments results are F32 [rows, 3] ({count, mean, M2} per row).
  Status CheckMomentsValue(const fb::OperationT& op, const ReferenceTensor& m,
                           int64_t rows, const char* role) const;

  Status RunMoments(const fb::OperationT& op);

  Status RunNormalize(const fb::OperationT& op);

  // The operand a body step names, with the shape it must have.
  Status StepOperand(const fb::OperationT& op, size_t step_index,
                     const fb::FusedStepT& step,
                     const std::vector<int64_t>& expected,
                     const ReferenceTensor** tensor) const;

  Status RunFused(const fb::OperationT& op);
  // A Fused op's operand 0, its result 0 (of the same shape) and its
  // optional moments result, checked, with operand 0's rows and width.
  struct FusedValues {
    const ReferenceTensor* x = nullptr;
    ReferenceTensor* y = nullptr;
    ReferenceTensor* moments_out = nullptr;  // result 1; null without
    int64_t rows = 0, w = 0;
  };
  Status FusedValuesOf(const fb::OperationT& op, FusedValues* f);
  // What the body carries from step to step: the running value and, once
  // its Moments step ran, the statistics of result 0.
  struct FusedState {
    std::vector<float> v;
    std::vector<float> moments;
    bool moments_done = false;
  };
  Status RunFusedStep(const fb::OperationT& op, size_t i,
                      const FusedValues& f, FusedState* state);

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
  std::vector<std::vector<float>> spare_;  // oldest first
  size_t most_held_ = 0;                   // see TrimSpares
};

}  // namespace tilec::kernels::executor

#endif  // TILEC_SIM_REFERENCE_EXECUTOR_H_
