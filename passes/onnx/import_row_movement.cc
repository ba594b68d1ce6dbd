// The importer's row movement (importer.h): a class token concatenated,
// picked for the head, a position table expanded per image.
//
// A [..., T, D] tensor is tilec's [rows, D], row-major: each image's T
// tokens are consecutive rows. Concatenating, picking or broadcasting
// along any axis but the last (the tokens, the images) therefore moves
// whole rows: one CopyRows.

#include "passes/onnx/importer.h"

#include <algorithm>

namespace tilec::passes::onnx_import {

// Segments sorted by `at` and covering the result once, as the IR
// requires: the callers build them image by image.
Status Importer::EmitCopyRows(const NodeProto& node, const std::string& name,
                              std::vector<uint32_t> operands,
                              const std::vector<Segment>& segments,
                              const std::string& result, int64_t width,
                              fb::DType dtype, uint32_t* id) {
  for (uint32_t v : operands) {
    if (values_[v]->dtype != dtype) {
      return Unsupported(
          node, "it moves rows of '" + values_[v]->name + "' (" +
                    fb::EnumNameDType(values_[v]->dtype) + ") into a " +
                    fb::EnumNameDType(dtype) +
                    " tensor; tilec's CopyRows keeps the dtype");
    }
  }
  fb::OperationT* op = nullptr;
  const Segment& last = segments.back();
  *id = NewOp(fb::OpKind::CopyRows, name, std::move(operands), result,
              {last.at + last.count, width}, dtype, &op);
  for (const Segment& s : segments) ir::AppendRowSegment(s, op);
  return Status::Ok();
}

// The rows of `from` ([rows, D]) repeated `images` times, as one image's
// rows broadcast over the batch.
Status Importer::EmitPerImage(const NodeProto& node, uint32_t from,
                              int64_t images, const std::string& result,
                              uint32_t* id) {
  const fb::ValueT& v = *values_[from];
  const int64_t rows = v.shape[0];
  std::vector<Segment> segments;
  for (int64_t b = 0; b < images; ++b)
    segments.push_back({0, 0, rows, b * rows});
  return EmitCopyRows(node, NodeName(node) + ".rows", {from}, segments,
                      result, v.shape[1], v.dtype, id);
}

// `small` broadcasts to `big` over leading dims only (aligned from the
// right: every dim of `small` beyond `big`'s trailing dims is 1), so its
// data is one image's rows and `big` repeats them.
bool Importer::LeadingBroadcast(const Shape& small, const Shape& big) {
  const Shape core = StripOnes(small);
  if (core.size() > big.size() || Elements(small) >= Elements(big)) {
    return false;
  }
  return std::equal(core.begin(), core.end(), big.end() - core.size());
}

// The tensor an Expand (through casts) broadcasts over leading dims to
// `shape`, or "" when `t` is not such an Expand.
std::string Importer::ExpandSource(const std::string& t,
                                   const Shape& shape) const {
  const NodeProto* n = NodeIs(t, "Expand");
  if (n == nullptr) return "";
  const Shape* in = ShapeOf(n->input(0));
  // The width must be the input's own: a broadcast width is not rows.
  if (in == nullptr || in->empty() || in->back() != shape.back() ||
      !LeadingBroadcast(*in, shape)) {
    return "";
  }
  return n->input(0);
}

// Expand over leading dims: the input's rows once per image.
Status Importer::EmitExpand(const NodeProto& node, const std::string& t,
                            uint32_t* id) {
  const Shape& out = *ShapeOf(t);
  const std::string src = out.empty() ? "" : ExpandSource(t, out);
  if (src.empty()) {
    return Unsupported(node,
                       "an Expand that broadcasts other than over "
                       "leading (image) axes: tilec repeats whole rows "
                       "only");
  }
  const Shape in = View2D(*ShapeOf(src));
  uint32_t rows;
  TILEC_RETURN_IF_ERROR(Value(src, in, &rows));
  return EmitPerImage(node, rows, Elements(out) / Elements(in), t, id);
}

bool Importer::RowAxisOf(const Shape& s, int64_t attr, RowAxis* r) {
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank < 2 || !NormalizeAxis(attr, rank, &r->axis) ||
      r->axis == rank - 1) {
    return false;
  }
  r->outer = Product(s, 0, r->axis);
  r->inner = Product(s, r->axis + 1, rank - 1);
  return true;
}

std::string Importer::NotRows(const std::string& op, int64_t attr,
                              const Shape& s) const {
  return "a " + op + " on axis " + std::to_string(attr) + " of a rank-" +
         std::to_string(s.size()) +
         " tensor, the last (width) axis; tilec moves whole rows only "
         "(any axis but the last)";
}

// Concat on an axis but the last: for each index of the dims before it,
// each input's block of rows in turn (a class token's row, then an
// image's patch rows). An input that is an Expand over leading dims (a
// class token [1, 1, D] expanded to [B, 1, D]) is read from its source,
// whose blocks repeat.
Status Importer::EmitConcat(const NodeProto& node, const std::string& t,
                            uint32_t* id) {
  const Shape& out = *ShapeOf(t);
  const int64_t attr = IntAttribute(node, "axis", 0);
  RowAxis r;
  if (!RowAxisOf(out, attr, &r)) {
    return Unsupported(node, NotRows("Concat", attr, out));
  }
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  std::vector<uint32_t> operands;
  std::vector<int64_t> blocks, copies;  // rows per outer index; repeats
  for (const std::string& in : node.input()) {
    if (ShapeOf(in) == nullptr) return Unknown(in, "tensor");
    const Shape& s = *ShapeOf(in);
    if (s.size() != out.size()) {
      return Unsupported(node, "its inputs' ranks differ from its output's");
    }
    const int64_t block = s[r.axis] * r.inner;
    std::string src = ExpandSource(in, s);
    if (!src.empty() &&
        (View2D(*ShapeOf(src))[0] % std::max<int64_t>(block, 1)) != 0) {
      src.clear();  // broadcast within a block: materialize the Expand
    }
    const Shape data = View2D(src.empty() ? s : *ShapeOf(src));
    uint32_t v;
    TILEC_RETURN_IF_ERROR(Value(src.empty() ? in : src, data, &v));
    operands.push_back(v);
    blocks.push_back(block);
    copies.push_back(block == 0 ? 1 : data[0] / block);
  }
  std::vector<Segment> segments;
  int64_t at = 0;
  for (int64_t o = 0; o < r.outer; ++o) {
    for (size_t i = 0; i < operands.size(); ++i) {
      if (blocks[i] == 0) continue;
      segments.push_back({static_cast<uint32_t>(i),
                          (o % copies[i]) * blocks[i], blocks[i], at});
      at += blocks[i];
    }
  }
  return EmitCopyRows(node, NodeName(node), std::move(operands), segments, t,
                      out.back(), dtype, id);
}

// Gather with constant indices, or a Slice with step 1 of one axis, on an
// axis but the last: for each index of the dims before it, the picked
// blocks of rows (token 0 of each image for a class-token head).
Status Importer::EmitTokenPick(const NodeProto& node, const std::string& t,
                               uint32_t* id) {
  const std::string& data = node.input(0);
  if (ShapeOf(data) == nullptr) return Unknown(data, "tensor");
  const Shape& ds = *ShapeOf(data);
  RowAxis r;
  std::vector<int64_t> picks;  // indices along r.axis, in output order
  bool everything = false;
  TILEC_RETURN_IF_ERROR(node.op_type() == "Gather"
                            ? GatherPicks(node, ds, &r, &picks)
                            : SlicePicks(node, ds, &r, &picks, &everything));
  // x[:, :] (exporters write one Slice per indexed axis): no data moves.
  if (everything) return Value(data, View2D(ds), id);
  if (picks.empty() || r.inner == 0) {
    return Unsupported(node, "it picks nothing (an empty result)");
  }
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  uint32_t x;
  TILEC_RETURN_IF_ERROR(Value(data, View2D(ds), &x));
  const std::vector<Segment> segments = PickSegments(r, ds[r.axis], picks);
  // Every row in order (CLIP's position table gathered at 0..T-1): the
  // input itself.
  if (segments.size() == 1 && segments[0].first == 0 &&
      segments[0].count == values_[x]->shape[0]) {
    *id = x;
    return Status::Ok();
  }
  return EmitCopyRows(node, NodeName(node), {x}, segments, t, ds.back(),
                      dtype, id);
}

// A Gather's constant indices along its (row-moving) axis.
Status Importer::GatherPicks(const NodeProto& node, const Shape& ds, RowAxis* r,
                             std::vector<int64_t>* picks) {
  const int64_t attr = IntAttribute(node, "axis", 0);
  if (!RowAxisOf(ds, attr, r)) {
    return Unsupported(node, NotRows("Gather", attr, ds));
  }
  if (!IsConstant(node.input(1))) {
    return Unsupported(node,
                       "a Gather with a computed index; tilec picks "
                       "rows only at constant positions");
  }
  ConstPtr idx;
  TILEC_RETURN_IF_ERROR(ConstantData(node.input(1), &idx));
  const int64_t d = ds[r->axis];
  for (double i : idx->data) {
    const int64_t k = static_cast<int64_t>(i) + (i < 0 ? d : 0);
    if (k < 0 || k >= d) {
      return Unsupported(
          node, "index " + std::to_string(static_cast<int64_t>(i)) +
                    " is outside axis " + std::to_string(r->axis) +
                    " of size " + std::to_string(d));
    }
    picks->push_back(k);
  }
  return Status::Ok();
}

// A Slice's contiguous window along the one axis it narrows;
// *everything when it narrows none.
Status Importer::SlicePicks(const NodeProto& node, const Shape& ds, RowAxis* r,
                            std::vector<int64_t>* picks, bool* everything) {
  for (int i = 1; i < node.input_size(); ++i) {
    if (!node.input(i).empty() && !IsConstant(node.input(i))) {
      return Unsupported(node,
                         "a Slice with computed bounds; tilec picks "
                         "rows only at constant positions");
    }
  }
  ConstPtr bounds[5];  // starts, ends, axes, steps
  for (int i = 1; i < std::min(node.input_size(), 5); ++i) {
    if (node.input(i).empty()) continue;
    TILEC_RETURN_IF_ERROR(ConstantData(node.input(i), &bounds[i]));
  }
  std::vector<int64_t> begin, step;
  Shape out;
  if (bounds[1] == nullptr || bounds[2] == nullptr ||
      !SliceWindow(ds, *bounds[1], *bounds[2], bounds[3].get(),
                   bounds[4].get(), &begin, &step, &out)) {
    return Unsupported(node, "a Slice whose window import-onnx cannot read");
  }
  int64_t axis = -1;
  for (int64_t a = 0; a < static_cast<int64_t>(ds.size()); ++a) {
    if (out[a] == ds[a] && step[a] == 1) continue;
    if (axis >= 0) {
      return Unsupported(node,
                         "a Slice of more than one axis; tilec picks "
                         "rows along one axis");
    }
    axis = a;
  }
  *everything = axis < 0;
  if (*everything) return Status::Ok();
  if (!RowAxisOf(ds, axis, r)) {
    return Unsupported(node, NotRows("Slice", axis, ds));
  }
  if (step[r->axis] != 1) {
    return Unsupported(node, "a Slice with step " +
                                 std::to_string(step[r->axis]) +
                                 "; tilec picks contiguous rows");
  }
  for (int64_t k = 0; k < out[r->axis]; ++k) {
    picks->push_back(begin[r->axis] + k);
  }
  return Status::Ok();
}

// For each index of the dims before the axis, the picked blocks of rows
// in order; consecutive rows make one segment.
std::vector<Segment> Importer::PickSegments(const RowAxis& r, int64_t size,
                                            const std::vector<int64_t>& picks) {
  std::vector<Segment> segments;
  int64_t at = 0;
  for (int64_t o = 0; o < r.outer; ++o) {
    for (int64_t k : picks) {
      const int64_t first = (o * size + k) * r.inner;
      Segment* prev = segments.empty() ? nullptr : &segments.back();
      if (prev != nullptr && prev->first + prev->count == first) {
        prev->count += r.inner;
      } else {
        segments.push_back({0, first, r.inner, at});
      }
      at += r.inner;
    }
  }
  return segments;
}

}  // namespace tilec::passes::onnx_import
