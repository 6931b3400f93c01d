// fp8_kernels.cuh: block FP8 quantization on the GPU, the device side of
// Device::quantize_fp8; its CPU twin is cpu_quantize_fp8_blocks (lib/device/fp8.cpp) and the
// bits are fp8.hpp's. One thread block of 256 threads per 128 x 128 quantization block: the
// block's amax, then its codes and scale_inv. Full blocks whose rows allow 16-byte loads and
// 8-byte stores go through registers (each thread holds 8 runs of 8 elements): amax on the
// bf16 bits as integers, two elements an instruction (a finite magnitude's bits order as its
// value), the quotients by the block's reciprocal and one correction (exactly x / s rounded
// once, for finite values and scales far from fp32's limits), and the codes by the hardware's
// e4m3x2 conversion (round to nearest even, saturating: fp8.hpp's rules but NaN's sign, put
// back here). The rest (edges, odd strides)
// element by element with fp8.hpp's functions, reading twice. Kernels.Fp8QuantizeMatchesCpuTwin
// holds both paths to the twin bit for bit.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "copy_kernels.cuh"  // find_job
#include "device/fp8.hpp"

namespace shardsync {

namespace kernels {

// A QuantJob in the kernel's form, and its first quantization block in the launch.
struct Fp8Job {
  const uint16_t* src;
  uint8_t* dst;
  float* scale_inv;
  int64_t src_ld, dst_ld, scale_ld, rows, cols;
  int64_t blocks_c;  // quantization blocks along a row
};

namespace {

// Two bf16 (the halves of w) quantized under scale_inv s: their codes, low half's first.
__device__ __forceinline__ uint32_t fp8_quantize_pair(uint32_t w, float s) {
  const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
  uint32_t code = __nv_cvt_float2_to_fp8x2(make_float2(lo / s, hi / s), __NV_SATFINITE, __NV_E4M3);
  // The conversion writes 0x7f for every NaN; fp8.hpp keeps the sign (0xff when negative).
  const uint32_t nan = __vcmpgtu2(w & 0x7fff7fffu, 0x7f807f80u);
  if (nan != 0u) {
    if (nan & 0xffffu) code = (code & 0xff00u) | ((w >> 8) & 0x80u) | kE4m3NanCode;
    if (nan >> 16) code = (code & 0x00ffu) | ((((w >> 24) & 0x80u) | kE4m3NanCode) << 8);
  }
  return code;
}

// x / s rounded once, by the reciprocal y = 1 / s (correctly rounded) and one correction:
// q0 = x * y, e = x - q0 * s (exact, by fma), q = q0 + e * y rounds to the correctly rounded
// quotient (Markstein's theorem, in the absence of overflow and underflow: callers keep
// 2^-60 <= s <= 2^60 and x finite). The sign is x's (a -0 would lose it in the sums).
__device__ __forceinline__ float div_by_reciprocal(float x, float s, float y) {
  const float q0 = x * y;
  const float q = fmaf(fmaf(-q0, s, x), y, q0);
  return __uint_as_float((__float_as_uint(q) & 0x7fffffffu) | (__float_as_uint(x) & 0x80000000u));
}

// fp8_quantize_pair for finite values under a scale in [2^-60, 2^60]: three instructions a
// quotient instead of a full division.
__device__ __forceinline__ uint32_t fp8_quantize_pair_finite(uint32_t w, float s, float y) {
  const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
  return __nv_cvt_float2_to_fp8x2(make_float2(div_by_reciprocal(lo, s, y), div_by_reciprocal(hi, s, y)),
                                  __NV_SATFINITE, __NV_E4M3);
}

// The finite magnitudes of two bf16 (the halves of w) folded into m, as bits per half (a
// finite magnitude's bits order as its value); a half that is Inf or NaN sets *nonfinite.
__device__ __forceinline__ uint32_t fp8_amax_pair(uint32_t m, uint32_t w, uint32_t* nonfinite) {
  const uint32_t a = w & 0x7fff7fffu, nf = __vcmpgeu2(a, 0x7f807f80u);
  *nonfinite |= nf;
  return __vmaxu2(m, a & ~nf);  // Inf and NaN count as 0
}

// The block's largest value of v (every thread gets it).
__device__ __forceinline__ uint32_t block_max_u32(uint32_t v, uint32_t* shared) {
  v = __reduce_max_sync(0xffffffffu, v);
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? shared[lane] : 0u;
  return __reduce_max_sync(0xffffffffu, v);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;  // every thread: the block's max (values are >= 0)
}

// Quantization block q (row-major) of job j, by the whole thread block.
__device__ __forceinline__ void fp8_quantize_block(const Fp8Job& j, int64_t q, float* shared) {
  const int64_t br = q / j.blocks_c, bc = q - br * j.blocks_c;
  const int64_t r0 = br * kFp8Block, c0 = bc * kFp8Block;
  const int64_t nr = min(kFp8Block, j.rows - r0), nc = min(kFp8Block, j.cols - c0);
  const uint16_t* src = j.src + r0 * j.src_ld + c0;
  uint8_t* dst = j.dst + r0 * j.dst_ld + c0;
  const bool fast = nr == kFp8Block && nc == kFp8Block && j.src_ld % 8 == 0 && j.dst_ld % 8 == 0 &&
                    reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % 8 == 0;
  float amax = 0.0f, s;
  if (fast) {
    const int tx = int(threadIdx.x) & 15,
              ty = int(threadIdx.x) >> 4;  // 8 elements of row ty + 16 k
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = *reinterpret_cast<const uint4*>(src + (ty + 16 * k) * j.src_ld + 8 * tx);
    uint32_t m = 0u, nonfinite = 0u;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      m = fp8_amax_pair(m, v[k].x, &nonfinite);
      m = fp8_amax_pair(m, v[k].y, &nonfinite);
      m = fp8_amax_pair(m, v[k].z, &nonfinite);
      m = fp8_amax_pair(m, v[k].w, &nonfinite);
    }
    const uint32_t bits = block_max_u32(max(m & 0xffffu, m >> 16), reinterpret_cast<uint32_t*>(shared));
    s = fp8_scale_inv(bf16_to_float(uint16_t(bits)));
    // The quotient by the reciprocal where it is exact (finite values, a scale far from fp32's
    // limits: every real weight); a full division otherwise.
    const float y = 1.0f / s;
    const bool quick = nonfinite == 0u && s >= 0x1p-60f && s <= 0x1p60f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      uint32_t out0, out1;
      if (quick) {
        out0 = fp8_quantize_pair_finite(v[k].x, s, y) | (fp8_quantize_pair_finite(v[k].y, s, y) << 16);
        out1 = fp8_quantize_pair_finite(v[k].z, s, y) | (fp8_quantize_pair_finite(v[k].w, s, y) << 16);
      } else {
        out0 = fp8_quantize_pair(v[k].x, s) | (fp8_quantize_pair(v[k].y, s) << 16);
        out1 = fp8_quantize_pair(v[k].z, s) | (fp8_quantize_pair(v[k].w, s) << 16);
      }
      *reinterpret_cast<uint2*>(dst + (ty + 16 * k) * j.dst_ld + 8 * tx) = make_uint2(out0, out1);
    }
  } else {
    for (int64_t i = threadIdx.x; i < nr * nc; i += blockDim.x) {
      const int64_t r = i / nc, c = i - r * nc;
      amax = fmaxf(amax, fp8_finite_abs(bf16_to_float(src[r * j.src_ld + c])));
    }
    s = fp8_scale_inv(block_max(amax, shared));
    for (int64_t i = threadIdx.x; i < nr * nc; i += blockDim.x) {
      const int64_t r = i / nc, c = i - r * nc;
      dst[r * j.dst_ld + c] = fp8_quantize(bf16_to_float(src[r * j.src_ld + c]), s);
    }
  }
  if (threadIdx.x == 0) j.scale_inv[br * j.scale_ld + bc] = s;
}

// Blocks b = 0.. of the launch: job j owns first[j] .. first[j + 1] - 1, row-major.
// At most 64 registers a thread: four thread blocks (128 KB of loads) in flight per SM, not three.
__global__ void __launch_bounds__(256, 4) fp8_quantize_kernel(const Fp8Job* jobs, const int64_t* first, int njobs) {
  __shared__ float shared[32];
  const int64_t b = blockIdx.x;
  const int lo = find_job(first, njobs, b);
  fp8_quantize_block(jobs[lo], b - first[lo], shared);
}

// Up to kFp8InlineJobs jobs passed in the launch's parameters: no upload of a job table
// before the kernel (a stream-ordered host-to-device copy, microseconds a launch).
constexpr int kFp8InlineJobs = 32;
struct Fp8Launch {
  Fp8Job jobs[kFp8InlineJobs];
  int64_t first[kFp8InlineJobs];
  int njobs;
};
static_assert(sizeof(Fp8Launch) <= 4000, "kernel parameters are at most 4 KB");

__global__ void __launch_bounds__(256, 4) fp8_quantize_inline_kernel(const __grid_constant__ Fp8Launch l) {
  __shared__ float shared[32];
  const int64_t b = blockIdx.x;
  int lo = 0, hi = l.njobs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (l.first[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  fp8_quantize_block(l.jobs[lo], b - l.first[lo], shared);
}

}  // namespace

}  // namespace kernels

}  // namespace shardsync
