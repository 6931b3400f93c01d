// The synthetic weight value function, shared by host code and CUDA kernels.
#pragma once

#include <cstdint>
#include <cstring>

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

SHARDSYNC_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

SHARDSYNC_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
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

// A synthetic weight: finite and bell-shaped like a trained one, so that FP8 quantization of
// it means something (issue 20). s, the sum of three bytes of synth_bits halved, less 191, is
// an Irwin-Hall draw in [-191, 191] (sigma 64); the value is s times the tensor's power of two
// 2^-11 .. 2^-14 (from the seed: sigma 0.031 .. 0.0039), and one element in 4,096 (about four
// per 128 x 128 block) is an outlier 16 times larger. s has at most 8 significant bits and
// the factor is a power of two, so the value is exact in bf16 and fp32 alike, and host code
// and kernels compute the same bits whatever their floating-point modes.
SHARDSYNC_HD float synth_weight(uint64_t seed, int64_t elem) {
  const uint32_t h = synth_bits(seed, elem);
  const int32_t s = int32_t(((h & 0xffu) + ((h >> 8) & 0xffu) + ((h >> 16) & 0xffu)) >> 1) - 191;
  const uint32_t outlier = ((h ^ (h >> 15)) * 0x2c1b3c6du) >> 20 == 0 ? 4u : 0u;  // 12 more bits
  const uint32_t k = 11u + uint32_t(seed >> 62);
  return float(s) * bits_to_float((127u - k + outlier) << 23);
}

// The bits of element `elem` of a tensor of elem_bytes-byte elements (the low elem_bytes
// bytes): what a trainer holds for (tensor, version) and a consumer checks. 2 bytes: the
// synthetic weight in bf16; 4: in fp32; 1: a byte of synth_bits that is not an e4m3fn NaN
// (0x7f and 0xff become 0x7e and 0xfe, +-448); other sizes: synth_bits.
SHARDSYNC_HD uint32_t synth_element(uint64_t seed, int64_t elem, int64_t elem_bytes) {
  if (elem_bytes == 2) return float_to_bits(synth_weight(seed, elem)) >> 16;
  if (elem_bytes == 4) return float_to_bits(synth_weight(seed, elem));
  const uint32_t h = synth_bits(seed, elem);
  if (elem_bytes == 1) return (h & 0x7fu) == 0x7fu ? (h & 0xffu) ^ 1u : h & 0xffu;
  return h;
}

}  // namespace shardsync
