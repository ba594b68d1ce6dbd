// The importer's patch embedding (importer.h): a Conv with stride = kernel
// then flatten and transpose becomes Patchify, MatMul and BiasAdd.

#include "passes/onnx/importer.h"

#include <algorithm>

namespace tilec::passes::onnx_import {

// Transpose(Flatten(Conv(x, W, b), 2), [0, 2, 1]) with stride = kernel.
Status Importer::EmitPatchEmbedding(const NodeProto& transpose,
                                    const NodeProto& conv, const std::string& t,
                                    uint32_t* id) {
  const Shape* xs = ShapeOf(conv.input(0));
  const Shape* ws = ShapeOf(conv.input(1));
  std::vector<int64_t> kernel = IntsAttribute(conv, "kernel_shape");
  std::vector<int64_t> strides = IntsAttribute(conv, "strides");
  std::vector<int64_t> pads = IntsAttribute(conv, "pads");
  std::vector<int64_t> dilations = IntsAttribute(conv, "dilations");
  if (xs == nullptr || ws == nullptr || xs->size() != 4 || ws->size() != 4) {
    return Unsupported(conv,
                       "a patch embedding needs a 4-D image and "
                       "weight");
  }
  if (kernel.empty()) kernel = {(*ws)[2], (*ws)[3]};
  const int64_t p = kernel[0];
  const bool patch =
      kernel.size() == 2 && kernel[1] == p && strides == kernel &&
      std::all_of(pads.begin(), pads.end(),
                  [](int64_t v) { return v == 0; }) &&
      std::all_of(dilations.begin(), dilations.end(),
                  [](int64_t v) { return v == 1; }) &&
      IntAttribute(conv, "group", 1) == 1 && (*xs)[2] >= p && (*xs)[3] >= p;
  if (!patch) {
    return Unsupported(conv,
                       "a convolution that is not a patch embedding "
                       "(square kernel = stride, no padding, no "
                       "dilation, one group)");
  }
  if (!IsConstant(conv.input(1))) {
    return Unsupported(conv, "the patch embedding's weight is not constant");
  }
  const int64_t b = (*xs)[0], c = (*xs)[1], o = (*ws)[0];
  const int64_t tokens = ((*xs)[2] / p) * ((*xs)[3] / p);
  ConstPtr wc;
  TILEC_RETURN_IF_ERROR(ConstantData(conv.input(1), &wc));
  // [O, C*p*p] -> [C*p*p, O]: the columns of Patchify are (c, ky, kx).
  const int64_t k = c * p * p;
  std::vector<float> w(static_cast<size_t>(k * o));
  for (int64_t r = 0; r < o; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      w[j * o + r] = static_cast<float>(wc->data[r * k + j]);
    }
  }
  fb::DType dtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(t, &dtype));
  const std::string name = NodeName(conv);
  uint32_t image;
  TILEC_RETURN_IF_ERROR(Value(conv.input(0), *xs, &image));
  fb::OperationT* op = nullptr;
  const uint32_t patches =
      NewOp(fb::OpKind::Patchify, name + ".patchify", {image},
            name + ".patches", {b * tokens, k}, dtype, &op);
  op->patch = static_cast<int32_t>(p);
  fb::DType wtype;
  TILEC_RETURN_IF_ERROR(DTypeOf(conv.input(1), &wtype));
  const uint32_t weight = NewWeight(conv.input(1), {k, o}, w, wtype);
  const bool bias = conv.input_size() > 2 && !conv.input(2).empty();
  uint32_t y = NewOp(fb::OpKind::MatMul, name, {patches, weight},
                     bias ? name + ".product" : t, {b * tokens, o}, dtype);
  if (bias) {
    uint32_t bv;
    TILEC_RETURN_IF_ERROR(RowParam(conv.input(2), o, &bv));
    y = NewOp(fb::OpKind::BiasAdd, name + ".bias", {y, bv}, t,
              {b * tokens, o}, dtype);
  }
  (void)transpose;
  *id = y;
  return Status::Ok();
}

}  // namespace tilec::passes::onnx_import
