// fp8_kernels.cuh: block FP8 quantization on the GPU, the device side of
// Device::quantize_fp8; its CPU twin is cpu_quantize_fp8_blocks (lib/device/fp8.cpp) and the
// bits are fp8.hpp's, computed by the same functions. One thread block of 256 threads per
// 128 x 128 quantization block: the block's amax, then its codes and scale_inv. Full blocks
// whose rows allow 16-byte loads and 8-byte stores go through registers (each thread holds
// 8 runs of 8 elements); the rest (edges, odd strides) element by element, reading twice.
#pragma once

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

__device__ __forceinline__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x >> 5) ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;  // every thread: the block's max (values are >= 0)
}

// Blocks b = 0.. of the launch: job j owns first[j] .. first[j + 1] - 1, row-major.
__global__ void fp8_quantize_kernel(const Fp8Job* jobs, const int64_t* first, int njobs) {
  __shared__ float shared[32];
  const int64_t b = blockIdx.x;
  const int lo = find_job(first, njobs, b);
  const Fp8Job j = jobs[lo];
  const int64_t q = b - first[lo], br = q / j.blocks_c, bc = q - br * j.blocks_c;
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
    for (int k = 0; k < 8; ++k) {
      v[k] = *reinterpret_cast<const uint4*>(src + (ty + 16 * k) * j.src_ld + 8 * tx);
      const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        amax = fmaxf(amax, fp8_finite_abs(bf16_to_float(uint16_t(w[e]))));
        amax = fmaxf(amax, fp8_finite_abs(bf16_to_float(uint16_t(w[e] >> 16))));
      }
    }
    s = fp8_scale_inv(block_max(amax, shared));
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t w[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
      uint32_t out[2] = {0, 0};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t lo_code = fp8_quantize(bf16_to_float(uint16_t(w[e])), s);
        const uint32_t hi_code = fp8_quantize(bf16_to_float(uint16_t(w[e] >> 16)), s);
        out[e / 2] |= (lo_code | (hi_code << 8)) << (16 * (e % 2));
      }
      *reinterpret_cast<uint2*>(dst + (ty + 16 * k) * j.dst_ld + 8 * tx) =
          make_uint2(out[0], out[1]);
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

}  // namespace

}  // namespace kernels

}  // namespace shardsync
