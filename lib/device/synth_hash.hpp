// The synthetic weight value function, shared by host code and CUDA kernels.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SHARDSYNC_HD __host__ __device__ __forceinline__
#else
#define SHARDSYNC_HD inline
#endif

namespace shardsync {

SHARDSYNC_HD uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// One seed per (HF tensor, version).
SHARDSYNC_HD uint64_t synth_seed(int32_t hf, uint64_t version) {
  return mix64((uint64_t(uint32_t(hf)) << 32) ^ (version * 0x9e3779b97f4a7c15ULL) ^ 0x5eed5eedULL);
}

// 32 bits per element from 32-bit arithmetic (murmur3's finalizer), so fills and checks
// vectorize on CPUs and run at memory speed on GPUs.
SHARDSYNC_HD uint32_t synth_bits(uint64_t seed, int64_t elem) {
  uint32_t h = uint32_t(elem) * 0x9e3779b1u + uint32_t(uint64_t(elem) >> 32) * 0x85ebca77u + uint32_t(seed);
  h ^= uint32_t(seed >> 32);
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

}  // namespace shardsync
