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

// How weights change from one version to the next (`--update-density`, issue 21): at each
// version a fraction of each tensor's change units takes a new value and the rest keep theirs.
// A unit is an element (uniform) or a run of `unit` consecutive elements (clustered: a row of
// the tensor). Each unit has a phase p in [0, 2^32) (a hash of tensor and unit); its counter
// p + v * change_below crosses a multiple of 2^32 at the versions v where it changes, so it
// changes once every 2^32 / change_below versions, and at each version a fraction
// change_below / 2^32 of the units (those whose phase puts the crossing there) changes. Its
// value at version v is that of version L, the last version <= v at which it changed (0 when
// none did: every tensor starts at version 0); L is found in constant time. change_below ==
// kEveryUnit: every element changes at every version, L = v (the values of before issue 21,
// and the fast path).
inline constexpr uint32_t kEveryUnit = 0xffffffffu;

SHARDSYNC_HD uint64_t change_seed(int32_t hf) {
  return mix64((uint64_t(uint32_t(hf)) << 32) ^ 0xd1b54a32d192ed03ULL);
}

// What fixes an element's value: its tensor, the version, and how the tensor changes. Built
// from a plain seed (every element at that seed, the synthetic values of one version), or by
// synth_key() from (tensor, version, update model).
struct SynthKey {
  uint64_t seed = 0;                  // synth_seed(hf, version)
  uint64_t version = 0;
  int64_t unit = 0;                   // elements per change unit (clustered); 0: one element
  int32_t hf = 0;
  uint32_t change_below = kEveryUnit;
  SynthKey() = default;
  SHARDSYNC_HD SynthKey(uint64_t s) : seed(s) {}  // NOLINT: a plain seed is a key
};

SHARDSYNC_HD SynthKey synth_key(int32_t hf, uint64_t version, uint32_t change_below, int64_t unit) {
  SynthKey k(synth_seed(hf, version));
  k.version = version;
  k.unit = unit;
  k.hf = hf;
  k.change_below = change_below;
  return k;
}

// The version whose value element `elem` holds at k.version (L above). Versions below 2^32.
SHARDSYNC_HD uint64_t last_change(const SynthKey& k, int64_t elem) {
  if (k.change_below == kEveryUnit) return k.version;
  const int64_t u = k.unit > 0 ? elem / k.unit : elem;
  const uint64_t phase = synth_bits(change_seed(k.hf), u);
  const uint64_t crossings = (phase + k.version * uint64_t(k.change_below)) >> 32;
  if (crossings == 0) return 0;
  // The first version whose counter reached crossings * 2^32 (change_below > 0 here).
  return ((crossings << 32) - phase + k.change_below - 1) / k.change_below;
}

SHARDSYNC_HD uint32_t synth_value(const SynthKey& k, int64_t elem, int64_t elem_bytes) {
  if (k.change_below == kEveryUnit) return synth_element(k.seed, elem, elem_bytes);
  return synth_element(synth_seed(k.hf, last_change(k, elem)), elem, elem_bytes);
}

// --checksum: one element's term of a piece's checksum, from its HF tensor, its element index
// in the full HF tensor and its bits (zero-extended). A piece's checksum is the sum of its terms
// mod 2^64, so the trainer and the receiver get the same sum whatever order or batches they
// visit the elements in. A 32-bit term, cheap enough to compute inside a GPU copy at its memory
// rate (a few integer operations an element): for a given tensor and index the term is a
// bijection of the element's low 32 bits (an xor, then multiplications by odd constants and
// xor-shifts), so one changed element of up to 4 bytes always changes the sum (the difference of
// two 32-bit terms is never 0 mod 2^64); several changed elements, or one moved to another index
// or tensor, go unseen with a chance of about 1 in 2^32.
SHARDSYNC_HD uint64_t checksum_term(int32_t hf, int64_t elem, uint64_t bits) {
  uint32_t x = uint32_t(uint64_t(elem)) * 0x9e3779b1u + uint32_t(uint64_t(elem) >> 32) * 0x85ebca77u +
               uint32_t(hf) * 0xc2b2ae3du;
  x ^= uint32_t(bits) ^ (uint32_t(bits >> 32) * 0x27d4eb2fu);
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

}  // namespace shardsync
