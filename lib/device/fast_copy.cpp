// The CPU copy kernel the engines run (execute_copy in view.cpp stays the plain reference
// that defines the semantics; tests compare the two). Three things make it fast:
//  - large copies use non-temporal (streaming) stores, as glibc's memcpy does above its
//    threshold: the destination (a send buffer, a layerwise buffer) is not read again by
//    this core soon, and streaming stores skip the read-for-ownership of every line;
//  - short runs (a quarter of every source row, say) prefetch the source a few runs ahead;
//  - a transposing copy of 16-bit elements (Llama-4's expert weights) goes in tiles,
//    transposed in registers (AVX2 where the CPU has it, else SSE2) into an L1 buffer and
//    written out from there as whole-line runs; other element sizes and the tiles' ragged
//    edges go in 512 x 512 blocks;
//  - a batch of copies that take different columns of the same rows (a trainer's pack of one
//    tensor for each of its TP consumers) goes row by row together, so the source is read in
//    order, once: expert w2 on the dev VM's EPYC, four 768-byte columns of 3 KiB rows, 78% of
//    memcpy one consumer after another (with prefetch), 160% together.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>
#include <span>
#include <tuple>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "device/fast_copy.hpp"

namespace shardsync {

namespace {

// Copies bigger than this stream (about half of a typical per-core L2+L3 share).
constexpr int64_t kStreamBytes = int64_t(1) << 20;
// Software prefetch for runs shorter than this, this many bytes ahead.
constexpr size_t kPrefetchBelow = 32 << 10;
constexpr int64_t kPrefetchBytes = 8 << 10;

void copy_run(std::byte* t, const std::byte* s, size_t n, bool stream) {
#if defined(__SSE2__)
  if (stream && n >= 256) {
    size_t head = (16 - (reinterpret_cast<uintptr_t>(t) & 15)) & 15;
    std::memcpy(t, s, head);
    t += head;
    s += head;
    n -= head;
    auto* d = reinterpret_cast<__m128i*>(t);
    const auto* p = reinterpret_cast<const __m128i*>(s);
    for (; n >= 64; n -= 64, d += 4, p += 4) {
      __m128i a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2), e = _mm_loadu_si128(p + 3);
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    }
    for (; n >= 16; n -= 16) _mm_stream_si128(d++, _mm_loadu_si128(p++));
    std::memcpy(d, p, n);
    return;
  }
#endif
  (void)stream;
  std::memcpy(t, s, n);
}

// Tests turn the AVX2 tile kernel off to check the SSE2 one (fast_copy_allow_avx2).
std::atomic<bool> g_avx2_allowed{true};
std::atomic<int> g_tile_width{0};  // 16-bit transpose tile width; 0: the default (64)

// The unpack stages of an 8-row transpose of 16-bit elements, for 128-bit registers (VT
// __m128i, P _mm) and 256-bit ones (__m256i, _mm256, whose unpacks work per 128-bit lane):
// 8 source rows (stride ss) loaded with LOADU -> v[k], destination row k of each lane. (The
// loops are unrolled by pragma: at -O2 GCC otherwise keeps the arrays in memory and the
// transpose runs at half speed.)
#define SHARDSYNC_TRANSPOSE8_16(VT, P, LOADU, s, ss, v)                                       \
  do {                                                                                         \
    VT r_[8], u_[8];                                                                           \
    _Pragma("GCC unroll 8") for (int k = 0; k < 8; ++k) r_[k] =                                \
        LOADU(reinterpret_cast<const VT*>((s) + k * (ss)));                                    \
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; ++k) {                                      \
      u_[k] = P##_unpacklo_epi16(r_[2 * k], r_[2 * k + 1]);                                    \
      u_[k + 4] = P##_unpackhi_epi16(r_[2 * k], r_[2 * k + 1]);                                \
    }                                                                                          \
    /* u_[0..3]: columns 0-3 of row pairs; u_[4..7]: columns 4-7 */                            \
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; ++h) {                                      \
      const VT* q_ = u_ + 4 * h;                                                               \
      VT b0_ = P##_unpacklo_epi32(q_[0], q_[1]), b1_ = P##_unpackhi_epi32(q_[0], q_[1]);       \
      VT b2_ = P##_unpacklo_epi32(q_[2], q_[3]), b3_ = P##_unpackhi_epi32(q_[2], q_[3]);       \
      (v)[4 * h] = P##_unpacklo_epi64(b0_, b2_);                                               \
      (v)[4 * h + 1] = P##_unpackhi_epi64(b0_, b2_);                                           \
      (v)[4 * h + 2] = P##_unpacklo_epi64(b1_, b3_);                                           \
      (v)[4 * h + 3] = P##_unpackhi_epi64(b1_, b3_);                                           \
    }                                                                                          \
  } while (0)

#if defined(__SSE2__)
// 8 x 8 transpose of 16-bit elements: 8 source rows (stride ss) of 8 -> 8 destination rows
// (stride ds) of 8, in registers.
inline void transpose8x8_16(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds) {
  __m128i v[8];
  SHARDSYNC_TRANSPOSE8_16(__m128i, _mm, _mm_loadu_si128, s, ss, v);
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) _mm_storeu_si128(reinterpret_cast<__m128i*>(t + k * ds), v[k]);
}

// 16-bit transposes of whole tiles: TJ source rows of kTileI elements (a 64-byte line each)
// are transposed in registers straight from the source into an L1 buffer of kTileI rows of
// TJ, and written out as destination runs of TJ elements (streaming when the copy is large),
// while the next tile's source lines are prefetched. Each side then moves whole lines in runs
// the memory system takes well, whatever the strides. (The tiles were gathered into a second
// L1 buffer first; reading the source directly is 10-15 points of memcpy faster on the Xeon,
// results/perf/transpose-tiles/xd.cpp.) Tiles of 64 source rows: the engines' unpack of
// Llama-4 gate_up pieces (bf16) runs at 95-147% of memcpy on the GPU host's Xeon against
// 85-109% with 128 rows, at 89-103% on the dev VM's EPYC against 73-111% (medians 96% / 78%);
// read from the HF tensor's 32 KiB rows, 59-75% against 32-35% on the Xeon (results/perf/:
// gpu-host-cpu/transpose-in-unpack/, tile-width-dev-vm.txt, transpose-tiles/).
// fast_copy_set_tile_width overrides the width.
constexpr int kTileI = 32;
constexpr int kDefaultTileWidth = 64;

#if defined(__x86_64__) && defined(__GNUC__)
#define SHARDSYNC_HAVE_AVX2_TILE 1
// 8 source rows of 16 -> 16 destination rows of 8: two 8 x 8 transposes, one per 128-bit lane.
__attribute__((target("avx2"))) inline void transpose8x16_16(const uint16_t* s, int64_t ss, uint16_t* t,
                                                            int64_t ds) {
  __m256i v[8];
  SHARDSYNC_TRANSPOSE8_16(__m256i, _mm256, _mm256_loadu_si256, s, ss, v);
  // v[k]: low lane is destination row k, high lane row k + 8.
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + k * ds), _mm256_castsi256_si128(v[k]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + (k + 8) * ds), _mm256_extracti128_si256(v[k], 1));
  }
}
#endif

// Whether the tiles go through AVX2: the CPU has it and tests have not turned it off.
bool avx2_tiles() {
#if defined(SHARDSYNC_HAVE_AVX2_TILE)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2 && g_avx2_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// What a tiled transpose is made of, for one instruction set: transpose a tile, TJ source
// rows (stride ss) of kTileI, into the L1 buffer b [kTileI][TJ], and store a destination run
// from it (`bytes` a multiple of 32; streaming where the destination is aligned). Each
// register transpose reads 8 rows; the ones that share those rows follow it, so a row's line
// is read whole while it is in L1 even where all the rows map to one cache set (a
// power-of-two stride).
struct Sse2Moves {
  template <int TJ>
  static void tile(const uint16_t* s, int64_t ss, uint16_t* b) {
    for (int j = 0; j < TJ; j += 8)
      for (int i = 0; i < kTileI; i += 8) transpose8x8_16(s + i + j * ss, ss, b + i * TJ + j, TJ);
  }
  static void run(std::byte* t, const std::byte* b, int bytes, bool stream) {
    const bool nt = stream && (reinterpret_cast<uintptr_t>(t) & 15) == 0;
    for (int x = 0; x < bytes; x += 16) {
      const __m128i v = _mm_load_si128(reinterpret_cast<const __m128i*>(b + x));
      if (nt) _mm_stream_si128(reinterpret_cast<__m128i*>(t + x), v);
      else _mm_storeu_si128(reinterpret_cast<__m128i*>(t + x), v);
    }
  }
};

#if defined(SHARDSYNC_HAVE_AVX2_TILE)
// 32-byte stores of the runs: half the loads and stores of 16-byte ones; the tiles are partly
// bound by them (results/perf/transpose-tiles/xd.cpp).
struct Avx2Moves {
  template <int TJ>
  __attribute__((target("avx2"))) static void tile(const uint16_t* s, int64_t ss, uint16_t* b) {
    for (int j = 0; j < TJ; j += 8)
      for (int i = 0; i < kTileI; i += 16) transpose8x16_16(s + i + j * ss, ss, b + i * TJ + j, TJ);
  }
  __attribute__((target("avx2"))) static void run(std::byte* t, const std::byte* b, int bytes, bool stream) {
    const auto at = reinterpret_cast<uintptr_t>(t);
    if (stream && (at & 31) != 0 && (at & 15) == 0) return Sse2Moves::run(t, b, bytes, stream);
    const bool nt = stream && (at & 31) == 0;
    for (int x = 0; x < bytes; x += 32) {
      const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + x));
      if (nt) _mm256_stream_si256(reinterpret_cast<__m256i*>(t + x), v);
      else _mm256_storeu_si256(reinterpret_cast<__m256i*>(t + x), v);
    }
  }
};
#endif

// dst[i * ds + j] = src[i + j * ss] for i < ni, j < nj, both multiples of the tile.
template <int TJ, class Moves>
inline void tiled_loop(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds, int64_t ni, int64_t nj, bool stream) {
  alignas(64) uint16_t b[kTileI * TJ];
  for (int64_t j0 = 0; j0 < nj; j0 += TJ)
    for (int64_t i0 = 0; i0 < ni; i0 += kTileI) {
      Moves::template tile<TJ>(s + j0 * ss + i0, ss, b);
      int64_t pi = i0 + kTileI, pj = j0;  // the next tile, prefetched while this one is written
      if (pi == ni) pi = 0, pj += TJ;
      const uint16_t* next = pj < nj ? s + pj * ss + pi : nullptr;
      for (int i = 0; i < kTileI; ++i) {
        Moves::run(reinterpret_cast<std::byte*>(t + (i0 + i) * ds + j0), reinterpret_cast<const std::byte*>(b + i * TJ),
                   TJ * 2, stream);
        if (!next) continue;
        for (int r = i * (TJ / kTileI), re = r + TJ / kTileI; r < re; ++r) {
          const char* p = reinterpret_cast<const char*>(next + r * ss);
          _mm_prefetch(p, _MM_HINT_T0);
          if (reinterpret_cast<uintptr_t>(p) & 63) _mm_prefetch(p + kTileI * 2 - 1, _MM_HINT_T0);
        }
      }
    }
}

// The loop compiled once per instruction set: flatten inlines the moves into it.
template <int TJ>
__attribute__((flatten)) void tiled_sse2(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds, int64_t ni, int64_t nj,
                                         bool stream) {
  tiled_loop<TJ, Sse2Moves>(s, ss, t, ds, ni, nj, stream);
}
#if defined(SHARDSYNC_HAVE_AVX2_TILE)
template <int TJ>
__attribute__((target("avx2"), flatten)) void tiled_avx2(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds,
                                                         int64_t ni, int64_t nj, bool stream) {
  tiled_loop<TJ, Avx2Moves>(s, ss, t, ds, ni, nj, stream);
}
#endif

template <int TJ>
void transpose16_tiled(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds, int64_t ni, int64_t nj, bool stream) {
#if defined(SHARDSYNC_HAVE_AVX2_TILE)
  if (avx2_tiles()) return tiled_avx2<TJ>(s, ss, t, ds, ni, nj, stream);
#endif
  tiled_sse2<TJ>(s, ss, t, ds, ni, nj, stream);
}

int tile_width() {
  const int w = g_tile_width.load(std::memory_order_relaxed);
  return w ? w : kDefaultTileWidth;
}
#endif

// dst[i * ds + j] = src[i + j * ss] for i in [i0, i1), j in [j0, j1): source rows j are
// contiguous in i, destination rows i contiguous in j. Blocks of 512 x 512 elements, inside
// them 8 x 8 register transposes (16-bit elements) or element moves. What the tiles leave.
template <class E>
void transpose_blocked(const E* sp, int64_t ss, E* tp, int64_t ds, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  constexpr int64_t kBlock = 512;
  for (int64_t jb = j0; jb < j1; jb += kBlock) {
    const int64_t je = std::min(j1, jb + kBlock);
    for (int64_t ib = i0; ib < i1; ib += kBlock) {
      const int64_t ie = std::min(i1, ib + kBlock);
      int64_t j8 = jb, i8 = ie;
#if defined(__SSE2__)
      if constexpr (sizeof(E) == 2) {
        i8 = ib + (ie - ib) / 8 * 8;
        for (; j8 + 8 <= je; j8 += 8)
          for (int64_t i = ib; i < i8; i += 8)
            transpose8x8_16(reinterpret_cast<const uint16_t*>(sp + i + j8 * ss), ss,
                            reinterpret_cast<uint16_t*>(tp + i * ds + j8), ds);
      }
#endif
      // What the register transposes left: the rows j >= j8 (all of them without SIMD), and
      // the columns i >= i8 of the rows before.
      for (int64_t i = ib; i < ie; ++i) {
        E* row = tp + i * ds;
        const E* col = sp + i;
        for (int64_t j = (i < i8 ? j8 : jb); j < je; ++j) row[j] = col[j * ss];
      }
    }
  }
}

// One transposing copy: a.size rows i (source stride 1), b.size columns j (destination
// stride 1). 16-bit elements go through whole tiles where they fit.
template <class E>
void transpose(const CopyDim& a, const CopyDim& b, const std::byte* s, std::byte* t, bool stream) {
  const E* sp = reinterpret_cast<const E*>(s);
  E* tp = reinterpret_cast<E*>(t);
  const int64_t ss = b.src_stride, ds = a.dst_stride, ni = a.size, nj = b.size;
  int64_t fi = 0, fj = 0;  // the tiled part: [0, fi) x [0, fj)
#if defined(__SSE2__)
  if constexpr (sizeof(E) == 2) {
    const int w = tile_width();
    fi = ni / kTileI * kTileI;
    fj = nj / w * w;
    const auto* s16 = reinterpret_cast<const uint16_t*>(sp);
    auto* t16 = reinterpret_cast<uint16_t*>(tp);
    if (fi == 0 || fj == 0) fi = fj = 0;
    else if (w == 128) transpose16_tiled<128>(s16, ss, t16, ds, fi, fj, stream);
    else transpose16_tiled<64>(s16, ss, t16, ds, fi, fj, stream);
  }
#endif
  (void)stream;
  transpose_blocked(sp, ss, tp, ds, 0, fi, fj, nj);   // right of the tiles
  transpose_blocked(sp, ss, tp, ds, fi, ni, 0, nj);   // below them
}

// Walks the outer loops of a copy (all but the innermost `inner_dims`), keeping the element
// offsets incrementally.
class Odometer {
 public:
  Odometer(const CopyDesc& d, size_t outer_n) : d_(d), idx_(outer_n, 0), so_(d.src_offset), to_(d.dst_offset) {}
  int64_t src() const { return so_; }
  int64_t dst() const { return to_; }
  void next() {
    for (size_t k = idx_.size(); k-- > 0;) {
      so_ += d_.dims[k].src_stride;
      to_ += d_.dims[k].dst_stride;
      if (++idx_[k] < d_.dims[k].size) return;
      so_ -= d_.dims[k].src_stride * d_.dims[k].size;
      to_ -= d_.dims[k].dst_stride * d_.dims[k].size;
      idx_[k] = 0;
    }
  }

 private:
  const CopyDesc& d_;
  std::vector<int64_t> idx_;
  int64_t so_, to_;
};

// f(src, dst, src_ahead): src_ahead is the source of the step `ahead` steps later (or null
// past the end), for prefetching.
template <class F>
void for_each_outer(const CopyDesc& d, size_t inner_dims, int64_t eb, const void* src, void* dst, int64_t ahead, F&& f) {
  const auto* s0 = static_cast<const std::byte*>(src);
  auto* t0 = static_cast<std::byte*>(dst);
  const size_t outer_n = d.dims.size() - inner_dims;
  int64_t inner = 1;
  for (size_t k = outer_n; k < d.dims.size(); ++k) inner *= d.dims[k].size;
  const int64_t total = d.numel / inner;
  if (outer_n == 1) {  // the common (rows, run) shape: no odometer
    const int64_t ss = d.dims[0].src_stride * eb, ts = d.dims[0].dst_stride * eb;
    const std::byte* sp = s0 + d.src_offset * eb;
    std::byte* tp = t0 + d.dst_offset * eb;
    for (int64_t n = 0; n < total; ++n)  // pointers formed for existing rows only
      f(sp + n * ss, tp + n * ts, n + ahead < total ? sp + (n + ahead) * ss : nullptr);
    return;
  }
  Odometer at(d, outer_n), next(d, outer_n);
  for (int64_t k = 0; k < ahead && k < total; ++k) next.next();
  for (int64_t n = 0; n < total; ++n) {
    f(s0 + at.src() * eb, t0 + at.dst() * eb, n + ahead < total ? s0 + next.src() * eb : nullptr);
    at.next();
    if (n + ahead < total) next.next();
  }
}

}  // namespace

bool fast_copy_allow_avx2(bool allowed) { return g_avx2_allowed.exchange(allowed); }

std::string fast_copy_transpose_kernel() {
#if defined(__SSE2__)
  return std::string(avx2_tiles() ? "avx2" : "sse2") + ", " + std::to_string(kTileI) + "x" +
         std::to_string(tile_width()) + " tiles";
#else
  return "scalar";
#endif
}

int fast_copy_set_tile_width(int width) {
  if (width != 0 && width != 64 && width != 128) throw std::invalid_argument("transpose tile width must be 0, 64 or 128");
  return g_tile_width.exchange(width);
}

void execute_copy_fast(const CopyDesc& d, const void* src, void* dst, int64_t eb) {
  if (d.numel == 0) return;
  const bool stream = d.numel * eb >= kStreamBytes;
  const size_t n = d.dims.size();
  const CopyDim& in = d.dims.back();
  if (copy_transposes(d) && (eb == 1 || eb == 2 || eb == 4 || eb == 8)) {
    const CopyDim& a = d.dims[n - 2];
    for_each_outer(d, 2, eb, src, dst, 0, [&](const std::byte* s, std::byte* t, const std::byte*) {
      switch (eb) {
        case 1: transpose<uint8_t>(a, in, s, t, stream); break;
        case 2: transpose<uint16_t>(a, in, s, t, stream); break;
        case 4: transpose<uint32_t>(a, in, s, t, stream); break;
        default: transpose<uint64_t>(a, in, s, t, stream); break;
      }
    });
#if defined(__SSE2__)
    if (stream) _mm_sfence();
#endif
    return;
  }
  if (in.src_stride == 1 && in.dst_stride == 1) {
    // Runs shorter than a few pages defeat the hardware prefetchers (each run is a new
    // stream): prefetch the source of the run about 8 KiB ahead while copying this one, into
    // L2 (on the GPU host's Xeon 129-137% of memcpy for expert w2 where into L1 gave 98-103%;
    // no worse on the dev VM: results/perf/transpose-tiles/).
    const size_t run = size_t(in.size * eb);
    const int64_t ahead = d.numel == in.size || run >= kPrefetchBelow ? 0 : std::max<int64_t>(1, kPrefetchBytes / int64_t(run));
    for_each_outer(d, 1, eb, src, dst, ahead, [&](const std::byte* s, std::byte* t, const std::byte* next) {
#if defined(__SSE2__)
      if (next)
        for (size_t k = 0; k < run; k += 64) _mm_prefetch(reinterpret_cast<const char*>(next + k), _MM_HINT_T1);
#endif
      copy_run(t, s, run, stream);
    });
#if defined(__SSE2__)
    if (stream) _mm_sfence();  // streaming stores are weakly ordered: visible before anyone is told
#endif
    return;
  }
  for_each_outer(d, 1, eb, src, dst, 0,
                 [&](const std::byte* s, std::byte* t, const std::byte*) { copy_strided_run(in, s, t, eb); });
}

namespace {

// Copies of shape (rows, run) with both sides' runs contiguous: the kind a lockstep group
// is made of.
bool row_runs(const CopyTask& t) {
  const CopyDesc& d = *t.desc;
  return d.numel > 0 && d.dims.size() == 2 && d.dims[1].src_stride == 1 && d.dims[1].dst_stride == 1 &&
         d.dims[0].src_stride >= d.dims[1].size;
}

// Members of one lockstep group: the same source rows (pointer, element size, row count,
// row stride, run length), each member's columns starting within the first member's row.
bool same_rows(const CopyTask& a, const CopyTask& b) {
  const CopyDesc &x = *a.desc, &y = *b.desc;
  return a.src == b.src && a.elem_bytes == b.elem_bytes && x.dims[0].size == y.dims[0].size &&
         x.dims[0].src_stride == y.dims[0].src_stride && x.dims[1].size == y.dims[1].size &&
         y.src_offset >= x.src_offset && y.src_offset - x.src_offset < x.dims[0].src_stride;
}

// Row n of every member, then row n + 1: members sorted by column, so each source row is
// read front to back.
void copy_lockstep(std::span<const CopyTask* const> g) {
  const CopyDesc& d0 = *g[0]->desc;
  const int64_t eb = g[0]->elem_bytes, rows = d0.dims[0].size;
  const size_t run = size_t(d0.dims[1].size * eb);
  const bool stream = int64_t(g.size()) * d0.numel * eb >= kStreamBytes;
  const auto* s = static_cast<const std::byte*>(g[0]->src);
  for (int64_t n = 0; n < rows; ++n)
    for (const CopyTask* t : g) {
      const CopyDesc& d = *t->desc;
      copy_run(static_cast<std::byte*>(t->dst) + (d.dst_offset + n * d.dims[0].dst_stride) * eb,
               s + (d.src_offset + n * d.dims[0].src_stride) * eb, run, stream);
    }
#if defined(__SSE2__)
  if (stream) _mm_sfence();
#endif
}

}  // namespace

int64_t execute_copies_fast(const std::vector<CopyTask>& batch) {
  int64_t together = 0;
  std::vector<const CopyTask*> rowwise;
  for (const CopyTask& t : batch) {
    if (row_runs(t)) rowwise.push_back(&t);
    else execute_copy_fast(*t.desc, t.src, t.dst, t.elem_bytes);
  }
  // Candidates of one group sort together: by source, shape, then column.
  auto key = [](const CopyTask* t) {
    const CopyDesc& d = *t->desc;
    return std::make_tuple(reinterpret_cast<uintptr_t>(t->src), t->elem_bytes, d.dims[0].size, d.dims[0].src_stride,
                           d.dims[1].size, d.src_offset);
  };
  if (rowwise.size() > 1)  // most launches of tiny tensors have nothing to group: no sort
    std::stable_sort(rowwise.begin(), rowwise.end(), [&](const CopyTask* a, const CopyTask* b) { return key(a) < key(b); });
  for (size_t i = 0, j = 0; i < rowwise.size(); i = j) {
    j = i + 1;
    while (j < rowwise.size() && same_rows(*rowwise[i], *rowwise[j])) ++j;
    const CopyTask& t = *rowwise[i];
    if (j - i == 1) {
      execute_copy_fast(*t.desc, t.src, t.dst, t.elem_bytes);
    } else {
      copy_lockstep(std::span<const CopyTask* const>(rowwise).subspan(i, j - i));
      together += int64_t(j - i);
    }
  }
  return together;
}

}  // namespace shardsync
