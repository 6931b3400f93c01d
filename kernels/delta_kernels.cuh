// Delta records on the GPU (--delta, lib/device/delta.hpp has the format and the host twin,
// delta_encode / delta_apply, which define the bytes: tests compare the two).
//
// Encode, per batch of chunks (a producer's round), on the main stream:
//   count:    a block of 128 threads per 1024-word segment, 8 words a thread (one bitmap
//             byte): per segment, its changed words and whether it has any, packed in 64 bits
//   scan:     cub::DeviceScan over each chunk's packed counts: each segment's changed words
//             before it (its prefix count) and the segments with a change before it (where its
//             bitmap goes)
//   finish:   a thread per chunk: the record's size, and whether it goes whole (no smaller than
//             the chunk, an anchor, an odd size); its header
//   write:    a block per segment writes its prefix count, bitmap and changed words into the
//             chunk's scratch record, and brings the kept chunk to the fresh one
//   copyback: the record over the chunk in the send buffer (the fresh chunk sits where the
//             record goes, after the header: nothing is written there until every block read it)
// Apply, per pulled chunk: a thread checks the header; a thread per segment checks its count
// and flags a bitmap; cub::DeviceScan ranks the flagged segments; a thread checks the size; a
// block per segment then writes its changed words into the kept chunk.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include <cstdint>

#include "device/delta.hpp"

namespace shardsync::kernels {

constexpr int kDeltaThreads = 128;  // a segment's 1024 words, 8 a thread
static_assert(kDeltaThreads * 8 == kDeltaSegmentWords);
constexpr uint64_t kDeltaLow = (uint64_t(1) << 40) - 1;  // packed: changed words below bit 40, segments above

struct DeltaEncJob {
  const uint8_t* fresh = nullptr;  // record + kDeltaHeaderBytes
  uint8_t* kept = nullptr;
  uint8_t* record = nullptr;
  uint8_t* scratch = nullptr;      // the record as built (kDeltaHeaderBytes + chunk_bytes)
  uint64_t* packed = nullptr;      // per segment: changed words | (any changed) << 40
  uint64_t* prefix = nullptr;      // per segment: the sum of `packed` before it
  int64_t chunk_bytes = 0, words = 0;
  int64_t segs = 0;       // segments of the format (words / 1024, rounded up)
  int64_t copy_segs = 0;  // blocks launched: covers every byte (an odd last byte too)
  int64_t first_block = 0;
  uint64_t base_version = 0, version = 0;
  int32_t whole = 0;  // asked for
};

struct DeltaEncResult {
  int64_t bytes = 0, index_bytes = 0, changed_bytes = 0;
  int32_t whole = 0;
};

struct DeltaApplyK {
  const uint8_t* record = nullptr;
  int64_t record_bytes = 0;
  uint8_t* kept = nullptr;
  int64_t chunk_bytes = 0;
  int32_t have_kept = 0;
  uint64_t kept_version = 0;
  int32_t* flags = nullptr;      // scratch, per segment: it carries a bitmap
  int32_t* seg_rank = nullptr;   // scratch, per segment: flagged segments before it
};

// What the check found; error 0: a well-formed record.
enum DeltaError : int32_t {
  kDeltaErrOk = 0,
  kDeltaErrShort,        // a: record bytes
  kDeltaErrMagic,     // a: magic
  kDeltaErrWholeSize,
  kDeltaErrFormat,       // a: format
  kDeltaErrNoKept,       // a: base version
  kDeltaErrVersion,      // a: base version
  kDeltaErrWords,        // a: header words
  kDeltaErrNoPrefix,     // a: fixed bytes
  kDeltaErrSegment,      // a: segment
  kDeltaErrSize,         // a: expected bytes, b: segments with a bitmap
  kDeltaErrPastEnd,
  kDeltaErrBitmap,       // a: segment
};

struct DeltaCheck {
  int32_t error = 0, whole = 0;
  int64_t a = 0, b = 0;
  int64_t fixed = 0, index = 0, changed = 0;
};

__device__ __forceinline__ int64_t dmin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t dmax(int64_t a, int64_t b) { return a > b ? a : b; }

__device__ __forceinline__ int find_delta_job(const DeltaEncJob* jobs, int n, int64_t block) {
  int j = 0;
  while (j + 1 < n && jobs[j + 1].first_block <= block) ++j;
  return j;
}

__device__ __forceinline__ uint16_t load_word(const uint8_t* p) {
  return uint16_t(p[0] | (uint16_t(p[1]) << 8));
}
__device__ __forceinline__ void store_word(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
__device__ __forceinline__ void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

// Bit k: word w0 + k differs (words past `words` never do).
__device__ __forceinline__ unsigned changed_mask(const uint8_t* fresh, const uint8_t* kept, int64_t w0, int64_t words) {
  unsigned m = 0;
  if (w0 + 8 <= words && ((reinterpret_cast<uintptr_t>(fresh) | reinterpret_cast<uintptr_t>(kept)) & 15) == 0) {
    const uint4 f = *reinterpret_cast<const uint4*>(fresh + 2 * w0);
    const uint4 k = *reinterpret_cast<const uint4*>(kept + 2 * w0);
    const uint32_t fw[4] = {f.x, f.y, f.z, f.w}, kw[4] = {k.x, k.y, k.z, k.w};
    for (int i = 0; i < 4; ++i) {
      const uint32_t d = fw[i] ^ kw[i];
      m |= unsigned((d & 0xffffu) != 0) << (2 * i);
      m |= unsigned((d >> 16) != 0) << (2 * i + 1);
    }
    return m;
  }
  for (int k = 0; k < 8 && w0 + k < words; ++k)
    if (load_word(fresh + 2 * (w0 + k)) != load_word(kept + 2 * (w0 + k))) m |= 1u << k;
  return m;
}

// The bytes [lo, hi) of src to dst, a thread's share of a segment.
__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src, int64_t lo, int64_t hi) {
  if (hi - lo == 16 && ((reinterpret_cast<uintptr_t>(dst + lo) | reinterpret_cast<uintptr_t>(src + lo)) & 15) == 0) {
    *reinterpret_cast<uint4*>(dst + lo) = *reinterpret_cast<const uint4*>(src + lo);
    return;
  }
  for (int64_t i = lo; i < hi; ++i) dst[i] = src[i];
}

__global__ void __launch_bounds__(kDeltaThreads) delta_count_kernel(const DeltaEncJob* jobs, int n) {
  const int64_t block = blockIdx.x;
  const DeltaEncJob& J = jobs[find_delta_job(jobs, n, block)];
  const int64_t s = block - J.first_block;
  if (J.whole || s >= J.segs) return;
  const int64_t w0 = s * kDeltaSegmentWords + int64_t(threadIdx.x) * 8;
  const int c = __popc(changed_mask(J.fresh, J.kept, w0, J.words));
  using Reduce = cub::BlockReduce<int, kDeltaThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int sum = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0) J.packed[s] = (uint64_t(sum > 0) << 40) | uint64_t(sum);
}

__device__ __forceinline__ void write_header(uint8_t* at, const DeltaHeader& h) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&h);
  for (int i = 0; i < int(sizeof h); ++i) at[i] = p[i];
}

// A thread per chunk, after the scan: the record's size, whole or not, and its header.
__global__ void delta_finish_kernel(const DeltaEncJob* jobs, int n, DeltaEncResult* results) {
  const int j = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const DeltaEncJob& J = jobs[j];
  const int64_t limit = kDeltaHeaderBytes + J.chunk_bytes;
  const int64_t fixed = kDeltaHeaderBytes + ((4 * J.segs + 15) & ~int64_t(15));
  bool whole = J.whole || J.chunk_bytes % 2 != 0 || J.words > int64_t(UINT32_MAX) || fixed >= limit;
  const uint64_t total = whole || J.segs == 0 ? 0 : J.prefix[J.segs - 1] + J.packed[J.segs - 1];
  const int64_t changed = int64_t(total & kDeltaLow), with = int64_t(total >> 40);
  const int64_t index = fixed + int64_t(kDeltaSegmentWords / 8) * with, bytes = index + 2 * changed;
  if (bytes >= limit) whole = true;
  DeltaHeader h;
  h.version = J.version;
  DeltaEncResult r;
  if (whole) {
    r = DeltaEncResult{limit, kDeltaHeaderBytes, J.chunk_bytes, 1};
  } else {
    h.format = 1;
    h.base_version = J.base_version;
    h.changed = uint32_t(changed);
    h.words = uint32_t(J.words);
    r = DeltaEncResult{bytes, index, 2 * changed, 0};
    for (int64_t i = kDeltaHeaderBytes + 4 * J.segs; i < fixed; ++i) J.scratch[i] = 0;  // the counts' padding
  }
  write_header(J.scratch, h);
  results[j] = r;
}

__global__ void __launch_bounds__(kDeltaThreads) delta_write_kernel(const DeltaEncJob* jobs, int n, const DeltaEncResult* results) {
  const int64_t block = blockIdx.x;
  const int j = find_delta_job(jobs, n, block);
  const DeltaEncJob& J = jobs[j];
  const DeltaEncResult& r = results[j];
  const int64_t s = block - J.first_block;
  const int64_t w0 = s * kDeltaSegmentWords + int64_t(threadIdx.x) * 8;
  const int64_t lo = 2 * w0, hi = dmin(lo + 16, J.chunk_bytes);
  if (r.whole) {  // the kept chunk becomes the fresh one; the record is the header and the chunk
    if (J.kept && lo < hi) copy_bytes(J.kept, J.fresh, lo, hi);
    return;
  }
  const unsigned m = changed_mask(J.fresh, J.kept, w0, J.words);
  using Scan = cub::BlockScan<int, kDeltaThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int off = 0, total = 0;
  Scan(tmp).ExclusiveSum(__popc(m), off, total);
  const uint64_t pre = J.prefix[s];
  const uint32_t before = uint32_t(pre & kDeltaLow);
  if (threadIdx.x == 0) store_u32(J.scratch + kDeltaHeaderBytes + 4 * s, before);
  if (total > 0) {
    const int64_t fixed = kDeltaHeaderBytes + ((4 * J.segs + 15) & ~int64_t(15));
    J.scratch[fixed + int64_t(kDeltaSegmentWords / 8) * int64_t(pre >> 40) + threadIdx.x] = uint8_t(m);
    uint8_t* v = J.scratch + r.index_bytes + 2 * (int64_t(before) + off);
    for (unsigned bits = m; bits != 0; bits &= bits - 1) {
      store_word(v, load_word(J.fresh + 2 * (w0 + __ffs(bits) - 1)));
      v += 2;
    }
  }
  if (m != 0 && lo < hi) copy_bytes(J.kept, J.fresh, lo, hi);
}

// grid (blocks, jobs): the record (or, whole, its header) from scratch over the send buffer.
__global__ void delta_copyback_kernel(const DeltaEncJob* jobs, const DeltaEncResult* results) {
  const DeltaEncJob& J = jobs[blockIdx.y];
  const DeltaEncResult& r = results[blockIdx.y];
  const int64_t len = r.whole ? kDeltaHeaderBytes : r.bytes;
  const int64_t step = int64_t(gridDim.x) * blockDim.x * 16;
  for (int64_t i = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 16; i < len; i += step)
    copy_bytes(J.record, J.scratch, i, dmin(i + 16, len));
}

__device__ __forceinline__ void delta_fail(DeltaCheck* c, int32_t error, int64_t a, int64_t b = 0) {
  if (atomicCAS(&c->error, 0, error) == 0) {
    c->a = a;
    c->b = b;
  }
}

__device__ __forceinline__ DeltaHeader read_header(const uint8_t* record) {
  uint64_t raw[kDeltaHeaderBytes / 8];
  uint8_t* p = reinterpret_cast<uint8_t*>(raw);
  for (int i = 0; i < int(kDeltaHeaderBytes); ++i) p[i] = record[i];
  DeltaHeader h;
  memcpy(&h, raw, sizeof h);
  return h;
}

// One thread: the header against the chunk and the kept copy.
__global__ void delta_check_kernel(DeltaApplyK J, DeltaCheck* out) {
  const int64_t words = J.chunk_bytes / 2;
  const int64_t segs = (words + kDeltaSegmentWords - 1) / kDeltaSegmentWords;
  const int64_t fixed = kDeltaHeaderBytes + ((4 * segs + 15) & ~int64_t(15));
  *out = DeltaCheck{};
  out->fixed = fixed;
  if (J.record_bytes < kDeltaHeaderBytes) {
    delta_fail(out, kDeltaErrShort, J.record_bytes);
    return;
  }
  const DeltaHeader h = read_header(J.record);
  out->changed = h.changed;
  if (h.magic != kDeltaMagic) delta_fail(out, kDeltaErrMagic, h.magic);
  else if (h.format == 0) {
    if (J.record_bytes != kDeltaHeaderBytes + J.chunk_bytes) delta_fail(out, kDeltaErrWholeSize, 0);
    else out->whole = 1;
  } else if (h.format != 1) delta_fail(out, kDeltaErrFormat, h.format);
  else if (!J.have_kept) delta_fail(out, kDeltaErrNoKept, int64_t(h.base_version));
  else if (h.base_version != J.kept_version) delta_fail(out, kDeltaErrVersion, int64_t(h.base_version));
  else if (J.chunk_bytes % 2 != 0 || int64_t(h.words) != words) delta_fail(out, kDeltaErrWords, h.words);
  else if (J.record_bytes < fixed) delta_fail(out, kDeltaErrNoPrefix, fixed);
}

__device__ __forceinline__ int64_t count_before(const DeltaApplyK& J, const DeltaCheck* c, int64_t s, int64_t segs) {
  return s < segs ? int64_t(load_u32(J.record + kDeltaHeaderBytes + 4 * s)) : c->changed;
}

// A thread per segment: its count in range, and whether it carries a bitmap.
__global__ void delta_flags_kernel(DeltaApplyK J, DeltaCheck* chk, int64_t segs) {
  const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= segs) return;
  int32_t flag = 0;
  if (chk->error == 0 && !chk->whole) {
    const int64_t n = count_before(J, chk, s + 1, segs) - count_before(J, chk, s, segs);
    if (n < 0 || n > kDeltaSegmentWords) delta_fail(chk, kDeltaErrSegment, s);
    flag = n > 0;
  }
  J.flags[s] = flag;
}

// One thread, after the ranks' scan: the record's size against the header and the counts.
__global__ void delta_size_kernel(DeltaApplyK J, DeltaCheck* chk, int64_t segs) {
  if (chk->error != 0 || chk->whole) return;
  const int64_t with = segs > 0 ? int64_t(J.seg_rank[segs - 1]) + J.flags[segs - 1] : 0;
  const int64_t index = chk->fixed + int64_t(kDeltaSegmentWords / 8) * with;
  if (count_before(J, chk, 0, segs) != 0 || J.record_bytes != index + 2 * chk->changed)
    delta_fail(chk, kDeltaErrSize, index + 2 * chk->changed, with);
  chk->index = index;
}

// A block per segment: its changed words into the kept chunk (or, whole, its bytes).
__global__ void __launch_bounds__(kDeltaThreads) delta_apply_kernel(DeltaApplyK J, DeltaCheck* chk) {
  if (chk->error != 0) return;
  const int64_t s = blockIdx.x;
  const int64_t words = J.chunk_bytes / 2;
  const int64_t w0 = s * kDeltaSegmentWords + int64_t(threadIdx.x) * 8;
  if (chk->whole) {
    const int64_t lo = 2 * w0, hi = dmin(lo + 16, J.chunk_bytes);
    if (lo < hi) copy_bytes(J.kept, J.record + kDeltaHeaderBytes, lo, hi);
    return;
  }
  const int64_t segs = (words + kDeltaSegmentWords - 1) / kDeltaSegmentWords;
  const uint8_t* prefix = J.record + kDeltaHeaderBytes;
  const int64_t before = load_u32(prefix + 4 * s);
  const int64_t after = s + 1 < segs ? int64_t(load_u32(prefix + 4 * (s + 1))) : chk->changed;
  const int64_t n = after - before;
  if (n <= 0) return;  // (a negative count failed the check)
  unsigned m = J.record[chk->fixed + int64_t(kDeltaSegmentWords / 8) * J.seg_rank[s] + threadIdx.x];
  const int64_t here = dmin(words - s * kDeltaSegmentWords, kDeltaSegmentWords) - int64_t(threadIdx.x) * 8;
  if (here < 8 && (m >> dmax(here, 0)) != 0) {
    delta_fail(chk, kDeltaErrPastEnd, s);
    m = 0;
  }
  using Scan = cub::BlockScan<int, kDeltaThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int off = 0, total = 0;
  Scan(tmp).ExclusiveSum(__popc(m), off, total);
  if (total != n) {
    if (threadIdx.x == 0) delta_fail(chk, kDeltaErrBitmap, s);
    return;
  }
  const uint8_t* v = J.record + chk->index + 2 * (before + off);
  for (unsigned bits = m; bits != 0; bits &= bits - 1) {
    store_word(J.kept + 2 * (w0 + __ffs(bits) - 1), load_word(v));
    v += 2;
  }
}

}  // namespace shardsync::kernels
