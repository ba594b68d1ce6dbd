#include "passes/plan/graph.h"

#include <charconv>
#include <functional>
#include <map>
#include <optional>
#include <string_view>

#include "formats/basics.h"
#include "formats/print.h"
#include "formats/repeat.h"
#include "passes/core/attention_plan.h"
#include "passes/core/ownership.h"

namespace tilec::plan {
namespace {

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(v[i]);
  }
  return s;
}

Status Unsupported(const fb::OperationT& op, const std::string& why) {
  return Status::Infeasible("op " + std::to_string(op.id) + " (" + op.name +
                            "): " + why);
}

// The kernel calls of an elementwise op's body (kernels/fused_body.h, the
// definition the lowering compiles the same body with), each with the
// dtype it writes.
Status BodyCalls(const fb::OperationT& op, const fb::ValueT& result,
                 std::vector<ElementwiseStep>* steps) {
  const std::string where = "op " + std::to_string(op.id) + " (" + op.name + ")";
  StatusOr<std::vector<fb::FusedStepT>> body = kernels::BodySteps(op, result);
  if (!body.ok()) return Status::Infeasible(body.status().message());
  StatusOr<std::vector<kernels::BodyKernel>> calls = kernels::CompileBody(
      *body, op.operands.size(), op.results.size(), where);
  if (!calls.ok()) return Status::Infeasible(calls.status().message());
  for (size_t i = 0; i < calls->size(); ++i) {
    steps->push_back(
        {(*calls)[i], kernels::BodyKernelOutput(*calls, i, result.dtype)});
  }
  return Status::Ok();
}

// The values, in module order, and their index by id.
void AddValues(const fb::ModuleT& module, std::vector<ValueNode>* values,
               std::vector<std::string>* lines,
               std::map<uint32_t, int>* value_index) {
  for (const auto& v : module.values) {
    ValueNode node;
    node.id = v->id;
    node.name = v->name;
    node.shape = v->shape;
    node.dtype = v->dtype;
    node.role = v->role;
    if (v->ownership) node.given = *v->ownership;
    (*value_index)[v->id] = static_cast<int>(values->size());
    values->push_back(std::move(node));
    lines->push_back("value %" + std::to_string(v->id) + " " + v->name + " " +
                     ir::DTypeText(v->dtype) + "[" + Join(v->shape) +
                     "] role " + std::to_string(static_cast<int>(v->role)));
  }
}

// Attention ops: the slots of scores or context, and a grid their shapes
// and heads admit.
Status ClassifyAttention(const fb::OperationT& op,
                         const std::vector<ValueNode>& values,
                         OpNode* node_ptr) {
  OpNode& node = *node_ptr;
  const ValueNode& result = values[node.result];
  const size_t arity = node.operands.size();
  const bool scores = op.kind == fb::OpKind::AttentionScores;
  // Cross-attention scores read q [B*Tq, HD] and stage kv (operand 1).
  const bool cross_scores = scores && arity == 2;
  node.op_class = OpClass::kAttention;
  node.heads = op.heads;
  node.head_dim = op.head_dim;
  node.first_image = op.first_image;
  node.staged = scores && !cross_scores ? 0 : 1;
  node.slots = !scores       ? std::vector<SlotRole>{SlotRole::kProbs,
                                                     SlotRole::kStaged}
               : cross_scores ? std::vector<SlotRole>{SlotRole::kQuery,
                                                      SlotRole::kStaged}
                              : std::vector<SlotRole>{SlotRole::kStaged};
  const auto& qkv = values[node.operands[node.staged]].shape;
  const auto& probs = scores ? result.shape : values[node.operands[0]].shape;
  StatusOr<passes::AttentionGrid> grid = passes::MakeAttentionGrid(
      scores ? passes::AttentionPart::kScores : passes::AttentionPart::kContext,
      qkv, probs, op.heads, op.head_dim, 1, 1, 0, op.first_image);
  if (!grid.ok()) return Unsupported(op, grid.status().message());
  if (!scores && result.shape != std::vector<int64_t>{
                                     grid->B * grid->Tq,
                                     int64_t{op.heads} * op.head_dim}) {
    return Unsupported(op, "the context must be [B*Tq, H*D]");
  }
  return Status::Ok();
}

// The op's class and the role of each operand slot, or why the planner
// has no recipe for it.
Status ClassifyOp(const fb::ModuleT& module, const fb::OperationT& op,
                  const std::vector<ValueNode>& values, OpNode* node_ptr) {
  OpNode& node = *node_ptr;
  const ValueNode& result = values[node.result];
  const size_t arity = node.operands.size();
  auto need_rank2 = [&]() -> Status {
    if (result.shape.size() != 2) {
      return Unsupported(op,
                         "elementwise and GEMM recipes need [rows, "
                         "width] values, the result is rank " +
                             std::to_string(result.shape.size()));
    }
    return Status::Ok();
  };
  switch (op.kind) {
    case fb::OpKind::MatMul:
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kGemm;
      node.slots = {SlotRole::kStaged, SlotRole::kResident};
      break;
    case fb::OpKind::BiasAdd:
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kElementwise;
      node.slots = {SlotRole::kLayout, SlotRole::kVector};
      break;
    case fb::OpKind::Gelu:
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kElementwise;
      node.slots = {SlotRole::kLayout};
      break;
    case fb::OpKind::Add:
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kElementwise;
      node.slots = {SlotRole::kLayout, SlotRole::kLayout};
      break;
    case fb::OpKind::Cast:
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kElementwise;
      node.slots = {SlotRole::kLayout};
      break;
    case fb::OpKind::Fused: {
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kElementwise;
      node.slots.assign(arity, SlotRole::kLayout);
      for (const auto& step : op.body) {
        if (step->operand > 0 && kernels::ReadsRow(*step)) {
          node.slots[step->operand] = SlotRole::kVector;
        }
        if (step->operand > 0 && kernels::ReadsColumn(*step)) {
          node.slots[step->operand] = SlotRole::kColumn;
        }
      }
      break;
    }
    case fb::OpKind::LayerNorm:
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kRowWise;
      node.slots = {SlotRole::kLayout, SlotRole::kRowParam,
                    SlotRole::kRowParam};
      break;
    case fb::OpKind::Softmax:
      node.op_class = OpClass::kRowWise;
      node.slots = {SlotRole::kLayout};
      break;
    case fb::OpKind::Redistribute:
      node.op_class = OpClass::kCopy;
      node.slots = {SlotRole::kSource};
      break;
    case fb::OpKind::CopyRows:
      // Data movement like a Redistribute: every operand is read where it
      // is, the result owned as the recipe says (passes/core/row_plan.h).
      TILEC_RETURN_IF_ERROR(need_rank2());
      node.op_class = OpClass::kCopy;
      node.slots.assign(arity, SlotRole::kSource);
      node.rows = ir::RowSegments(op);
      break;
    case fb::OpKind::Patchify:
      // The host writes the patches of an image input (docs/import-
      // onnx.md); a computed image would need a device-side gather.
      if (arity == 1 &&
          module.values[node.operands[0]]->role != fb::ValueRole::Input) {
        return Unsupported(op,
                           "patchify runs on the host as it writes a graph "
                           "input; operand %" +
                               std::to_string(op.operands[0]) +
                               " is computed on the device");
      }
      node.op_class = OpClass::kHost;
      node.slots = {SlotRole::kHostImage};
      break;
    case fb::OpKind::AttentionScores:
    case fb::OpKind::AttentionContext:
      TILEC_RETURN_IF_ERROR(ClassifyAttention(op, values, &node));
      break;
    default:
      return Unsupported(
          op, ir::OpKindText(op.kind) + " has no recipe in plan-ownership yet");
  }
  return Status::Ok();
}

// The op's line for the fingerprint and Difference.
std::string OpLine(const fb::OperationT& op) {
  std::string line = "op " + std::to_string(op.id) + " " +
                     ir::OpKindText(op.kind) + " " + op.name + " (";
  for (uint32_t id : op.operands) line += " %" + std::to_string(id);
  line += " ) -> %" + std::to_string(op.results[0]);
  for (const auto& step : op.body) {
    line += " " + std::to_string(static_cast<int>(step->kind)) + ":" +
            std::to_string(step->operand);
  }
  for (const auto& r : op.rows) {
    line += " rows " + std::to_string(r->operand) + ":" +
            std::to_string(r->first) + "+" + std::to_string(r->count) + "@" +
            std::to_string(r->at);
  }
  if (op.first_image >= 0) {
    line += " first_image=" + std::to_string(op.first_image);
  }
  return line;
}

// A host op's result is owned as its consumers need (plan.cc).
Status CheckHostResultsRead(const std::vector<OpNode>& ops,
                            const std::vector<ValueNode>& values) {
  for (const OpNode& node : ops) {
    if (node.op_class == OpClass::kHost && values[node.result].uses.empty()) {
      return Status::Infeasible(
          "op " + std::to_string(node.id) + " (" + node.name +
          "): the host writes its result for the device ops that read it; "
          "nothing reads it");
    }
  }
  return Status::Ok();
}

// A repeat's line for the fingerprint and Difference.
std::string RepeatLine(const fb::RepeatT& r) {
  std::string line = "repeat x" + std::to_string(r.count) + " %" +
                     std::to_string(r.carried_in) + " -> %" +
                     std::to_string(r.carried_out) + " weights";
  for (uint32_t id : r.weights) line += " %" + std::to_string(id);
  line += " twins";
  for (uint32_t id : r.iteration_weights) line += " %" + std::to_string(id);
  return line;
}

std::string TargetLine(const fb::TargetT& t) {
  return "target " + t.name + " tiles " + std::to_string(t.tiles) + " sram " +
         std::to_string(t.sram_bytes) + " runtime " +
         std::to_string(t.runtime_code_bytes);
}

}  // namespace

StatusOr<Graph> Graph::Build(const fb::ModuleT& module) {
  Graph g;
  std::map<uint32_t, int> value_index;
  AddValues(module, &g.values_, &g.lines_, &value_index);
  for (const auto& op_ptr : module.ops) {
    const fb::OperationT& op = *op_ptr;
    OpNode node;
    node.id = op.id;
    node.kind = op.kind;
    node.name = op.name;
    for (uint32_t id : op.operands) node.operands.push_back(value_index.at(id));
    if (op.results.size() != 1) {
      return Unsupported(op,
                         "the planner handles ops with one result, this "
                         "one has " +
                             std::to_string(op.results.size()));
    }
    node.result = value_index.at(op.results[0]);
    TILEC_RETURN_IF_ERROR(ClassifyOp(module, op, g.values_, &node));
    const size_t arity = node.operands.size();
    if (node.op_class == OpClass::kElementwise && node.slots.size() == arity) {
      TILEC_RETURN_IF_ERROR(
          BodyCalls(op, *module.values[node.result], &node.steps));
    }
    if (node.slots.size() != arity) {
      return Unsupported(op, "expected " + std::to_string(node.slots.size()) +
                                 " operands, got " + std::to_string(arity));
    }
    const int index = static_cast<int>(g.ops_.size());
    for (size_t s = 0; s < arity; ++s) {
      g.values_[node.operands[s]].uses.push_back({index, static_cast<int>(s)});
    }
    g.values_[node.result].producer = index;
    g.lines_.push_back(OpLine(op));
    g.ops_.push_back(std::move(node));
  }
  TILEC_RETURN_IF_ERROR(CheckHostResultsRead(g.ops_, g.values_));
  TILEC_RETURN_IF_ERROR(g.AddRepeats(module, value_index));
  if (module.target) g.lines_.push_back(TargetLine(*module.target));
  uint64_t hash = Fnv1a64("tilec plan graph");
  for (const std::string& line : g.lines_) hash = Fnv1a64(line + "\n", hash);
  g.fingerprint_ = hash;
  return g;
}

Status Graph::AddRepeats(const fb::ModuleT& module,
                         const std::map<uint32_t, int>& value_index) {
  op_repeat_.assign(ops_.size(), -1);
  twin_of_.assign(values_.size(), -1);
  copies_.assign(values_.size(), 1);
  StatusOr<std::vector<ir::RepeatBody>> bodies = ir::RepeatBodies(module);
  if (!bodies.ok()) return bodies.status();
  for (const ir::RepeatBody& body : *bodies) {
    const fb::RepeatT& r = *body.repeat;
    RepeatNode node;
    node.begin = static_cast<int>(body.begin);
    node.end = static_cast<int>(body.end);
    node.count = static_cast<int>(r.count);
    node.carried_in = value_index.at(r.carried_in);
    node.carried_out = value_index.at(r.carried_out);
    for (uint32_t id : r.weights) {
      node.weights.push_back(value_index.at(id));
      copies_[node.weights.back()] = node.count;
    }
    for (size_t k = 0; k < r.iteration_weights.size(); ++k) {
      twin_of_[value_index.at(r.iteration_weights[k])] =
          node.weights[k % node.weights.size()];
    }
    for (int op = node.begin; op < node.end; ++op) {
      op_repeat_[op] = static_cast<int>(repeats_.size());
    }
    repeats_.push_back(std::move(node));
    lines_.push_back(RepeatLine(r));
  }
  return Status::Ok();
}

int Graph::OpIndex(uint32_t id) const {
  for (size_t i = 0; i < ops_.size(); ++i) {
    if (ops_[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

int Graph::ValueIndex(uint32_t id) const {
  for (size_t i = 0; i < values_.size(); ++i) {
    if (values_[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

std::string Graph::OpLabel(int op) const {
  return "op " + std::to_string(ops_[op].id) + " (" + ops_[op].name + ")";
}

std::string Graph::Difference(const Graph& other) const {
  const size_t n = std::min(lines_.size(), other.lines_.size());
  for (size_t i = 0; i < n; ++i) {
    if (lines_[i] != other.lines_[i]) {
      return "'" + lines_[i] + "' vs '" + other.lines_[i] + "'";
    }
  }
  if (lines_.size() != other.lines_.size()) {
    return std::to_string(values_.size()) + " values and " +
           std::to_string(ops_.size()) + " ops vs " +
           std::to_string(other.values_.size()) + " values and " +
           std::to_string(other.ops_.size()) + " ops";
  }
  return "";
}

// ---------------------------------------------------------------- recipes

std::string Recipe::Text() const {
  switch (kind) {
    case fb::RecipeKind::Gemm: {
      std::string s = "gemm m=" + std::to_string(m) +
                      " k=" + std::to_string(k) + " n=" + std::to_string(n);
      switch (staging) {
        case fb::Staging::Complete:
          s += " staging=complete";
          break;
        case fb::Staging::Streamed:
          s += " staging=streamed chunk_k=" + std::to_string(chunk_k);
          break;
        case fb::Staging::Batched:
          s += " staging=batched(" + std::to_string(batch_chunks) +
               ") chunk_k=" + std::to_string(chunk_k);
          break;
      }
      if (steps > 1) {
        s += interleaved_steps
                 ? " steps=interleaved(" + std::to_string(steps) + ")"
                 : " steps=" + std::to_string(steps);
      }
      if (first_tile != 0) s += " first=" + std::to_string(first_tile);
      return s;
    }
    case fb::RecipeKind::Attention: {
      std::string s =
          "attention m=" + std::to_string(m) + " n=" + std::to_string(n);
      if (first_tile != 0) s += " first=" + std::to_string(first_tile);
      return s;
    }
    case fb::RecipeKind::RowWise:
      return "rowwise " + passes::FormatOwnership(layout);
    case fb::RecipeKind::Copy:
      return "copy " + passes::FormatOwnership(layout);
    case fb::RecipeKind::Host:
      return "host";
    default:
      return "elementwise " + passes::FormatOwnership(layout);
  }
}

bool operator==(const Recipe& a, const Recipe& b) {
  return a.Text() == b.Text();
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// Calls fn(key, value) for each space-separated key=value token.
Status ForEachOption(
    std::string_view tokens,
    const std::function<Status(std::string_view, std::string_view)>& fn) {
  while (!tokens.empty()) {
    const size_t end = tokens.find_first_of(" \t");
    const std::string_view token = tokens.substr(0, end);
    tokens = end == std::string_view::npos ? "" : Trim(tokens.substr(end));
    const size_t eq = token.find('=');
    if (eq == std::string_view::npos) {
      return Status::BadInput("expected key=value, got '" +
                              std::string(token) + "'");
    }
    TILEC_RETURN_IF_ERROR(fn(token.substr(0, eq), token.substr(eq + 1)));
  }
  return Status::Ok();
}

Status ParseCount(std::string_view key, std::string_view value, int minimum,
                  int* out) {
  int v = 0;
  const auto [ptr, ec] =
      std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v < minimum) {
    return Status::BadInput(std::string(key) + "=" + std::string(value) +
                            ": expected an integer >= " +
                            std::to_string(minimum));
  }
  *out = v;
  return Status::Ok();
}

// "NAME(INNER)" -> INNER, for option values such as batched(2).
std::optional<std::string_view> Wrapped(std::string_view value,
                                        std::string_view name) {
  if (value.size() < name.size() + 2 || value.substr(0, name.size()) != name ||
      value[name.size()] != '(' || value.back() != ')') {
    return std::nullopt;
  }
  return value.substr(name.size() + 1, value.size() - name.size() - 2);
}

StatusOr<Recipe> ParseGemmRecipe(std::string_view rest) {
  Recipe r;
  r.kind = fb::RecipeKind::Gemm;
  bool seen_m = false, seen_k = false, seen_n = false, seen_staging = false,
       seen_chunk = false, seen_steps = false;
  TILEC_RETURN_IF_ERROR(ForEachOption(
      rest, [&](std::string_view key, std::string_view value) -> Status {
        if (key == "m" && !seen_m) {
          seen_m = true;
          return ParseCount(key, value, 1, &r.m);
        }
        if (key == "k" && !seen_k) {
          seen_k = true;
          return ParseCount(key, value, 1, &r.k);
        }
        if (key == "n" && !seen_n) {
          seen_n = true;
          return ParseCount(key, value, 1, &r.n);
        }
        if (key == "first") return ParseCount(key, value, 0, &r.first_tile);
        if (key == "steps" && !seen_steps) {
          seen_steps = true;
          if (const auto inner = Wrapped(value, "interleaved")) {
            r.interleaved_steps = true;
            if (!ParseCount("interleaved", *inner, 2, &r.steps).ok()) {
              return Status::BadInput("steps=" + std::string(value) +
                                      ": expected interleaved(N) with N >= 2");
            }
            return Status::Ok();
          }
          return ParseCount(key, value, 1, &r.steps);
        }
        if (key == "chunk_k" && !seen_chunk) {
          seen_chunk = true;
          return ParseCount(key, value, 1, &r.chunk_k);
        }
        if (key == "staging" && !seen_staging) {
          seen_staging = true;
          if (value == "complete") {
            r.staging = fb::Staging::Complete;
          } else if (value == "streamed") {
            r.staging = fb::Staging::Streamed;
          } else if (const auto inner = Wrapped(value, "batched")) {
            r.staging = fb::Staging::Batched;
            if (!ParseCount("batched", *inner, 1, &r.batch_chunks).ok()) {
              return Status::BadInput("staging=" + std::string(value) +
                                      ": expected batched(N) with N >= 1");
            }
          } else {
            return Status::BadInput(
                "staging=" + std::string(value) +
                ": expected complete, streamed or batched(N)");
          }
          return Status::Ok();
        }
        return Status::BadInput(
            "unknown or repeated gemm option '" + std::string(key) +
            "' (options: m, k, n, staging, chunk_k, steps, first)");
      }));
  if (!seen_m || !seen_k || !seen_n) {
    return Status::BadInput("gemm needs m=, k= and n=");
  }
  if (r.interleaved_steps && r.k == 1) {
    return Status::BadInput(
        "steps=interleaved(N) needs k > 1 (with one part of the rows per "
        "block, steps are contiguous: steps=N)");
  }
  if (r.staging == fb::Staging::Complete && seen_chunk) {
    return Status::BadInput("chunk_k is for streamed or batched staging");
  }
  if (r.staging != fb::Staging::Complete && !seen_chunk) {
    return Status::BadInput("streamed and batched staging need chunk_k=");
  }
  return r;
}

StatusOr<Recipe> ParseAttentionRecipe(std::string_view rest) {
  Recipe r;
  r.kind = fb::RecipeKind::Attention;
  bool seen_m = false, seen_n = false, seen_first = false;
  TILEC_RETURN_IF_ERROR(ForEachOption(
      rest, [&](std::string_view key, std::string_view value) -> Status {
        if (key == "m" && !seen_m) {
          seen_m = true;
          return ParseCount(key, value, 1, &r.m);
        }
        if (key == "n" && !seen_n) {
          seen_n = true;
          return ParseCount(key, value, 1, &r.n);
        }
        if (key == "first" && !seen_first) {
          seen_first = true;
          return ParseCount(key, value, 0, &r.first_tile);
        }
        return Status::BadInput("unknown or repeated attention option '" +
                                std::string(key) + "' (options: m, n, first)");
      }));
  if (!seen_m || !seen_n) return Status::BadInput("attention needs m= and n=");
  return r;
}

}  // namespace

StatusOr<Recipe> ParseRecipe(std::string_view text) {
  text = Trim(text);
  const size_t space = text.find_first_of(" \t");
  const std::string_view word = text.substr(0, space);
  const std::string_view rest =
      space == std::string_view::npos ? "" : Trim(text.substr(space));
  Recipe r;
  if (word == "gemm") return ParseGemmRecipe(rest);
  if (word == "attention") return ParseAttentionRecipe(rest);
  if (word == "host") {
    if (!rest.empty()) {
      return Status::BadInput("a host recipe takes no options, got '" +
                              std::string(rest) + "'");
    }
    r.kind = fb::RecipeKind::Host;
    return r;
  }
  if (word == "elementwise") {
    r.kind = fb::RecipeKind::Elementwise;
  } else if (word == "rowwise") {
    r.kind = fb::RecipeKind::RowWise;
  } else if (word == "copy") {
    r.kind = fb::RecipeKind::Copy;
  } else {
    return Status::BadInput(
        "unknown recipe kind '" + std::string(word) +
        "' (expected gemm, attention, elementwise, rowwise, copy or host)");
  }
  std::string error;
  std::optional<fb::OwnershipT> layout = passes::ParseOwnership(rest, &error);
  if (!layout) return Status::BadInput(error);
  r.layout = *layout;
  return r;
}

StatusOr<passes::AttentionGrid> AttentionGridOf(const Graph& graph, int op,
                                                const Recipe& recipe) {
  const OpNode& node = graph.op(op);
  const bool scores = node.kind == fb::OpKind::AttentionScores;
  const auto& qkv = graph.value(node.operands[node.staged]).shape;
  const auto& probs = scores ? graph.value(node.result).shape
                             : graph.value(node.operands[0]).shape;
  return passes::MakeAttentionGrid(
      scores ? passes::AttentionPart::kScores : passes::AttentionPart::kContext,
      qkv, probs, node.heads, node.head_dim, recipe.m, recipe.n,
      recipe.first_tile, node.first_image);
}

fb::RecipeT RecipeToFb(const Recipe& recipe, const Graph& graph, int op) {
  fb::RecipeT out;
  out.kind = recipe.kind;
  if (recipe.kind == fb::RecipeKind::Attention) {
    // The planner checked the recipe (Coster::CheckRecipe).
    const passes::AttentionGrid grid =
        AttentionGridOf(graph, op, recipe).value();
    out.m_split = recipe.m;
    out.n_split = recipe.n;
    out.block_m = static_cast<int32_t>(grid.rows.Largest());
    out.block_k = static_cast<int32_t>(grid.Inner());
    out.block_n = static_cast<int32_t>(grid.cols.Largest());
    out.layout = std::make_unique<fb::OwnershipT>(grid.ResultOwnership());
    return out;
  }
  if (recipe.kind == fb::RecipeKind::Gemm) {
    const OpNode& node = graph.op(op);
    const auto& a = graph.value(node.operands[0]).shape;
    const auto& b = graph.value(node.operands[1]).shape;
    out.m_split = recipe.m;
    out.k_split = recipe.k;
    out.n_split = recipe.n;
    out.block_m = static_cast<int32_t>(ir::CeilDiv(a[0], recipe.m));
    out.block_k = static_cast<int32_t>(ir::CeilDiv(a[1], recipe.k));
    out.block_n = static_cast<int32_t>(ir::CeilDiv(b[1], recipe.n));
    out.staging = recipe.staging;
    out.batch_chunks =
        recipe.staging == fb::Staging::Batched ? recipe.batch_chunks : 1;
    out.chunk_k = recipe.staging == fb::Staging::Complete ? 0 : recipe.chunk_k;
    out.steps = recipe.steps;
    out.interleaved_steps = recipe.interleaved_steps && recipe.steps > 1;
    out.layout = std::make_unique<fb::OwnershipT>(passes::BlockedOwnership(
        {recipe.m, recipe.k, recipe.n}, 1, recipe.first_tile));
  } else if (recipe.kind != fb::RecipeKind::Host) {
    out.layout = std::make_unique<fb::OwnershipT>(recipe.layout);
  }
  return out;
}

StatusOr<Recipe> RecipeFromFb(const fb::RecipeT& in) {
  Recipe r;
  r.kind = in.kind;
  if (in.kind == fb::RecipeKind::Gemm) {
    r.m = in.m_split;
    r.k = in.k_split;
    r.n = in.n_split;
    r.staging = in.staging;
    r.chunk_k = in.chunk_k;
    r.batch_chunks = in.batch_chunks;
    r.steps = in.steps;
    r.interleaved_steps = in.interleaved_steps && in.steps > 1;
    r.first_tile = in.layout ? in.layout->first_tile : 0;
    if (r.m < 1 || r.k < 1 || r.n < 1 || r.steps < 1 ||
        (r.interleaved_steps && r.k == 1) ||
        (r.staging != fb::Staging::Complete && r.chunk_k < 1) ||
        r.batch_chunks < 1) {
      return Status::BadInput("bad gemm recipe: " + ir::RecipeText(in));
    }
    return r;
  }
  if (in.kind == fb::RecipeKind::Attention) {
    r.m = in.m_split;
    r.n = in.n_split;
    r.first_tile = in.layout ? in.layout->first_tile : 0;
    if (r.m < 1 || r.n < 1 || in.k_split != 1) {
      return Status::BadInput("bad attention recipe: " + ir::RecipeText(in));
    }
    return r;
  }
  if (in.kind == fb::RecipeKind::Host) return r;
  if (!in.layout) {
    return Status::BadInput("recipe without a layout: " + ir::RecipeText(in));
  }
  r.layout = *in.layout;
  return r;
}

}  // namespace tilec::plan
