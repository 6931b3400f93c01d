// fp8.hpp: the one definition of block FP8 in shardsync (issue 20), shared by host code and
// CUDA kernels like synth_hash.hpp: float8_e4m3fn values with one fp32 scale per block of
// 128 x 128 elements of a 2-D weight, as vLLM's block-FP8 linear and MoE methods and the
// FP8 checkpoints of DeepSeek-V3 / Kimi K2 / Qwen3 store them (`weight` e4m3fn,
// `weight_scale_inv` fp32, dequantized as weight * weight_scale_inv).
//
// The bits, for a block of bf16 values x:
//   amax       the largest |x| over the block's finite values, in fp32 (exact: bf16 -> fp32);
//   scale_inv  amax / 448 in fp32, rounded to nearest; a block with amax 0 (all zeros, or
//              nothing finite) gets scale_inv 1 and codes 0, so it dequantizes to exact zeros;
//   code       x / scale_inv in fp32 (rounded to nearest), clamped to [-448, 448], then
//              rounded to the nearest e4m3fn value, ties to an even mantissa (subnormals
//              included: 2^-9 apart below 2^-6); Inf saturates to +-448 with its sign, NaN
//              becomes NaN (0x7f, or 0xff when negative).
// This is vLLM's per-block quantization (y_s = amax / fp8_max; y_q = clamp(y / y_s)) with
// the zero-block and non-finite cases written down; PyTorch's float8_e4m3fn conversion of the
// clamped quotient gives the same codes.
#pragma once

#include <cstdint>
#include <cstring>

#include "device/synth_hash.hpp"  // SHARDSYNC_HD, bits_to_float

namespace shardsync {

inline constexpr int64_t kFp8Block = 128;      // elements per block side
inline constexpr float kE4m3Max = 448.0f;      // the largest finite e4m3fn value
inline constexpr uint8_t kE4m3MaxCode = 0x7e;  // its code (S.1111.110)
inline constexpr uint8_t kE4m3NanCode = 0x7f;  // NaN (S.1111.111); e4m3fn has no infinities

SHARDSYNC_HD float bf16_to_float(uint16_t b) {
  return bits_to_float(uint32_t(b) << 16);
}

// The value of an e4m3fn code (NaN for 0x7f and 0xff).
SHARDSYNC_HD float e4m3_to_float(uint8_t c) {
  const uint32_t sign = uint32_t(c >> 7) << 31, e = (c >> 3) & 15u, m = c & 7u;
  if (e == 15 && m == 7) return bits_to_float(sign | 0x7fc00000u);
  // Normal: (8 + m) * 2^(e - 10); subnormal (e = 0): m * 2^-9. Both exact in fp32.
  const float mag =
      e == 0 ? float(m) * (1.0f / 512.0f) : float(8 + m) * bits_to_float((e - 10 + 127) << 23);
  return bits_to_float(float_to_bits(mag) | sign);
}

// fp32 -> e4m3fn: saturating, round to nearest, ties to even (the rules above), by integer
// arithmetic on the bits, so host and device agree whatever their floating-point modes.
SHARDSYNC_HD uint8_t e4m3_from_float(float f) {
  const uint32_t u = float_to_bits(f);
  const uint8_t sign = uint8_t((u >> 31) << 7);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint8_t(sign | kE4m3NanCode);   // NaN
  if (a >= 0x43e00000u) return uint8_t(sign | kE4m3MaxCode);  // >= 448, Inf included
  const int32_t e = int32_t(a >> 23) - 127;                   // unbiased fp32 exponent
  uint32_t code;
  if (e < -6) {
    // Below the smallest normal 2^-6: a multiple of 2^-9, i.e. a * 2^9 rounded to an integer
    // (8 is 2^-6, code 8). The 24-bit significand over 2^shift is a * 2^9; at shift 25 or
    // more it is under a half, and fp32 subnormals are far under it.
    if (a < 0x00800000u) return sign;
    const uint32_t shift = uint32_t(14 - e);
    if (shift >= 25) return sign;
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;
    const uint32_t keep = sig >> shift, rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
    code = keep + ((rem > half || (rem == half && (keep & 1u))) ? 1u : 0u);
  } else {
    const uint32_t keep = (a >> 20) & 7u, rem = a & 0xfffffu, half = 0x80000u;
    code = (uint32_t(e + 7) << 3) | keep;
    code +=
        (rem > half || (rem == half && (keep & 1u))) ? 1u : 0u;  // a carry moves the exponent up
    if (code > kE4m3MaxCode) code = kE4m3MaxCode;
  }
  return uint8_t(sign | code);
}

// scale_inv of a block whose largest finite magnitude is amax (the rules above).
SHARDSYNC_HD float fp8_scale_inv(float amax) {
  return amax > 0.0f ? amax / kE4m3Max : 1.0f;
}

// One element's code under its block's scale_inv. A NaN is converted before the division:
// GPUs divide it into the canonical NaN, losing its sign.
SHARDSYNC_HD uint8_t fp8_quantize(float x, float scale_inv) {
  if ((float_to_bits(x) & 0x7fffffffu) > 0x7f800000u) return e4m3_from_float(x);
  return e4m3_from_float(x / scale_inv);  // saturates: the clamp to +-448
}

// A finite magnitude or 0 (what a block's amax takes in).
SHARDSYNC_HD float fp8_finite_abs(float x) {
  const uint32_t a = float_to_bits(x) & 0x7fffffffu;
  return a < 0x7f800000u ? bits_to_float(a) : 0.0f;
}

// The CPU twin: a bf16 matrix [rows, cols] (rows src_ld elements apart) quantized in blocks
// of 128 x 128 (the last block of a row or column may be smaller) into `codes` [rows, cols]
// (rows dst_ld bytes apart) and `scale_inv` [ceil(rows / 128), ceil(cols / 128)] (block rows
// scale_ld floats apart).
void cpu_quantize_fp8_blocks(const uint16_t* bf16, int64_t src_ld, int64_t rows, int64_t cols,
                             uint8_t* codes, int64_t dst_ld, float* scale_inv, int64_t scale_ld);
// The same, dense: src_ld = dst_ld = cols, scale_ld = ceil(cols / 128).
inline void cpu_quantize_fp8_blocks(const uint16_t* bf16, int64_t rows, int64_t cols,
                                    uint8_t* codes, float* scale_inv) {
  cpu_quantize_fp8_blocks(bf16, cols, rows, cols, codes, cols, scale_inv,
                          (cols + kFp8Block - 1) / kFp8Block);
}

}  // namespace shardsync
