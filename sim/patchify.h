// Patch extraction of an image (OpKind::Patchify): the one definition the
// reference executor runs and the simulator's host applies when an input
// binding asks for it (HostBinding.patch: the host writes the patches of an
// image input, docs/import-onnx.md).

#ifndef TILEC_SIM_PATCHIFY_H_
#define TILEC_SIM_PATCHIFY_H_

#include <cstdint>
#include <span>
#include <vector>

namespace tilec::kernels {

// [B, C, H, W] -> [B * floor(H/p) * floor(W/p), C*p*p]. The caller checks
// rank 4 and 0 < p <= H, W (formats/op_shapes.h).
std::vector<int64_t> PatchifiedShape(std::span<const int64_t> image_shape,
                                     int64_t p);

// Row b*T + py*(W/p) + px holds patch (py, px) of image b, its columns in
// (c, ky, kx) order: the flattening of a conv weight [out, C, p, p]. Pixels
// past the last whole patch are dropped, as a stride = kernel convolution
// drops them. `image` holds exactly the shape's elements.
std::vector<float> Patchify(std::span<const float> image,
                            std::span<const int64_t> image_shape, int64_t p);

}  // namespace tilec::kernels

#endif  // TILEC_SIM_PATCHIFY_H_
