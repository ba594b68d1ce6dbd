#include "sim/npy.h"

#include <cctype>
#include <cstring>

#include "formats/ir.h"
#include "kernels/numerics.h"
#include "sim/tensor_data.h"

namespace tilec::kernels {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// NumPy aligns the data to 64 bytes so that it can be memory-mapped.
constexpr size_t kAlignment = 64;

std::string ShapeTuple(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  // A 1-tuple needs its comma in Python.
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// A tokenizer and parser for the header: a Python dict literal with string
// keys whose values are strings, True/False or tuples of integers. That is
// all NumPy writes; anything else is refused rather than guessed at.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name)
      : text_(text), name_(name) {}

  Status Parse(NpyArray* array) {
    bool have_descr = false, have_order = false, have_shape = false;
    TILEC_RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') {
        ++pos_;
        break;
      }
      std::string key;
      TILEC_RETURN_IF_ERROR(String(&key));
      TILEC_RETURN_IF_ERROR(Expect(':'));
      if (key == "descr") {
        TILEC_RETURN_IF_ERROR(String(&array->descr));
        have_descr = true;
      } else if (key == "fortran_order") {
        TILEC_RETURN_IF_ERROR(Bool(&array->fortran_order));
        have_order = true;
      } else if (key == "shape") {
        TILEC_RETURN_IF_ERROR(Tuple(&array->shape));
        have_shape = true;
      } else {
        return Error("unexpected header key '" + key + "'");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        return Error("expected ',' or '}' in the header");
      }
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing text after the header");
    if (!have_descr || !have_order || !have_shape) {
      return Error(
          "the header lacks one of 'descr', 'fortran_order', "
          "'shape'");
    }
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return Status::BadInput(name_ + ": not a valid .npy file: " + what);
  }
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  Status Expect(char c) {
    SkipSpace();
    if (Peek() != c) {
      return Error(std::string("expected '") + c + "' in the header");
    }
    ++pos_;
    return Status::Ok();
  }
  Status String(std::string* out) {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return Error("unterminated string");
    *out = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return Status::Ok();
  }
  Status Bool(bool* out) {
    SkipSpace();
    if (text_.substr(pos_, 4) == "True") {
      *out = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "False") {
      *out = false;
      pos_ += 5;
    } else {
      return Error("expected True or False");
    }
    return Status::Ok();
  }
  Status Tuple(std::vector<int64_t>* out) {
    out->clear();
    TILEC_RETURN_IF_ERROR(Expect('('));
    while (true) {
      SkipSpace();
      if (Peek() == ')') {
        ++pos_;
        return Status::Ok();
      }
      int64_t v = 0;
      size_t digits = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        if (v > (int64_t{1} << 48)) return Error("dimension too large");
        v = v * 10 + (Peek() - '0');
        ++pos_;
        ++digits;
      }
      if (digits == 0) return Error("expected a dimension in 'shape'");
      out->push_back(v);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != ')') {
        return Error("expected ',' or ')' in 'shape'");
      }
    }
  }

  std::string_view text_;
  const std::string& name_;
  size_t pos_ = 0;
};

uint32_t GetLe(std::string_view bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i]))
         << (8 * i);
  }
  return v;
}

}  // namespace

std::string_view NpyDescrForStored(fb::DType dtype) {
  switch (dtype) {
    case fb::DType::F16:
      return "<f2";
    case fb::DType::BF16:
      return "<u2";
    case fb::DType::FP8E4M3:
    case fb::DType::FP8E5M2:
      return "|u1";
    case fb::DType::F32:
      break;
  }
  return kNpyFloat32;
}

int NpyDescrBytes(std::string_view descr) {
  if (descr == "<f4") return 4;
  if (descr == "<f2" || descr == "<u2") return 2;
  if (descr == "|u1") return 1;
  return 0;
}

Status EncodeNpy(std::string_view descr, const std::vector<int64_t>& shape,
                 std::string_view data, std::string* file) {
  const int width = NpyDescrBytes(descr);
  if (width == 0) {
    return Status::Internal("npy: unsupported descriptor '" +
                            std::string(descr) + "'");
  }
  size_t count = 0;
  TILEC_RETURN_IF_ERROR(ShapeElements(shape, "npy array", &count));
  if (data.size() != count * width) {
    return Status::Internal("npy: " + std::to_string(data.size()) +
                            " data bytes for shape " + ShapeTuple(shape) +
                            " of '" + std::string(descr) + "'");
  }
  std::string header =
      "{'descr': '" + std::string(descr) +
      "', 'fortran_order': False, 'shape': " + ShapeTuple(shape) + ", }";
  // Magic, 2 version bytes, 2 length bytes, header, '\n'.
  const size_t unpadded = kMagicBytes + 4 + header.size() + 1;
  header.append((kAlignment - unpadded % kAlignment) % kAlignment, ' ');
  header += '\n';
  if (header.size() > 0xFFFF) {
    return Status::Internal("npy: header too long for version 1.0");
  }
  file->clear();
  file->reserve(kMagicBytes + 4 + header.size() + data.size());
  file->append(kMagic, kMagicBytes);
  file->push_back('\x01');  // major version
  file->push_back('\x00');  // minor version
  file->push_back(static_cast<char>(header.size() & 0xFF));
  file->push_back(static_cast<char>(header.size() >> 8));
  file->append(header);
  file->append(data);
  return Status::Ok();
}

Status ParseNpy(std::string_view file, const std::string& name,
                NpyArray* array) {
  auto bad = [&name](const std::string& what) {
    return Status::BadInput(name + ": not a valid .npy file: " + what);
  };
  if (file.size() < kMagicBytes + 4 ||
      file.substr(0, kMagicBytes) != std::string_view(kMagic, kMagicBytes)) {
    return bad("missing the \\x93NUMPY magic");
  }
  const int major = static_cast<unsigned char>(file[kMagicBytes]);
  size_t header_begin = 0, header_len = 0;
  if (major == 1) {
    header_begin = kMagicBytes + 4;
    header_len = GetLe(file, kMagicBytes + 2, 2);
  } else if (major == 2 || major == 3) {
    if (file.size() < kMagicBytes + 6) return bad("truncated header length");
    header_begin = kMagicBytes + 6;
    header_len = GetLe(file, kMagicBytes + 2, 4);
  } else {
    return bad("unsupported format version " + std::to_string(major));
  }
  if (header_len > file.size() - header_begin) return bad("truncated header");
  NpyArray parsed;
  TILEC_RETURN_IF_ERROR(
      HeaderParser(file.substr(header_begin, header_len), name).Parse(&parsed));
  const int width = NpyDescrBytes(parsed.descr);
  if (width == 0) {
    return bad("unsupported dtype '" + parsed.descr +
               "' (expected <f4, <f2, <u2 or |u1)");
  }
  if (parsed.fortran_order) return bad("Fortran order is not supported");
  size_t count = 0;
  TILEC_RETURN_IF_ERROR(ShapeElements(parsed.shape, name, &count));
  const std::string_view data = file.substr(header_begin + header_len);
  if (data.size() != count * width) {
    return bad("data holds " + std::to_string(data.size()) + " bytes, shape " +
               ShapeTuple(parsed.shape) + " needs " +
               std::to_string(count * width));
  }
  parsed.data = std::string(data);
  *array = std::move(parsed);
  return Status::Ok();
}

Status WriteNpy(const std::string& path, std::string_view descr,
                const std::vector<int64_t>& shape, std::string_view data) {
  std::string file;
  TILEC_RETURN_IF_ERROR(EncodeNpy(descr, shape, data, &file).WithContext(path));
  return ir::WriteFileAtomically(path, file);
}

Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape,
                   std::span<const float> values) {
  return WriteNpy(path, kNpyFloat32, shape,
                  EncodeStored(fb::DType::F32, 0, values));
}

Status WriteNpyStored(const std::string& path,
                      const std::vector<int64_t>& shape, fb::DType dtype,
                      int fp8_scale_exp, std::span<const float> values) {
  return WriteNpy(path, NpyDescrForStored(dtype), shape,
                  EncodeStored(dtype, fp8_scale_exp, values));
}

Status ReadNpyF32(const std::string& path, std::vector<int64_t>* shape,
                  std::vector<float>* values) {
  std::string file;
  TILEC_RETURN_IF_ERROR(ir::ReadFile(path, &file));
  const std::string name = ir::DisplayName(path);
  NpyArray array;
  TILEC_RETURN_IF_ERROR(ParseNpy(file, name, &array));
  if (array.descr != kNpyFloat32) {
    return Status::BadInput(name + ": dtype '" + array.descr +
                            "', expected float32 '<f4'");
  }
  *values = NpyFloat32Values(array);
  *shape = std::move(array.shape);
  return Status::Ok();
}

std::vector<float> NpyFloat32Values(const NpyArray& array) {
  std::vector<float> values(array.data.size() / sizeof(float));
  if (!values.empty()) {
    LoadArrayAs(DType::kF32,
                std::span<const uint8_t>(
                    reinterpret_cast<const uint8_t*>(array.data.data()),
                    array.data.size()),
                0, values);
  }
  return values;
}

}  // namespace tilec::kernels
