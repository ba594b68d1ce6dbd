#include "sim/patchify.h"

#include <algorithm>

namespace tilec::kernels {

std::vector<int64_t> PatchifiedShape(std::span<const int64_t> image_shape,
                                     int64_t p) {
  return {image_shape[0] * (image_shape[2] / p) * (image_shape[3] / p),
          image_shape[1] * p * p};
}

std::vector<float> Patchify(std::span<const float> image,
                            std::span<const int64_t> image_shape, int64_t p) {
  const int64_t batch = image_shape[0], channels = image_shape[1],
                height = image_shape[2], width = image_shape[3];
  const int64_t grid_w = width / p, tokens = (height / p) * grid_w;  // floor
  std::vector<float> out(
      static_cast<size_t>(batch * tokens * channels * p * p));
  float* dst = out.data();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t token = 0; token < tokens; ++token) {
      const int64_t y0 = (token / grid_w) * p, x0 = (token % grid_w) * p;
      for (int64_t c = 0; c < channels; ++c) {
        const float* plane = image.data() + (b * channels + c) * height * width;
        for (int64_t ky = 0; ky < p; ++ky) {
          dst = std::copy_n(plane + (y0 + ky) * width + x0, p, dst);
        }
      }
    }
  }
  return out;
}

}  // namespace tilec::kernels
