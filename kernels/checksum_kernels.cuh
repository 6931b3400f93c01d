// checksum_kernels.cuh: the device side of Device::checksum (--checksum): each job's sum of
// checksum_term(tensor, element, bits) over its copy descriptor's positions. The CPU twin is
// cpu_checksum (lib/device/cpu_device.cpp); tests/kernels compare the two.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "device/synth_hash.hpp"
#include "strided.cuh"

namespace shardsync {
namespace kernels {

struct HashDevJob {
  const uint8_t* data;
  int64_t src_offset, dst_offset, index_shift;
  int64_t inner, inner_src_stride, inner_dst_stride;
  int64_t runs;
  int64_t size[kMaxOuter], src_stride[kMaxOuter], dst_stride[kMaxOuter];
  int32_t outer, elem_bytes, tensor, at_src;
};

inline constexpr int kHashThreads = 256;
inline constexpr int64_t kHashTileElems = int64_t(kHashThreads) * 32;

// One block per tile of kHashTileElems elements of one job (first_tile: each job's first tile,
// ascending): a block sums its terms and adds the sum to its job's (addition mod 2^64 is
// associative and commutative, so the order of blocks and threads does not matter).
__global__ void checksum_kernel(const HashDevJob* jobs, const int64_t* first_tile, int n, unsigned long long* sums) {
  const int64_t tile = blockIdx.x;
  int lo = 0, hi = n - 1;  // the last job whose first tile is <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first_tile[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  const HashDevJob& j = jobs[lo];
  const int64_t total = j.runs * j.inner;
  const int64_t begin = (tile - first_tile[lo]) * kHashTileElems;
  const int64_t end = begin + kHashTileElems < total ? begin + kHashTileElems : total;
  unsigned long long acc = 0;
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    int64_t r = e / j.inner;
    const int64_t i = e - r * j.inner;
    int64_t s = j.src_offset, d = j.dst_offset;
    for (int k = j.outer - 1; k >= 0; --k) {
      const int64_t sz = j.size[k];
      const int64_t at = r % sz;
      r /= sz;
      s += at * j.src_stride[k];
      d += at * j.dst_stride[k];
    }
    s += i * j.inner_src_stride;
    d += i * j.inner_dst_stride;
    const uint8_t* p = j.data + (j.at_src ? s : d) * j.elem_bytes;
    uint64_t bits;
    switch (j.elem_bytes) {
      case 1: bits = *p; break;
      case 2: bits = *reinterpret_cast<const uint16_t*>(p); break;
      case 4: bits = *reinterpret_cast<const uint32_t*>(p); break;
      default: bits = *reinterpret_cast<const uint64_t*>(p); break;
    }
    acc += checksum_term(j.tensor, s + j.index_shift, bits);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  __shared__ unsigned long long warp_sums[kHashThreads / 32];
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
  __syncthreads();
  if (threadIdx.x < 32) {
    acc = threadIdx.x < kHashThreads / 32 ? warp_sums[threadIdx.x] : 0ull;
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x == 0 && end > begin) atomicAdd(&sums[lo], acc);
  }
}

}  // namespace kernels
}  // namespace shardsync
