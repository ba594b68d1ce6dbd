// The planner's view of a module: values and ops by index, each op's class
// (GEMM, elementwise, row-wise, copy) and what each operand slot requires of
// its value, and recipes in the text form that --recipe files use.
//
// docs/planning.md is the contract these types implement.

#ifndef TILEC_PASSES_PLAN_GRAPH_H_
#define TILEC_PASSES_PLAN_GRAPH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/basics.h"
#include "formats/op_shapes.h"
#include "formats/status.h"
#include "formats/tilec_generated.h"
#include "kernels/fused_body.h"
#include "passes/core/attention_plan.h"

namespace tilec::plan {

// What an operand slot needs of its value, given the op's recipe.
enum class SlotRole {
  kStaged,    // GEMM left operand: delivered by the GEMM itself (staging)
  kResident,  // GEMM right operand: blocked(k x n, rep=m, order=2,1,0)
  kLayout,    // must be in the op's layout (elementwise, row-wise input)
  kVector,    // [C] broadcast along rows: bias of a bias add
  kRowParam,  // [w] per-row parameter of a row-wise op: gamma, beta
  kColumn,    // [rows, 1] broadcast along each row: binary_col's column
  kSource,    // the source of a Redistribute or a CopyRows: taken as it is
  kProbs,     // attention probabilities: the rows each context tile reads
  kQuery,     // cross-attention queries: the rows each scores tile reads
  kHostImage, // an image input the host transforms as it writes it: never
              // on the device
};

// kHost: done by the host as it writes a graph input (Patchify): no device
// work; its result is owned as its first consumer needs, like an input.
enum class OpClass { kGemm, kElementwise, kRowWise, kCopy, kAttention, kHost };

// One kernel call of an elementwise op's body, as the lowering makes it
// (kernels/fused_body.h: the one definition both use), and the dtype it
// writes.
struct ElementwiseStep {
  kernels::BodyKernel call;
  fb::DType out_dtype = fb::DType::F16;
};

struct ValueNode {
  uint32_t id = 0;
  std::string name;
  std::vector<int64_t> shape;
  fb::DType dtype = fb::DType::F16;
  fb::ValueRole role = fb::ValueRole::Activation;
  int producer = -1;  // op index, -1 for inputs and weights
  // (op index, operand slot) in program order.
  std::vector<std::pair<int, int>> uses;
  // The ownership the input module gave it, if any (kept for Redistribute
  // ops that arrive already planned).
  std::optional<fb::OwnershipT> given;
};

struct OpNode {
  uint32_t id = 0;
  fb::OpKind kind = fb::OpKind::LayerNorm;
  std::string name;
  OpClass op_class = OpClass::kElementwise;
  std::vector<int> operands;  // value indices
  int result = -1;            // value index
  std::vector<SlotRole> slots;
  std::vector<ElementwiseStep> steps;  // elementwise only
  // Attention: heads and head size; `staged` is the qkv operand's slot;
  // the first image of qkv it reads (image steps).
  int heads = 0, head_dim = 0;
  int64_t first_image = -1;
  int staged = 0;
  // CopyRows: its segments (Operation.rows).
  std::vector<ir::RowSegment> rows;
};

// A repeat of the module (Module.repeats, docs/repeat.md) in graph indices:
// its body is ops [begin, end), run `count` times.
struct RepeatNode {
  int begin = 0, end = 0;
  int count = 1;
  int carried_in = -1, carried_out = -1;  // value indices
  std::vector<int> weights;               // body weights, value indices
};

class Graph {
 public:
  // Builds the view (the module's repeats must satisfy ir::VerifyRepeats,
  // which every reader checks). Ops the planner has no recipe for (attention, moments,
  // normalize) or shapes outside the conventions give an Infeasible status
  // naming the op (exit 3): the input is valid IR, it just cannot be planned.
  static StatusOr<Graph> Build(const fb::ModuleT& module);

  const std::vector<ValueNode>& values() const { return values_; }
  const std::vector<OpNode>& ops() const { return ops_; }
  const ValueNode& value(int index) const { return values_[index]; }
  const OpNode& op(int index) const { return ops_[index]; }
  int num_ops() const { return static_cast<int>(ops_.size()); }
  int num_values() const { return static_cast<int>(values_.size()); }

  // Index of the op / value with that id, or -1.
  int OpIndex(uint32_t id) const;
  int ValueIndex(uint32_t id) const;

  // "op 1 (l0.mlp.up)".
  std::string OpLabel(int op) const;

  // Repeats: the body is planned once and runs `count` times.
  const std::vector<RepeatNode>& repeats() const { return repeats_; }
  // The repeat whose body holds op `op`, or -1.
  int RepeatOf(int op) const { return op_repeat_[op]; }
  // How often op `op` runs in the program: its repeat's count, else 1.
  int Runs(int op) const {
    return op_repeat_[op] < 0 ? 1 : repeats_[op_repeat_[op]].count;
  }
  // The body weight a twin (a weight of an iteration > 0) stands for, or -1.
  int TwinOf(int value) const { return twin_of_[value]; }
  // What `value` is held as: the body weight a twin stands for, else itself.
  int HeldAs(int value) const {
    return twin_of_[value] < 0 ? value : twin_of_[value];
  }
  // The weights held in memory for `value`: its repeat's count for a body
  // weight (itself and its twins), else 1.
  int Copies(int value) const { return copies_[value]; }

  // A stable fingerprint of the graph and the target (FNV-1a of their text),
  // to check that a checkpoint belongs to its input.
  uint64_t Fingerprint() const { return fingerprint_; }
  // The first difference between this graph and `other`, or "".
  std::string Difference(const Graph& other) const;

 private:
  // The module's repeats in indices, after the ops and values.
  Status AddRepeats(const fb::ModuleT& module,
                    const std::map<uint32_t, int>& value_index);

  std::vector<ValueNode> values_;
  std::vector<OpNode> ops_;
  std::vector<RepeatNode> repeats_;
  std::vector<int> op_repeat_;  // by op: its repeat, -1 outside bodies
  std::vector<int> twin_of_;    // by value: the body weight, -1 if no twin
  std::vector<int> copies_;     // by value
  uint64_t fingerprint_ = 0;
  std::vector<std::string> lines_;  // one per value and op, for Difference
};

// ---------------------------------------------------------------- recipes

// How an op runs (docs/planning.md, "Recipes"). GEMM fields are used only
// by kind Gemm (m and n also by Attention: the per-head grid),
// `layout` only by the others.
struct Recipe {
  fb::RecipeKind kind = fb::RecipeKind::Elementwise;
  int m = 1, k = 1, n = 1;
  int first_tile = 0;
  fb::Staging staging = fb::Staging::Complete;
  int chunk_k = 0;       // Streamed / Batched
  int batch_chunks = 1;  // Batched
  int steps = 1;         // serial row steps (Gemm)
  bool interleaved_steps = false;  // each step every reducer's j-th part
  fb::OwnershipT layout;

  // The recipe-file text, e.g. "gemm m=9 k=6 n=27 staging=batched(2)
  // chunk_k=32" (" steps=2" for serial row steps, " steps=interleaved(2)"
  // for interleaved ones), "attention m=92 n=1", "elementwise
  // blocked(729x2)" or "host".
  // Also the recipe's identity.
  std::string Text() const;
};

bool operator==(const Recipe& a, const Recipe& b);

// Parses Text()'s form. Errors are one line saying what is wrong.
StatusOr<Recipe> ParseRecipe(std::string_view text);

// The grid of an attention recipe on op `op` (an error if it does not fit
// the op's shapes).
StatusOr<passes::AttentionGrid> AttentionGridOf(const Graph& graph, int op,
                                                const Recipe& recipe);

// The IR form (block sizes from the op's shapes) and back.
fb::RecipeT RecipeToFb(const Recipe& recipe, const Graph& graph, int op);
StatusOr<Recipe> RecipeFromFb(const fb::RecipeT& recipe);

using ir::DTypeBytes;
using ir::Fnv1a64;

}  // namespace tilec::plan

#endif  // TILEC_PASSES_PLAN_GRAPH_H_
