// The CPU copy kernel the engines run (execute_copy in view.cpp stays the plain reference
// that defines the semantics; tests compare the two). Three things make it fast:
//  - large copies use non-temporal (streaming) stores, as glibc's memcpy does above its
//    threshold: the destination (a send buffer, a layerwise buffer) is not read again by
//    this core soon, and streaming stores skip the read-for-ownership of every line;
//  - short runs (a quarter of every source row, say) prefetch the source a few runs ahead;
//  - a transposing copy (Llama-4's expert weights) goes in 512 x 512 blocks of 8 x 8 register
//    transposes (16-bit elements), so the pages both sides touch stay within the TLB.
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "tensor/view.hpp"

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

#if defined(__SSE2__)
// 8 x 8 transpose of 16-bit elements: 8 source rows (stride ss) of 8 -> 8 destination rows
// (stride ds) of 8, in registers.
inline void transpose8x8_16(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds) {
  __m128i r[8], u[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k * ss));
  for (int k = 0; k < 4; ++k) {
    u[k] = _mm_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    u[k + 4] = _mm_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  // u[0..3]: columns 0-3 of row pairs; u[4..7]: columns 4-7.
  for (int h = 0; h < 2; ++h) {
    __m128i* q = u + 4 * h;
    __m128i b0 = _mm_unpacklo_epi32(q[0], q[1]), b1 = _mm_unpackhi_epi32(q[0], q[1]);
    __m128i b2 = _mm_unpacklo_epi32(q[2], q[3]), b3 = _mm_unpackhi_epi32(q[2], q[3]);
    uint16_t* o = t + 4 * h * ds;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi64(b0, b2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + ds), _mm_unpackhi_epi64(b0, b2));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * ds), _mm_unpacklo_epi64(b1, b3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * ds), _mm_unpackhi_epi64(b1, b3));
  }
}
#endif

// dst[i * a.dst_stride + j] = src[i + j * b.src_stride]: source rows j are contiguous in i,
// destination rows i contiguous in j. Blocks of 512 x 512 elements keep the pages both sides
// touch within the TLB; inside a block, 8 x 8 register transposes (16-bit elements, the
// bf16 of Llama-4's experts) or element moves. It stays far from memcpy (source rows a
// power-of-two stride apart, destination lines written in pieces): the micro-benchmarks
// say how far.
template <class E>
void transpose(const CopyDim& a, const CopyDim& b, const std::byte* s, std::byte* t) {
  constexpr int64_t kBlock = 512;
  const E* sp = reinterpret_cast<const E*>(s);
  E* tp = reinterpret_cast<E*>(t);
  const int64_t ss = b.src_stride, ds = a.dst_stride;
  for (int64_t jb = 0; jb < b.size; jb += kBlock) {
    const int64_t je = std::min(b.size, jb + kBlock);
    for (int64_t ib = 0; ib < a.size; ib += kBlock) {
      const int64_t ie = std::min(a.size, ib + kBlock);
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

void execute_copy_fast(const CopyDesc& d, const void* src, void* dst, int64_t eb) {
  if (d.numel == 0) return;
  const bool stream = d.numel * eb >= kStreamBytes;
  const size_t n = d.dims.size();
  const CopyDim& in = d.dims.back();
  if (n >= 2 && in.dst_stride == 1 && in.src_stride != 1 && d.dims[n - 2].src_stride == 1 &&
      (eb == 1 || eb == 2 || eb == 4 || eb == 8)) {
    const CopyDim& a = d.dims[n - 2];
    for_each_outer(d, 2, eb, src, dst, 0, [&](const std::byte* s, std::byte* t, const std::byte*) {
      switch (eb) {
        case 1: transpose<uint8_t>(a, in, s, t); break;
        case 2: transpose<uint16_t>(a, in, s, t); break;
        case 4: transpose<uint32_t>(a, in, s, t); break;
        default: transpose<uint64_t>(a, in, s, t); break;
      }
    });
    return;
  }
  if (in.src_stride == 1 && in.dst_stride == 1) {
    // Runs shorter than a few pages defeat the hardware prefetchers (each run is a new
    // stream): prefetch the source of the run about 8 KiB ahead while copying this one.
    const size_t run = size_t(in.size * eb);
    const int64_t ahead = d.numel == in.size || run >= kPrefetchBelow ? 0 : std::max<int64_t>(1, kPrefetchBytes / int64_t(run));
    for_each_outer(d, 1, eb, src, dst, ahead, [&](const std::byte* s, std::byte* t, const std::byte* next) {
#if defined(__SSE2__)
      if (next)
        for (size_t k = 0; k < run; k += 64) _mm_prefetch(reinterpret_cast<const char*>(next + k), _MM_HINT_T0);
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

}  // namespace shardsync
