// NumPy .npy files (format version 1.0): how the reference and the
// simulator hand tensors to people and scripts (numpy.load reads them).
//
// Written arrays are C-order, little-endian, with one of these descriptors:
//   '<f4'  float32 (the decoded values)
//   '<f2'  the raw codes of an F16 tensor (numpy float16, bit-identical)
//   '<u2'  the raw codes of a BF16 tensor (numpy has no bfloat16)
//   '|u1'  the raw codes of an FP8 tensor (scaled: value = decode(code) *
//          2^-fp8_scale_exp)
// Files are written atomically (ir::WriteFileAtomically). Errors are
// tilec::Status (formats/status.h) naming the file.

#ifndef TILEC_SIM_NPY_H_
#define TILEC_SIM_NPY_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::kernels {

inline constexpr std::string_view kNpyFloat32 = "<f4";

// An array as stored in a .npy file: `data` holds the raw element bytes in
// the file's byte order, row-major.
struct NpyArray {
  std::string descr;  // e.g. "<f4"
  bool fortran_order = false;
  std::vector<int64_t> shape;  // empty for a 0-d array
  std::string data;
};

// The descriptor of a stored dtype's raw codes ("<f4", "<f2", "<u2", "|u1").
std::string_view NpyDescrForStored(fb::DType dtype);
// Bytes per element of a descriptor this library writes or reads (4, 2, 1),
// or 0 for any other descriptor.
int NpyDescrBytes(std::string_view descr);

// The whole file: magic, version 1.0, header padded with spaces and ended by
// '\n' so the data starts at a multiple of 64 bytes, then `data`. `data` must
// hold exactly product(shape) elements of `descr` (an Internal error
// otherwise).
Status EncodeNpy(std::string_view descr, const std::vector<int64_t>& shape,
                 std::string_view data, std::string* file);

// Parses a .npy file of version 1.0, 2.0 or 3.0 whose descriptor is one of
// the four above, C-order; checks that the data holds exactly the shape's
// elements. `name` is used in messages.
Status ParseNpy(std::string_view file, const std::string& name,
                NpyArray* array);

// Writers: `path` is written atomically.
Status WriteNpy(const std::string& path, std::string_view descr,
                const std::vector<int64_t>& shape, std::string_view data);
Status WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape,
                   std::span<const float> values);
// The raw stored codes of `values` (already on the dtype's grid, or rounded
// here) in `dtype` with its scale (FP8 only).
Status WriteNpyStored(const std::string& path,
                      const std::vector<int64_t>& shape, fb::DType dtype,
                      int fp8_scale_exp, std::span<const float> values);

// The elements of a parsed float32 ('<f4') array.
std::vector<float> NpyFloat32Values(const NpyArray& array);

// Reads a float32 ('<f4') .npy file; any other descriptor is BadInput.
Status ReadNpyF32(const std::string& path, std::vector<int64_t>* shape,
                  std::vector<float>* values);

}  // namespace tilec::kernels

#endif  // TILEC_SIM_NPY_H_
