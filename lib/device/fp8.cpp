// The CPU twin of block FP8 quantization (fp8.hpp says what the bits are).
#include "device/fp8.hpp"

#include <algorithm>

namespace shardsync {

void cpu_quantize_fp8_blocks(const uint16_t* bf16, int64_t src_ld, int64_t rows, int64_t cols,
                             uint8_t* codes, int64_t dst_ld, float* scale_inv, int64_t scale_ld) {
  for (int64_t r0 = 0; r0 < rows; r0 += kFp8Block)
    for (int64_t c0 = 0; c0 < cols; c0 += kFp8Block) {
      const int64_t r1 = std::min(rows, r0 + kFp8Block), c1 = std::min(cols, c0 + kFp8Block);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          amax = std::max(amax, fp8_finite_abs(bf16_to_float(bf16[r * src_ld + c])));
      const float s = fp8_scale_inv(amax);
      scale_inv[(r0 / kFp8Block) * scale_ld + c0 / kFp8Block] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          codes[r * dst_ld + c] = fp8_quantize(bf16_to_float(bf16[r * src_ld + c]), s);
    }
}

}  // namespace shardsync
