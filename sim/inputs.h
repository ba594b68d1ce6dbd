// Graph inputs from a directory of .npy files: how `run-reference
// --inputs=DIR` and `simulate-device --inputs=DIR` run a user's own data
// (an image, an ONNX test case) instead of the inputs' recorded seeds; and
// expected outputs (`simulate-device --expect=DIR`, e.g. PyTorch's).
//
// The directory holds exactly one file per value with role Input, named
// InputFileName(value): the base name `--dump-tensors` and `run-reference
// --out_dir` give the value's float32 file (reference.h, WriteTensorFiles),
// i.e. "<SafeFileName(name)>.npy" ("value<id>.npy" for an unnamed value).
// Each file is C-order in the value's shape (tilec's rows) or the shape the
// model declares for it (Value.declared_shape: the ONNX graph's, e.g.
// [3,4,5] for the rows [12,5]), and one of
//   '<f4'                 float32, rounded to the value's dtype as a device
//                         store does: round to nearest even; F16/BF16
//                         overflow to infinity; FP8 scaled by the value's
//                         2^fp8_scale_exp and saturated to the finite range;
//   the value's own codes '<f2' (F16, numpy float16), '<u2' (BF16 bits),
//                         '|u1' (FP8 codes, decoded with the value's scale),
//                         taken exactly.
// A missing file, a file that names no input (any other entry of the
// directory, dot files included), a shape or dtype that does not match:
// BadInput (exit 2) naming the file.

#ifndef TILEC_SIM_INPUTS_H_
#define TILEC_SIM_INPUTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/status.h"
#include "formats/tilec_generated.h"

namespace tilec::kernels {

// "<SafeFileName(name)>.npy", or "value<id>.npy" for an unnamed value.
std::string InputFileName(const fb::ValueT& value);

// The contents of every Input value of `module`, by value id, decoded to
// F32 on the value's stored grid (ready for ReferenceOptions::provided).
Status LoadInputs(const fb::ModuleT& module, const std::string& dir,
                  std::map<uint32_t, std::vector<float>>* inputs);

// The expected contents of every Output value, by value id: one file per
// output named as above, in either shape, float32 only and not rounded
// (they are the truth to measure against). Missing, extra, misshapen or
// non-float32 files: BadInput naming the file.
Status LoadExpectedOutputs(const fb::ModuleT& module, const std::string& dir,
                           std::map<uint32_t, std::vector<float>>* outputs);

}  // namespace tilec::kernels

#endif  // TILEC_SIM_INPUTS_H_
