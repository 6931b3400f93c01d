// The synthetic values of a run of elements (synth_fill): what a trainer writes for a version
// and what verification compares every received byte with, so on the CPU every sync of every
// engine test and benchmark runs it twice over the model. It is built at -O3 (lib/CMakeLists.txt)
// and, where the CPU has AVX2, runs an AVX2 copy of the loop: GCC then vectorizes the hash (32-bit
// multiplies, shifts, an int-to-float conversion, a blend for the outliers) eight elements at a
// time. The bits are those of synth_element, whatever the path: the value is exact in float
// (synth_hash.hpp), so vector and scalar code agree, and the tests compare them with the GPU's.
// On the dev VM's EPYC a bf16 fill of 48 Mi elements took 0.18 s at -O2 and 0.04 s so (the loop
// timed alone), and a 2-rank bench of small-qwen3-moe with V3 (9 syncs, every byte made and
// verified) went from 8.1 s to 1.5 s.
#include <algorithm>
#include <cstring>

#include "device/device.hpp"
#include "device/synth_hash.hpp"

namespace shardsync {

namespace {

// Every element of the version at its own seed: one hash an element (the fast path).
__attribute__((always_inline)) inline void fill_loop(uint8_t* p, uint64_t seed, int64_t first, int64_t n,
                                                     int64_t elem_bytes) {
  switch (elem_bytes) {
    case 2: {
      auto* q = reinterpret_cast<uint16_t*>(p);
      for (int64_t i = 0; i < n; ++i) q[i] = uint16_t(synth_element(seed, first + i, 2));
      return;
    }
    case 4: {
      auto* q = reinterpret_cast<uint32_t*>(p);
      for (int64_t i = 0; i < n; ++i) q[i] = synth_element(seed, first + i, 4);
      return;
    }
    case 1:
      for (int64_t i = 0; i < n; ++i) p[i] = uint8_t(synth_element(seed, first + i, 1));
      return;
    default:
      for (int64_t i = 0; i < n; ++i) {
        const uint32_t v = synth_element(seed, first + i, elem_bytes);
        std::memset(p + i * elem_bytes, 0, size_t(elem_bytes));
        std::memcpy(p + i * elem_bytes, &v, size_t(std::min<int64_t>(elem_bytes, 4)));
      }
  }
}

void fill_plain(uint8_t* p, uint64_t seed, int64_t first, int64_t n, int64_t elem_bytes) {
  fill_loop(p, seed, first, n, elem_bytes);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) void fill_avx2(uint8_t* p, uint64_t seed, int64_t first, int64_t n,
                                               int64_t elem_bytes) {
  fill_loop(p, seed, first, n, elem_bytes);
}
#endif

void fill_at_seed(uint8_t* p, uint64_t seed, int64_t first, int64_t n, int64_t elem_bytes) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return fill_avx2(p, seed, first, n, elem_bytes);
#endif
  fill_plain(p, seed, first, n, elem_bytes);
}

}  // namespace

void synth_fill(void* dst, const SynthKey& key, int64_t first, int64_t n, int64_t elem_bytes) {
  auto* p = static_cast<uint8_t*>(dst);
  if (key.change_below == kEveryUnit) return fill_at_seed(p, key.seed, first, n, elem_bytes);
  if (key.unit == 0 && elem_bytes == 2) {  // uniform, bf16 (most weights): element by element, inline
    auto* q = reinterpret_cast<uint16_t*>(p);
    for (int64_t i = 0; i < n; ++i) q[i] = uint16_t(synth_value(key, first + i, 2));
    return;
  }
  // Clustered: a unit's elements share their last change, looked up once a unit.
  for (int64_t i = 0; i < n;) {
    const int64_t e = first + i;
    const int64_t run = key.unit > 0 ? std::min(n - i, key.unit - e % key.unit) : 1;
    fill_at_seed(p + i * elem_bytes, synth_seed(key.hf, last_change(key, e)), e, run, elem_bytes);
    i += run;
  }
}

}  // namespace shardsync
