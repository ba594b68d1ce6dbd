#include "passes/onnx/onnx_tensor.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>

#include "formats/ir.h"
#include "kernels/numerics.h"

namespace tilec::passes {
namespace {

using ::onnx::TensorProto;

constexpr int64_t kMaxElements = int64_t{1} << 48;

// Bytes of one element in raw_data, 0 for types this file does not decode.
int RawBytes(int32_t type) {
  switch (type) {
    case TensorProto::DOUBLE:
    case TensorProto::INT64:
    case TensorProto::UINT64:
      return 8;
    case TensorProto::FLOAT:
    case TensorProto::INT32:
    case TensorProto::UINT32:
      return 4;
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::INT16:
    case TensorProto::UINT16:
      return 2;
    case TensorProto::INT8:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return 1;
    default:
      return 0;
  }
}

template <typename T>
T LoadLe(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 and every ONNX target: LE
  return v;
}

double DecodeRaw(int32_t type, const char* p) {
  switch (type) {
    case TensorProto::DOUBLE:
      return LoadLe<double>(p);
    case TensorProto::INT64:
      return static_cast<double>(LoadLe<int64_t>(p));
    case TensorProto::UINT64:
      return static_cast<double>(LoadLe<uint64_t>(p));
    case TensorProto::FLOAT:
      return LoadLe<float>(p);
    case TensorProto::INT32:
      return LoadLe<int32_t>(p);
    case TensorProto::UINT32:
      return LoadLe<uint32_t>(p);
    case TensorProto::FLOAT16:
      return kernels::F16Decode(LoadLe<uint16_t>(p));
    case TensorProto::BFLOAT16:
      return kernels::Bf16Decode(LoadLe<uint16_t>(p));
    case TensorProto::INT16:
      return LoadLe<int16_t>(p);
    case TensorProto::UINT16:
      return LoadLe<uint16_t>(p);
    case TensorProto::INT8:
      return LoadLe<int8_t>(p);
    default:  // UINT8, BOOL
      return static_cast<unsigned char>(*p);
  }
}

// The typed repeated fields: ONNX stores FLOAT16/BFLOAT16/small integers as
// their bit patterns in int32_data.
Status DecodeTyped(const TensorProto& t, const std::string& what, int64_t count,
                   std::vector<double>* data) {
  auto size_error = [&](int64_t got) {
    return Status::BadInput(what + ": holds " + std::to_string(got) +
                            " elements, its dims need " +
                            std::to_string(count));
  };
  const int32_t type = t.data_type();
  data->clear();
  switch (type) {
    case TensorProto::FLOAT:
      if (t.float_data_size() != count) return size_error(t.float_data_size());
      for (float f : t.float_data()) data->push_back(f);
      return Status::Ok();
    case TensorProto::DOUBLE:
      if (t.double_data_size() != count) {
        return size_error(t.double_data_size());
      }
      for (double f : t.double_data()) data->push_back(f);
      return Status::Ok();
    case TensorProto::INT64:
      if (t.int64_data_size() != count) return size_error(t.int64_data_size());
      for (int64_t v : t.int64_data()) data->push_back(static_cast<double>(v));
      return Status::Ok();
    case TensorProto::UINT64:
    case TensorProto::UINT32:
      if (t.uint64_data_size() != count) {
        return size_error(t.uint64_data_size());
      }
      for (uint64_t v : t.uint64_data()) {
        data->push_back(static_cast<double>(v));
      }
      return Status::Ok();
    default:
      break;
  }
  if (t.int32_data_size() != count) return size_error(t.int32_data_size());
  for (int32_t v : t.int32_data()) {
    const uint16_t bits = static_cast<uint16_t>(v);
    if (type == TensorProto::FLOAT16) {
      data->push_back(kernels::F16Decode(bits));
    } else if (type == TensorProto::BFLOAT16) {
      data->push_back(kernels::Bf16Decode(bits));
    } else {
      data->push_back(v);
    }
  }
  return Status::Ok();
}

Status ReadExternal(const TensorProto& t, const std::string& base_dir,
                    const std::string& what, std::string* bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  auto number = [&](const std::string& text, int64_t* v) {
    const char* end = text.data() + text.size();
    auto [ptr, error] = std::from_chars(text.data(), end, *v);
    return error == std::errc() && ptr == end;
  };
  for (const auto& entry : t.external_data()) {
    if (entry.key() == "location") location = entry.value();
    if ((entry.key() == "offset" && !number(entry.value(), &offset)) ||
        (entry.key() == "length" && !number(entry.value(), &length))) {
      return Status::BadInput(what + ": external data " + entry.key() + " '" +
                              entry.value() + "' is not a number");
    }
  }
  if (location.empty()) {
    return Status::BadInput(what + ": external data without a location");
  }
  // The model names the file: it must not reach outside its directory.
  std::string path;
  TILEC_RETURN_IF_ERROR(ir::ResolveInside(base_dir.empty() ? "." : base_dir,
                                          location, what + ": external data",
                                          &path));
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::BadInput(what + ": cannot open its external data " + path);
  }
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  if (length < 0) length = size - offset;
  if (offset < 0 || length < 0 || offset > size || length > size - offset) {
    return Status::BadInput(what + ": external data [" +
                            std::to_string(offset) + ", +" +
                            std::to_string(length) +
                            ") lies beyond the end "
                            "of " +
                            path + " (" + std::to_string(size) + " bytes)");
  }
  bytes->resize(static_cast<size_t>(length));
  in.seekg(offset);
  in.read(bytes->data(), length);
  if (!in) return Status::BadInput(what + ": cannot read " + path);
  return Status::Ok();
}

}  // namespace

std::string OnnxTypeName(int32_t elem_type) {
  if (TensorProto::DataType_IsValid(elem_type)) {
    return TensorProto::DataType_Name(
        static_cast<TensorProto::DataType>(elem_type));
  }
  return "type " + std::to_string(elem_type);
}

bool IsOnnxFloatType(int32_t elem_type) {
  return elem_type == TensorProto::FLOAT || elem_type == TensorProto::FLOAT16 ||
         elem_type == TensorProto::BFLOAT16 || elem_type == TensorProto::DOUBLE;
}

Status OnnxElements(const std::vector<int64_t>& dims, const std::string& what,
                    int64_t* count) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return Status::BadInput(what + ": negative dimension " +
                              std::to_string(d));
    }
    if (d != 0 && product > kMaxElements / d) {
      return Status::BadInput(what + ": more than 2^48 elements");
    }
    product *= d;
  }
  *count = product;
  return Status::Ok();
}

Status DecodeOnnxTensor(const TensorProto& t, const std::string& base_dir,
                        const std::string& what, OnnxConstant* out) {
  OnnxConstant result;
  result.shape.assign(t.dims().begin(), t.dims().end());
  result.elem_type = t.data_type();
  int64_t count = 0;
  TILEC_RETURN_IF_ERROR(OnnxElements(result.shape, what, &count));
  const int width = RawBytes(t.data_type());
  if (width == 0) {
    return Status::BadInput(what + ": element type " +
                            OnnxTypeName(t.data_type()) +
                            " is not a number tilec reads");
  }
  std::string external;
  const std::string* raw = nullptr;
  if (t.data_location() == TensorProto::EXTERNAL) {
    TILEC_RETURN_IF_ERROR(ReadExternal(t, base_dir, what, &external));
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }
  if (raw != nullptr) {
    if (static_cast<int64_t>(raw->size()) != count * width) {
      return Status::BadInput(
          what + ": holds " + std::to_string(raw->size()) +
          " bytes, its dims need " + std::to_string(count * width) + " (" +
          std::to_string(count) + " x " + OnnxTypeName(t.data_type()) + ")");
    }
    result.data.resize(static_cast<size_t>(count));
    const char* p = raw->data();
    for (int64_t i = 0; i < count; ++i, p += width) {
      result.data[i] = DecodeRaw(t.data_type(), p);
    }
  } else {
    TILEC_RETURN_IF_ERROR(DecodeTyped(t, what, count, &result.data));
  }
  *out = std::move(result);
  return Status::Ok();
}

Status ParseOnnxTensorFile(std::string_view bytes, const std::string& name,
                           TensorProto* tensor) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !tensor->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return Status::BadInput(name + ": not a serialized ONNX TensorProto");
  }
  return Status::Ok();
}

}  // namespace tilec::passes
