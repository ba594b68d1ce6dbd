#include "formats/op_shapes.h"

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace tilec::ir {
namespace {

using Shape = std::vector<int64_t>;

// Multiplies with overflow detection: shapes come from files we must not
// trust, and a wrapped product could make a bad shape look consistent.
bool CheckedMul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

const char* KindName(fb::OpKind kind) {
  const char* name = fb::EnumNameOpKind(kind);
  return (name != nullptr && name[0] != '\0') ? name : "unknown kind";
}

std::string Plural(size_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Builds the messages for one op; every message starts with the op's id,
// kind and name so that a verifier can print it as it is.
class Checker {
 public:
  explicit Checker(const OpShapeQuery& op) : op_(op) {}

  std::string Fail(const std::string& what) const {
    std::ostringstream out;
    out << "op " << op_.id << " (" << KindName(op_.kind);
    if (!op_.name.empty()) out << " " << op_.name;
    out << "): " << what;
    return out.str();
  }

  // Counts first, so the later checks may index freely.
  std::string Arity(size_t operands, size_t results) const {
    if (op_.operands.size() == operands && op_.results.size() == results) {
      return "";
    }
    return Fail("expected " + Plural(operands, "operand") + " and " +
                Plural(results, "result") + ", got " +
                Plural(op_.operands.size(), "operand") + " and " +
                Plural(op_.results.size(), "result"));
  }

  // Every dimension positive, for all operands and results.
  std::string Positive() const {
    for (size_t i = 0; i < op_.operands.size(); ++i) {
      if (std::string e = PositiveOne("operand", i, op_.operands[i]);
          !e.empty()) {
        return e;
      }
    }
    for (size_t i = 0; i < op_.results.size(); ++i) {
      if (std::string e = PositiveOne("result", i, op_.results[i]);
          !e.empty()) {
        return e;
      }
    }
    return "";
  }

  std::string Rank(const char* role, size_t index, const Shape& shape,
                   size_t rank) const {
    if (shape.size() == rank) return "";
    return Fail(std::string(role) + " " + std::to_string(index) +
                " has shape " + ShapeToString(shape) + ", expected rank " +
                std::to_string(rank));
  }

  std::string Expect(const char* role, size_t index, const Shape& shape,
                     const Shape& expected, const std::string& why) const {
    if (shape == expected) return "";
    std::string message = std::string(role) + " " + std::to_string(index) +
                          " has shape " + ShapeToString(shape) +
                          ", expected " + ShapeToString(expected);
    if (!why.empty()) message += " (" + why + ")";
    return Fail(message);
  }

 private:
  std::string PositiveOne(const char* role, size_t index,
                          const Shape& shape) const {
    for (int64_t d : shape) {
      if (d <= 0) {
        return Fail(std::string(role) + " " + std::to_string(index) +
                    " has shape " + ShapeToString(shape) +
                    ", every dimension must be positive");
      }
    }
    return "";
  }

  const OpShapeQuery& op_;
};

// Result 0 has the shape of operand 0 (elementwise and row-wise kinds).
std::string CheckSameShape(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(1, 1); !e.empty()) return e;
  return c.Expect("result", 0, op.results[0], op.operands[0],
                  "the shape of operand 0");
}

std::string CheckLayerNorm(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(3, 1); !e.empty()) return e;
  const Shape& x = op.operands[0];
  if (std::string e = c.Rank("operand", 0, x, 2); !e.empty()) return e;
  const Shape row = {x[1]};
  const std::string why = "the columns of operand 0 " + ShapeToString(x);
  if (std::string e = c.Expect("operand", 1, op.operands[1], row, why);
      !e.empty()) {
    return e;
  }
  if (std::string e = c.Expect("operand", 2, op.operands[2], row, why);
      !e.empty()) {
    return e;
  }
  return c.Expect("result", 0, op.results[0], x, "the shape of operand 0");
}

std::string CheckMatMul(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(2, 1); !e.empty()) return e;
  const Shape& a = op.operands[0];
  const Shape& b = op.operands[1];
  if (std::string e = c.Rank("operand", 0, a, 2); !e.empty()) return e;
  if (std::string e = c.Rank("operand", 1, b, 2); !e.empty()) return e;
  if (a[1] != b[0]) {
    return c.Fail("operand 0 " + ShapeToString(a) + " and operand 1 " +
                  ShapeToString(b) + " disagree on K (" +
                  std::to_string(a[1]) + " vs " + std::to_string(b[0]) + ")");
  }
  return c.Expect("result", 0, op.results[0], {a[0], b[1]}, "[M,N]");
}

std::string CheckBiasAdd(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(2, 1); !e.empty()) return e;
  const Shape& a = op.operands[0];
  if (std::string e = c.Rank("operand", 0, a, 2); !e.empty()) return e;
  if (std::string e =
          c.Expect("operand", 1, op.operands[1], {a[1]},
                   "the columns of operand 0 " + ShapeToString(a));
      !e.empty()) {
    return e;
  }
  return c.Expect("result", 0, op.results[0], a, "the shape of operand 0");
}

std::string CheckAdd(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(2, 1); !e.empty()) return e;
  if (std::string e = c.Expect("operand", 1, op.operands[1], op.operands[0],
                               "the shape of operand 0");
      !e.empty()) {
    return e;
  }
  return c.Expect("result", 0, op.results[0], op.operands[0],
                  "the shape of operand 0");
}

// Checks the heads/head_dim attributes against operand `index`, which must
// have `parts`*heads*head_dim columns (3: fused qkv, 2: kv, 1: q), and
// returns H*D through `inner`.
std::string CheckHeads(const Checker& c, const OpShapeQuery& op, size_t index,
                       int parts, const char* what, int64_t* inner) {
  if (op.heads <= 0 || op.head_dim <= 0) {
    return c.Fail("attributes heads=" + std::to_string(op.heads) +
                  " and head_dim=" + std::to_string(op.head_dim) +
                  " must be positive");
  }
  const Shape& x = op.operands[index];
  if (std::string e = c.Rank("operand", index, x, 2); !e.empty()) return e;
  int64_t columns = 0;
  if (!CheckedMul(op.heads, op.head_dim, inner) ||
      !CheckedMul(*inner, parts, &columns) || x[1] != columns) {
    return c.Fail("operand " + std::to_string(index) + " has shape " +
                  ShapeToString(x) + ", expected " + std::to_string(parts) +
                  "*heads*head_dim = " + std::to_string(parts) + "*" +
                  std::to_string(op.heads) + "*" +
                  std::to_string(op.head_dim) + " columns (the " + what +
                  " operand)");
  }
  return "";
}

// The staged operand of either form: the fused qkv [B*T, 3*H*D] (self) or
// kv [B*Tk, 2*H*D] (cross), told apart by its columns.
std::string CheckKeys(const Checker& c, const OpShapeQuery& op, size_t index,
                      bool cross, int64_t* inner) {
  return cross ? CheckHeads(c, op, index, 2, "kv", inner)
               : CheckHeads(c, op, index, 3, "qkv", inner);
}

// Checks that a [B, H, Tq, Tk] tensor matches the heads attribute, the
// B*Tq query rows and the B*Tk key rows (Tq = Tk for self-attention).
std::string CheckScoresShape(const Checker& c, const OpShapeQuery& op,
                             const char* role, size_t index, const Shape& s,
                             int64_t query_rows, int64_t key_rows) {
  if (std::string e = c.Rank(role, index, s, 4); !e.empty()) return e;
  int64_t bq = 0, bk = 0;
  const bool fits = CheckedMul(s[0], s[2], &bq) && CheckedMul(s[0], s[3], &bk);
  if (s[1] == op.heads && fits && bq == query_rows && bk == key_rows) {
    return "";
  }
  const std::string head = std::string(role) + " " + std::to_string(index) +
                           " has shape " + ShapeToString(s) +
                           ", expected [batch, heads=" +
                           std::to_string(op.heads);
  if (query_rows == key_rows) {
    return c.Fail(head + ", tokens, tokens] with batch*tokens = " +
                  std::to_string(key_rows) + " (the rows of the qkv operand)");
  }
  return c.Fail(head + ", Tq, Tk] with batch*Tq = " +
                std::to_string(query_rows) + " and batch*Tk = " +
                std::to_string(key_rows) + " (the rows of q and kv)");
}

// The staged operand's rows the op reads (`rows`: all of them on entry).
// Self-attention in image steps (first_image >= 0) reads images
// [first_image, first_image + B) of qkv [N*T, 3HD], where scores or
// probabilities are [B,H,T,T]; otherwise (first_image -1) all of qkv or kv,
// which CheckScoresShape compares with B.
std::string CheckImagesRead(const Checker& c, const OpShapeQuery& op,
                            bool cross, const Shape& scores, int64_t* rows) {
  const int64_t first = op.first_image;
  if (first == -1 || (first >= 0 && scores.size() != 4)) return "";
  if (cross || first < 0) {
    return c.Fail("attribute first_image=" + std::to_string(first) +
                  (cross ? ": cross-attention does not run in image steps"
                         : " must be -1 or an image"));
  }
  const int64_t tokens = scores[3], images = scores[0];
  int64_t read = 0, end = 0;
  if (tokens > 0 && *rows % tokens == 0 && CheckedMul(images, tokens, &read) &&
      CheckedMul(first + images, tokens, &end) && end <= *rows) {
    *rows = read;
    return "";
  }
  return c.Fail("attribute first_image=" + std::to_string(first) +
                ": images [" + std::to_string(first) + ", " +
                std::to_string(first + images) + ") of " +
                std::to_string(tokens) + " tokens do not lie in the " +
                std::to_string(*rows) + " rows of the qkv operand");
}

// Self: qkv -> [B,H,T,T]. Cross: q [B*Tq, H*D], kv [B*Tk, 2*H*D] ->
// [B,H,Tq,Tk].
std::string CheckAttentionScores(const Checker& c, const OpShapeQuery& op) {
  const bool cross = op.operands.size() == 2;
  if (std::string e = c.Arity(cross ? 2 : 1, 1); !e.empty()) return e;
  int64_t inner = 0;
  if (cross) {
    if (std::string e = CheckHeads(c, op, 0, 1, "q", &inner); !e.empty()) {
      return e;
    }
  }
  const size_t keys = cross ? 1 : 0;
  if (std::string e = CheckKeys(c, op, keys, cross, &inner); !e.empty()) {
    return e;
  }
  int64_t rows = op.operands[keys][0];
  if (std::string e = CheckImagesRead(c, op, cross, op.results[0], &rows);
      !e.empty()) {
    return e;
  }
  return CheckScoresShape(c, op, "result", 0, op.results[0],
                          cross ? op.operands[0][0] : rows, rows);
}

// probs [B,H,Tq,Tk] and qkv [B*T, 3*H*D] (Tq = Tk = T) or kv
// [B*Tk, 2*H*D] -> [B*Tq, H*D].
std::string CheckAttentionContext(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(2, 1); !e.empty()) return e;
  const Shape& keys = op.operands[1];
  const bool cross = keys.size() == 2 && op.heads > 0 && op.head_dim > 0 &&
                     keys[1] == int64_t{2} * op.heads * op.head_dim;
  int64_t inner = 0;
  if (std::string e = CheckKeys(c, op, 1, cross, &inner); !e.empty()) {
    return e;
  }
  const Shape& probs = op.operands[0];
  if (std::string e = c.Rank("operand", 0, probs, 4); !e.empty()) return e;
  int64_t query_rows = 0;
  if (!CheckedMul(probs[0], probs[2], &query_rows)) {
    return c.Fail("operand 0 " + ShapeToString(probs) + " is too large");
  }
  int64_t key_rows = keys[0];
  if (std::string e = CheckImagesRead(c, op, cross, probs, &key_rows);
      !e.empty()) {
    return e;
  }
  if (!cross) query_rows = key_rows;  // self: Tq = Tk
  if (std::string e = CheckScoresShape(c, op, "operand", 0, probs,
                                       query_rows, key_rows);
      !e.empty()) {
    return e;
  }
  return c.Expect("result", 0, op.results[0], {query_rows, inner},
                  "[batch*Tq, heads*head_dim]");
}

std::string CheckPatchify(const Checker& c, const OpShapeQuery& op) {
  if (std::string e = c.Arity(1, 1); !e.empty()) return e;
  const Shape& image = op.operands[0];
  if (std::string e = c.Rank("operand", 0, image, 4); !e.empty()) return e;
  const int64_t p = op.patch;
  if (p <= 0 || image[2] < p || image[3] < p) {
    return c.Fail("attribute patch=" + std::to_string(p) +
                  " must be positive and at most the height and width of "
                  "operand 0 " + ShapeToString(image));
  }
  int64_t rows = 0, columns = 0;
  if (!CheckedMul(image[0], (image[2] / p) * (image[3] / p), &rows) ||
      !CheckedMul(image[1], p * p, &columns)) {
    return c.Fail("operand 0 " + ShapeToString(image) + " is too large");
  }
  return c.Expect("result", 0, op.results[0], {rows, columns},
                  "[B*floor(H/p)*floor(W/p), C*p*p]");
}

// Operands and result [r, w] alike in columns; the segments tile the
// result's rows exactly once, in order, and read every operand.
std::string CheckCopyRows(const Checker& c, const OpShapeQuery& op) {
  if (op.operands.empty() || op.results.size() != 1) {
    return c.Fail("expected at least 1 operand and 1 result, got " +
                  Plural(op.operands.size(), "operand") + " and " +
                  Plural(op.results.size(), "result"));
  }
  const Shape& result = op.results[0];
  if (std::string e = c.Rank("result", 0, result, 2); !e.empty()) return e;
  for (size_t i = 0; i < op.operands.size(); ++i) {
    const Shape& x = op.operands[i];
    if (std::string e = c.Rank("operand", i, x, 2); !e.empty()) return e;
    if (x[1] != result[1]) {
      return c.Fail("operand " + std::to_string(i) + " has shape " +
                    ShapeToString(x) + ", expected " +
                    std::to_string(result[1]) +
                    " columns (the columns of result 0 " +
                    ShapeToString(result) + ")");
    }
  }
  if (op.rows.empty()) return c.Fail("has no row segments");
  std::vector<bool> read(op.operands.size(), false);
  int64_t next = 0;  // the first result row no segment has written yet
  for (size_t i = 0; i < op.rows.size(); ++i) {
    const RowSegment& s = op.rows[i];
    const std::string seg = "segment " + std::to_string(i) + " (operand " +
                            std::to_string(s.operand) + " rows " +
                            std::to_string(s.first) + "+" +
                            std::to_string(s.count) + " at " +
                            std::to_string(s.at) + ")";
    if (s.count < 1) return c.Fail(seg + " copies no rows");
    if (s.operand >= op.operands.size()) {
      return c.Fail(seg + " names operand " + std::to_string(s.operand) +
                    " of " + Plural(op.operands.size(), "operand"));
    }
    const int64_t source_rows = op.operands[s.operand][0];
    if (s.first < 0 || s.first > source_rows - s.count) {
      return c.Fail(seg + " reads past operand " + std::to_string(s.operand) +
                    " " + ShapeToString(op.operands[s.operand]));
    }
    if (s.at != next) {
      return c.Fail(seg + " starts at row " + std::to_string(s.at) +
                    ", expected " + std::to_string(next) +
                    " (segments are sorted and contiguous)");
    }
    if (s.count > result[0] - next) {
      return c.Fail(seg + " writes past result 0 " + ShapeToString(result));
    }
    next += s.count;
    read[s.operand] = true;
  }
  if (next != result[0]) {
    return c.Fail("segments cover rows [0, " + std::to_string(next) +
                  ") of result 0 " + ShapeToString(result) +
                  ", expected all of them");
  }
  for (size_t i = 0; i < read.size(); ++i) {
    if (!read[i]) {
      return c.Fail("operand " + std::to_string(i) +
                    " is read by no segment");
    }
  }
  return "";
}

std::vector<int64_t> ShapeOf(const fb::Value& value) {
  std::vector<int64_t> shape;
  if (value.shape() != nullptr) {
    shape.assign(value.shape()->begin(), value.shape()->end());
  }
  return shape;
}

}  // namespace

std::vector<RowSegment> RowSegments(const fb::OperationT& op) {
  std::vector<RowSegment> out;
  for (const auto& r : op.rows) {
    if (r == nullptr) continue;
    out.push_back({r->operand, r->first, r->count, r->at});
  }
  return out;
}

OpShapeQuery ShapeQueryOf(const fb::OperationT& op) {
  OpShapeQuery query;
  query.id = op.id;
  query.kind = op.kind;
  query.name = op.name;
  query.heads = op.heads;
  query.head_dim = op.head_dim;
  query.patch = op.patch;
  query.first_image = op.first_image;
  query.rows = RowSegments(op);
  return query;
}

void AppendRowSegment(const RowSegment& segment, fb::OperationT* op) {
  auto r = std::make_unique<fb::RowCopyT>();
  r->operand = segment.operand;
  r->first = segment.first;
  r->count = segment.count;
  r->at = segment.at;
  op->rows.push_back(std::move(r));
}

std::vector<RowSegment> RowSegments(const fb::Operation& op) {
  std::vector<RowSegment> out;
  if (op.rows() == nullptr) return out;
  for (const fb::RowCopy* r : *op.rows()) {
    out.push_back({r->operand(), r->first(), r->count(), r->at()});
  }
  return out;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

const std::vector<int64_t>& DeclaredShape(const fb::ValueT& value) {
  return value.declared_shape.empty() ? value.shape : value.declared_shape;
}

void DeclareModelShape(const std::vector<int64_t>& model_shape,
                       fb::ValueT* value) {
  if (model_shape != value->shape) value->declared_shape = model_shape;
}

namespace {

std::string ShapeProblem(const OpShapeQuery& op) {
  const Checker c(op);
  if (std::string e = c.Positive(); !e.empty()) return e;
  switch (op.kind) {
    case fb::OpKind::LayerNorm:
      return CheckLayerNorm(c, op);
    case fb::OpKind::MatMul:
      return CheckMatMul(c, op);
    case fb::OpKind::BiasAdd:
      return CheckBiasAdd(c, op);
    case fb::OpKind::Gelu:
    case fb::OpKind::Cast:
    case fb::OpKind::Softmax:
    case fb::OpKind::Redistribute:
      return CheckSameShape(c, op);
    case fb::OpKind::Add:
      return CheckAdd(c, op);
    case fb::OpKind::AttentionScores:
      return CheckAttentionScores(c, op);
    case fb::OpKind::AttentionContext:
      return CheckAttentionContext(c, op);
    case fb::OpKind::Patchify:
      return CheckPatchify(c, op);
    case fb::OpKind::CopyRows:
      return CheckCopyRows(c, op);
    case fb::OpKind::Fused:
    case fb::OpKind::Moments:
    case fb::OpKind::Normalize:
      // No shape rule is fixed for these yet (see the header).
      return "";
  }
  return c.Fail("unknown op kind " +
                std::to_string(static_cast<int>(op.kind)));
}

std::string ShapeProblem(const fb::OperationT& op, const fb::ModuleT& module) {
  OpShapeQuery query = ShapeQueryOf(op);
  const auto& values = module.values;
  // Ids are normally dense (values[i]->id == i); fall back to a scan so that
  // a module with sparse ids is still checked rather than misread.
  auto find = [&values](uint32_t id) -> const fb::ValueT* {
    if (id < values.size() && values[id] != nullptr && values[id]->id == id) {
      return values[id].get();
    }
    for (const auto& v : values) {
      if (v != nullptr && v->id == id) return v.get();
    }
    return nullptr;
  };
  auto collect = [&](const std::vector<uint32_t>& ids, const char* role,
                     std::vector<std::vector<int64_t>>* shapes) {
    for (size_t i = 0; i < ids.size(); ++i) {
      const fb::ValueT* v = find(ids[i]);
      if (v == nullptr) {
        return Checker(query).Fail(std::string(role) + " " +
                                   std::to_string(i) + " refers to value " +
                                   std::to_string(ids[i]) +
                                   ", which does not exist");
      }
      shapes->push_back(v->shape);
    }
    return std::string();
  };
  if (std::string e = collect(op.operands, "operand", &query.operands);
      !e.empty()) {
    return e;
  }
  if (std::string e = collect(op.results, "result", &query.results);
      !e.empty()) {
    return e;
  }
  return ShapeProblem(query);
}

std::string ShapeProblem(const fb::Operation& op, const fb::Module& module) {
  OpShapeQuery query;
  query.id = op.id();
  query.kind = op.kind();
  if (op.name() != nullptr) query.name = op.name()->str();
  query.heads = op.heads();
  query.head_dim = op.head_dim();
  query.patch = op.patch();
  query.first_image = op.first_image();
  query.rows = RowSegments(op);
  const auto* values = module.values();
  auto find = [values](uint32_t id) -> const fb::Value* {
    if (values == nullptr) return nullptr;
    if (id < values->size() && values->Get(id)->id() == id) {
      return values->Get(id);
    }
    for (const fb::Value* v : *values) {
      if (v->id() == id) return v;
    }
    return nullptr;
  };
  auto collect = [&](const flatbuffers::Vector<uint32_t>* ids,
                     const char* role,
                     std::vector<std::vector<int64_t>>* shapes) {
    if (ids == nullptr) return std::string();
    for (flatbuffers::uoffset_t i = 0; i < ids->size(); ++i) {
      const fb::Value* v = find(ids->Get(i));
      if (v == nullptr) {
        return Checker(query).Fail(std::string(role) + " " +
                                   std::to_string(i) + " refers to value " +
                                   std::to_string(ids->Get(i)) +
                                   ", which does not exist");
      }
      shapes->push_back(ShapeOf(*v));
    }
    return std::string();
  };
  if (std::string e = collect(op.operands(), "operand", &query.operands);
      !e.empty()) {
    return e;
  }
  if (std::string e = collect(op.results(), "result", &query.results);
      !e.empty()) {
    return e;
  }
  return ShapeProblem(query);
}

Status AsStatus(std::string problem) {
  return problem.empty() ? Status::Ok() : Status::BadInput(std::move(problem));
}

}  // namespace

Status CheckOpShapes(const OpShapeQuery& op) {
  return AsStatus(ShapeProblem(op));
}

Status CheckOpShapes(const fb::OperationT& op, const fb::ModuleT& module) {
  return AsStatus(ShapeProblem(op, module));
}

Status CheckOpShapes(const fb::Operation& op, const fb::Module& module) {
  return AsStatus(ShapeProblem(op, module));
}

}  // namespace tilec::ir
