// ONNX TensorProto contents as numbers: what import-onnx folds, turns into
// weights, and what the node tests compare against.
//
// Supported element types: FLOAT, FLOAT16, BFLOAT16 (numbers decode exactly
// to float), DOUBLE, INT64, INT32, INT8, UINT8, INT16, UINT16, BOOL (to
// double, exact for the sizes and indices a graph holds). Data comes from
// raw_data (little-endian) or the typed repeated fields. External data
// (`data_location: EXTERNAL`) is read from the file it names, which must
// resolve, after symlinks, to a regular file inside `base_dir` (the model's
// directory, as ONNX's checker requires): an absolute location, a '..' out
// of it or a symlink leading out is BadInput. STRING and complex tensors are
// refused.

#ifndef TILEC_PASSES_ONNX_ONNX_TENSOR_H_
#define TILEC_PASSES_ONNX_ONNX_TENSOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "onnx/onnx_pb.h"

namespace tilec::passes {

// A tensor's shape and elements, row-major, as doubles.
struct OnnxConstant {
  std::vector<int64_t> shape;
  int32_t elem_type = 0;  // onnx::TensorProto::DataType
  std::vector<double> data;

  int64_t elements() const { return static_cast<int64_t>(data.size()); }
  bool scalar() const { return data.size() == 1; }
};

// "FLOAT", "INT64", ...; "type <n>" for a number outside the enum.
std::string OnnxTypeName(int32_t elem_type);

// True for FLOAT, FLOAT16, BFLOAT16 and DOUBLE.
bool IsOnnxFloatType(int32_t elem_type);

// Decodes `tensor`. Errors are BadInput naming `what` (e.g.
// "model.onnx: initializer 'w'"): an unsupported element type, data whose
// size disagrees with the dims, external data that cannot be read.
Status DecodeOnnxTensor(const ::onnx::TensorProto& tensor,
                        const std::string& base_dir, const std::string& what,
                        OnnxConstant* out);

// Element count of `dims`, BadInput naming `what` for a negative dimension
// or more than 2^48 elements.
Status OnnxElements(const std::vector<int64_t>& dims, const std::string& what,
                    int64_t* count);

// Parses a serialized TensorProto (the test data's input_N.pb files).
Status ParseOnnxTensorFile(std::string_view bytes, const std::string& name,
                           ::onnx::TensorProto* tensor);

}  // namespace tilec::passes

#endif  // TILEC_PASSES_ONNX_ONNX_TENSOR_H_
