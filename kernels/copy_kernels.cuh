// copy_kernels.cuh: the device side of lib/device's CUDA copies, synthetic fills and checks:
// the batched jobs kernel (DevJob, strided.cuh) and the transposing kernels. Included by
// device_kernels.cu (the Device) and by bench/gpu/strided_sweep.cu, which runs this very
// kernel on its access patterns beside its own.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "device/synth_hash.hpp"
#include "strided.cuh"

namespace shardsync {

namespace kernels {

namespace {

// Element offsets of outer iteration r of a job (DevJob, TransposeJob): its outer loops
// walked with the innermost fastest. `h` (DevJob, --checksum): the run's first element's
// index on the hashed side as well.
template <class Job>
__device__ __forceinline__ void run_base(const Job& j, int64_t r, int64_t* s, int64_t* d, int64_t* h = nullptr) {
  int64_t so = j.src_offset, dof = j.dst_offset, ho = 0;
  if constexpr (std::is_same_v<Job, DevJob>)
    if (h) ho = j.hash_offset;
  for (int k = j.outer - 1; k >= 0; --k) {
    int64_t n = j.size[k];
    int64_t i = r % n;
    r /= n;
    so += i * j.src_stride[k];
    dof += i * j.dst_stride[k];
    if constexpr (std::is_same_v<Job, DevJob>)
      if (h) ho += i * j.hash_stride[k];
  }
  *s = so;
  *d = dof;
  if (h) *h = ho;
}

template <int V>
struct Vec;
template <>
struct Vec<16> {
  using T = uint4;
};
template <>
struct Vec<8> {
  using T = uint2;
};
template <>
struct Vec<4> {
  using T = uint32_t;
};
template <>
struct Vec<2> {
  using T = uint16_t;
};
template <>
struct Vec<1> {
  using T = uint8_t;
};

// A copy's source load. kNc: through the read-only (non-coherent) data path, ld.global.nc;
// safe because no job of a launch reads what another writes (the jobs of one copy are
// independent) and nothing else writes a source while a copy runs. Else a plain load: the
// source pointer comes from a DevJob in memory, so the compiler emits a generic ld.
template <bool kNc, class T>
__device__ __forceinline__ T load_src(const T* p) {
  if constexpr (kNc) return __ldg(p);
  else return *p;
}

// --checksum: the terms of the V / EB elements of one unit, element k at index idx + k * step.
template <int V, int EB>
__device__ __forceinline__ uint64_t hash_elems(const typename Vec<V>::T& v, int64_t idx, int64_t step, int32_t tensor) {
  static_assert(V % EB == 0, "whole elements");
  uint64_t acc = 0;
  if constexpr (V >= 4 && EB <= 4) {
    union {
      typename Vec<V>::T v;
      uint32_t w[V / 4];
    } u;
    u.v = v;
    constexpr int kPer = 4 / EB;  // elements per 32-bit word
#pragma unroll
    for (int k = 0; k < V / EB; ++k) {
      const uint32_t word = u.w[k / kPer];
      const uint32_t bits = EB == 4 ? word : (word >> (8 * EB * (k % kPer))) & ((1u << (8 * (EB % 4))) - 1u);
      acc += checksum_term(tensor, idx + k * step, bits);
    }
  } else if constexpr (V == 8 && EB == 8) {
    acc = checksum_term(tensor, idx, (uint64_t(v.y) << 32) | v.x);
  } else if constexpr (V == 16 && EB == 8) {
    acc = checksum_term(tensor, idx, (uint64_t(v.y) << 32) | v.x) + checksum_term(tensor, idx + step, (uint64_t(v.w) << 32) | v.z);
  } else {  // V < 4: one or two bytes
    acc = checksum_term(tensor, idx, uint64_t(v) & ((uint64_t(1) << (8 * EB)) - 1));
    if constexpr (V == 2 && EB == 1) acc += checksum_term(tensor, idx + step, uint64_t(v) >> 8);
  }
  return acc;
}

// One unit's terms (elem_bytes chosen at run time, the unit's width at compile time).
template <int V>
__device__ __forceinline__ uint64_t hash_unit(const typename Vec<V>::T& v, int eb, int64_t idx, int64_t step, int32_t tensor) {
  switch (eb) {
    case 1: return hash_elems<V, 1>(v, idx, step, tensor);
    case 2:
      if constexpr (V % 2 == 0) return hash_elems<V, 2>(v, idx, step, tensor);
      break;
    case 4:
      if constexpr (V % 4 == 0) return hash_elems<V, 4>(v, idx, step, tensor);
      break;
    default:
      if constexpr (V % 8 == 0) return hash_elems<V, 8>(v, idx, step, tensor);
      break;
  }
  return 0;
}

// Whether a job's elements are hashed: a kHash job, or a copy with a tensor to hash.
__host__ __device__ __forceinline__ bool hashes(const DevJob& j) {
  return j.mode == kHash || (j.mode == kCopy && j.hash_tensor >= 0);
}

// A job's runs are contiguous on both sides: its units are vectors (or single elements of
// stride 1), so unit w of a run starts w * (unit_bytes / elem_bytes) elements in.
__host__ __device__ __forceinline__ bool runs_contiguous(const DevJob& j) {
  return j.unit_bytes != j.elem_bytes || (j.inner_src_stride == 1 && j.inner_dst_stride == 1);
}

// One unit of a job: `s`/`d`/`h` are the run's first element (source, destination, hashed
// index); `w` the unit within the run. Returns the unit's checksum terms (kH: a kernel of
// hashing jobs; 0 for a job that hashes nothing).
template <int V, bool kNc, bool kH>
__device__ __forceinline__ uint64_t do_unit(const DevJob& j, int64_t s, int64_t d, int64_t h, int64_t w,
                                            unsigned long long* bad, unsigned long long* first, int job_idx) {
  using T = typename Vec<V>::T;
  const int eb = j.elem_bytes;
  const bool contiguous = runs_contiguous(j);
  int64_t per = V / eb;  // elements per unit (1 when elementwise)
  int64_t se = contiguous ? s + w * per : s + w * j.inner_src_stride;
  int64_t de = contiguous ? d + w * per : d + w * j.inner_dst_stride;
  uint8_t* dp = j.dst + de * eb;
  if (j.mode == kCopy) {
    const T v = load_src<kNc>(reinterpret_cast<const T*>(j.src + se * eb));
    *reinterpret_cast<T*>(dp) = v;
    if constexpr (kH)
      if (j.hash_tensor >= 0) return hash_unit<V>(v, eb, h + w * per * j.hash_inner_stride, j.hash_inner_stride, j.hash_tensor);
    return 0;
  }
  if (j.mode == kHash) {  // read where it lies, nothing written (only ever launched with kH)
    if constexpr (kH)
      return hash_unit<V>(*reinterpret_cast<const T*>(dp), eb, h + w * per * j.hash_inner_stride, j.hash_inner_stride, j.hash_tensor);
    return 0;
  }
  // Synthetic values of `per` consecutive source elements, packed little-endian.
  union {
    T v;
    uint8_t b[V];
  } u;
  for (int64_t e = 0; e < per; ++e) {
    uint32_t x = j.mode == kZero || j.mode == kVerifyZero ? 0u : synth_value(j.key, se + e, eb);
    for (int k = 0; k < eb; ++k) u.b[e * eb + k] = k < 4 ? uint8_t(x >> (8 * k)) : 0;
  }
  if (j.mode == kVerify || j.mode == kVerifyZero) {
    union {
      T v;
      uint8_t b[V];
    } got;
    got.v = *reinterpret_cast<const T*>(dp);
    for (int64_t e = 0; e < per; ++e) {
      bool same = true;
      for (int k = 0; k < eb; ++k) same = same && got.b[e * eb + k] == u.b[e * eb + k];
      if (!same) {
        atomicAdd(bad, 1ull);
        atomicMin(first, (static_cast<unsigned long long>(job_idx) << 40) | static_cast<unsigned long long>(de + e));
      }
    }
    return 0;
  }
  *reinterpret_cast<T*>(dp) = u.v;
  return 0;
}

// A copy (or a hash) of one contiguous run on both sides, moved in whole vector units.
__host__ __device__ __forceinline__ bool is_one_run(const DevJob& j) {
  return (j.mode == kCopy || j.mode == kHash) && j.runs == 1 && runs_contiguous(j);
}

// A copy of rows: several runs, one outer loop (the row-parallel column slices, o_proj and
// down_proj halves), at most 2^31 units. Units [u, end) of the tile, four loads in flight
// per thread; a unit's run and place in it come from a 32-bit division, so a thread keeps
// no walking state (48 registers, five blocks of 256 per SM). In the kernel bench's --ipc
// run (Qwen3-8B TP2's pieces through a CUDA IPC mapping) these copies read at 59-60% of a
// contiguous copy, as every earlier form of this path did (walked 64-bit state, launch
// bounds, fields in registers, ld.global.nc); on the strided sweep's patterns, locally and
// through a mapping, this same kernel runs at the contiguous rate
// (results/gpu/one-pass/README.md, results/gpu/one-pass/nc-loads/). A kHash job of rows
// reads its dst side and writes nothing.
__host__ __device__ __forceinline__ bool is_rows(const DevJob& j) {
  return (j.mode == kCopy || j.mode == kHash) && j.runs > 1 && j.outer == 1 && j.runs * j.run_units <= (int64_t(1) << 31);
}

template <int V, bool kNc, bool kH>
__device__ __forceinline__ uint64_t copy_rows(const DevJob& j, int64_t u, int64_t end) {
  using T = typename Vec<V>::T;
  const int64_t eb = j.elem_bytes;
  const bool contiguous = runs_contiguous(j);
  const bool only_hash = kH && j.mode == kHash;
  const bool hash = kH && hashes(j);
  const int64_t per = V / eb;
  const int64_t us = (contiguous ? per : j.inner_src_stride) * eb;  // bytes from unit to unit of a run
  const int64_t ud = (contiguous ? per : j.inner_dst_stride) * eb;
  const int64_t rs = j.src_stride[0] * eb, rd = j.dst_stride[0] * eb;  // bytes from run to run
  const uint8_t* const src = only_hash ? j.dst + j.dst_offset * eb : j.src + j.src_offset * eb;
  uint8_t* const dst = j.dst + j.dst_offset * eb;
  const int64_t lrs = only_hash ? rd : rs, lus = only_hash ? ud : us;  // the loads' side
  const int64_t hu = per * j.hash_inner_stride, hr = j.hash_stride[0];  // index from unit to unit, run to run
  const uint32_t ru = uint32_t(j.run_units), e = uint32_t(end), step = blockDim.x;
  uint64_t acc = 0;
  for (uint32_t x = uint32_t(u); x < e; x += 4 * step) {
    T v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t y = x + k * step, r = y / ru;
      if (y < e) v[k] = load_src<kNc>(reinterpret_cast<const T*>(src + r * lrs + (y - r * ru) * lus));
    }
    if (!only_hash) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t y = x + k * step, r = y / ru;
        if (y < e) *reinterpret_cast<T*>(dst + r * rd + (y - r * ru) * ud) = v[k];
      }
    }
    if constexpr (kH) {
      if (hash) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint32_t y = x + k * step, r = y / ru;
          if (y < e)
            acc += hash_unit<V>(v[k], int(eb), j.hash_offset + int64_t(r) * hr + int64_t(y - r * ru) * hu, j.hash_inner_stride,
                                j.hash_tensor);
        }
      }
    }
  }
  return acc;
}

// The job of tile b: the last with first_tile[j] <= b (first_tile ascending, [0] = 0).
__device__ __forceinline__ int find_job(const int64_t* __restrict__ first_tile, int jobs, int64_t b) {
  int lo = 0, hi = jobs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (__ldg(first_tile + mid) <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Any job (the kernel without kRows): one-run copies as plain vector copies, the rest
// unit by unit. Returns the thread's checksum terms (kH).
template <int V, bool kNc, bool kH>
__device__ __forceinline__ uint64_t copy_any(const DevJob& j, int64_t u, int64_t end, unsigned long long* bad,
                                             unsigned long long* first) {
  uint64_t acc = 0;
  if (is_one_run(j)) {
    // One contiguous run (whole rows of a column-parallel slice, whole tensors): a plain
    // vector copy, four units in flight per thread.
    using T = typename Vec<V>::T;
    const bool only_hash = kH && j.mode == kHash;
    const T* src = reinterpret_cast<const T*>(only_hash ? j.dst + j.dst_offset * j.elem_bytes : j.src + j.src_offset * j.elem_bytes);
    T* dst = reinterpret_cast<T*>(j.dst + j.dst_offset * j.elem_bytes);
    const int64_t step = blockDim.x;
    if constexpr (kH) {
      if (hashes(j)) {  // the same walk, each unit hashed as it passes
        const int eb = j.elem_bytes;
        const int64_t per = V / eb, hs = j.hash_inner_stride;
        for (; u + 3 * step < end; u += 4 * step) {
          T a = load_src<kNc>(src + u), b = load_src<kNc>(src + u + step), c = load_src<kNc>(src + u + 2 * step),
            e = load_src<kNc>(src + u + 3 * step);
          if (!only_hash) {
            dst[u] = a;
            dst[u + step] = b;
            dst[u + 2 * step] = c;
            dst[u + 3 * step] = e;
          }
          const int64_t h = j.hash_offset + u * per * hs;
          acc += hash_unit<V>(a, eb, h, hs, j.hash_tensor) + hash_unit<V>(b, eb, h + step * per * hs, hs, j.hash_tensor) +
                 hash_unit<V>(c, eb, h + 2 * step * per * hs, hs, j.hash_tensor) +
                 hash_unit<V>(e, eb, h + 3 * step * per * hs, hs, j.hash_tensor);
        }
        for (; u < end; u += step) {
          const T a = load_src<kNc>(src + u);
          if (!only_hash) dst[u] = a;
          acc += hash_unit<V>(a, eb, j.hash_offset + u * per * hs, hs, j.hash_tensor);
        }
        return acc;
      }
    }
    for (; u + 3 * step < end; u += 4 * step) {
      T a = load_src<kNc>(src + u), b = load_src<kNc>(src + u + step), c = load_src<kNc>(src + u + 2 * step),
        e = load_src<kNc>(src + u + 3 * step);
      dst[u] = a;
      dst[u + step] = b;
      dst[u + 2 * step] = c;
      dst[u + 3 * step] = e;
    }
    for (; u < end; u += step) dst[u] = load_src<kNc>(src + u);
    return 0;
  }
  if (j.run_units >= blockDim.x) {
    // Long runs: locate the run once, then walk it; re-locate only when crossing a run.
    int64_t r = u / j.run_units, w = u - r * j.run_units, s, d, h = 0;
    run_base(j, r, &s, &d, kH ? &h : nullptr);
    for (; u < end; u += blockDim.x) {
      acc += do_unit<V, kNc, kH>(j, s, d, h, w, bad, first, j.id);
      w += blockDim.x;
      while (w >= j.run_units && u + blockDim.x < end) {
        w -= j.run_units;
        run_base(j, ++r, &s, &d, kH ? &h : nullptr);
      }
    }
  } else {
    for (; u < end; u += blockDim.x) {
      int64_t r = u / j.run_units, w = u - r * j.run_units, s, d, h = 0;
      run_base(j, r, &s, &d, kH ? &h : nullptr);
      acc += do_unit<V, kNc, kH>(j, s, d, h, w, bad, first, j.id);
    }
  }
  return acc;
}

// Jobs of one vector width V. kRows: copies of rows only (copy_rows); else any job. kNc:
// sources through the read-only path (load_src). kH: a launch with hashing jobs (--checksum):
// each warp adds its terms of a hashing job to sums[hash_slot].
template <int V, bool kRows, bool kNc, bool kH = false>
__global__ void jobs_kernel(const DevJob* jobs, const int64_t* first_tile, int njobs, unsigned long long* bad,
                            unsigned long long* first, unsigned long long* sums = nullptr) {
  const int64_t b = blockIdx.x;
  const int ji = find_job(first_tile, njobs, b);
  const DevJob& j = jobs[ji];
  const int64_t first_unit = (b - first_tile[ji]) * kTileUnits;
  const int64_t end = min(first_unit + kTileUnits, j.runs * j.run_units);
  int64_t u = first_unit + threadIdx.x;
  if constexpr (!kH) {
    if (u >= end) return;
    if constexpr (kRows) copy_rows<V, kNc, false>(j, u, end);
    else copy_any<V, kNc, false>(j, u, end, bad, first);
  } else {
    unsigned long long acc = 0;  // every thread of the block reaches the warp sums below
    if (u < end) {
      if constexpr (kRows) acc = copy_rows<V, kNc, true>(j, u, end);
      else acc = copy_any<V, kNc, true>(j, u, end, bad, first);
    }
    if (!hashes(j)) return;  // the same for the whole block
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0 && acc != 0) atomicAdd(sums + j.hash_slot, acc);
  }
}

// Where tile b of a transposing job starts: the outer iteration's element offsets and the
// tile's first i and j (tiles of `side` x `side`, along i first).
__device__ __forceinline__ void tile_origin(const TransposeJob& j, int64_t b, int64_t side, int64_t* so, int64_t* dof,
                                            int64_t* i0, int64_t* j0) {
  const int64_t o = b / j.tiles, t = b - o * j.tiles;
  run_base(j, o, so, dof);
  *i0 = (t % j.tiles_i) * side;
  *j0 = (t / j.tiles_i) * side;
}

// Block (kTransposeTile, 8): each block moves tiles b, b + gridDim.x, ... of j.total.
template <class T>
__global__ void transpose_kernel(TransposeJob j) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];  // + 1: column reads spread over banks
  const T* src = reinterpret_cast<const T*>(j.src);
  T* dst = reinterpret_cast<T*>(j.dst);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  for (int64_t b = blockIdx.x; b < j.total; b += gridDim.x) {
    int64_t so, dof, i0, j0;
    tile_origin(j, b, kTransposeTile, &so, &dof, &i0, &j0);
    for (int r = ty; r < kTransposeTile; r += int(blockDim.y))  // along source rows j0 + r
      if (i0 + tx < j.ni && j0 + r < j.nj) tile[r][tx] = src[so + i0 + tx + (j0 + r) * j.ss];
    __syncthreads();
    for (int r = ty; r < kTransposeTile; r += int(blockDim.y))  // along destination rows i0 + r
      if (i0 + r < j.ni && j0 + tx < j.nj) dst[dof + (i0 + r) * j.ds + j0 + tx] = tile[tx][r];
    __syncthreads();
  }
}

// 16-bit elements in pairs, where every offset, stride and base allows 4-byte accesses:
// 64 x 64 tiles, 32-bit loads along source rows and 32-bit stores along destination rows (a
// warp moves 128 bytes a row, where single 16-bit elements move 64). Tiles past the edges go
// element by element.
__global__ void transpose16_kernel(TransposeJob j) {
  constexpr int kT = 2 * kTransposeTile;
  __shared__ uint16_t tile[kT][kT + 1];  // odd row length: column reads spread over banks
  const uint16_t* src = reinterpret_cast<const uint16_t*>(j.src);
  uint16_t* dst = reinterpret_cast<uint16_t*>(j.dst);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y), ry = int(blockDim.y);
  for (int64_t b = blockIdx.x; b < j.total; b += gridDim.x) {
    int64_t so, dof, i0, j0;
    tile_origin(j, b, kT, &so, &dof, &i0, &j0);
    if (i0 + kT <= j.ni && j0 + kT <= j.nj) {  // the same for the whole block
      for (int r = ty; r < kT; r += ry) {
        const uint32_t w = *reinterpret_cast<const uint32_t*>(src + so + i0 + 2 * tx + (j0 + r) * j.ss);
        tile[r][2 * tx] = uint16_t(w);
        tile[r][2 * tx + 1] = uint16_t(w >> 16);
      }
      __syncthreads();
      for (int r = ty; r < kT; r += ry)
        *reinterpret_cast<uint32_t*>(dst + dof + (i0 + r) * j.ds + j0 + 2 * tx) =
            uint32_t(tile[2 * tx][r]) | (uint32_t(tile[2 * tx + 1][r]) << 16);
    } else {
      for (int r = ty; r < kT; r += ry)
        for (int c = tx; c < kT; c += kTransposeTile)
          if (i0 + c < j.ni && j0 + r < j.nj) tile[r][c] = src[so + i0 + c + (j0 + r) * j.ss];
      __syncthreads();
      for (int r = ty; r < kT; r += ry)
        for (int c = tx; c < kT; c += kTransposeTile)
          if (i0 + r < j.ni && j0 + c < j.nj) dst[dof + (i0 + r) * j.ds + j0 + c] = tile[c][r];
    }
    __syncthreads();
  }
}

}  // namespace

}  // namespace kernels

}  // namespace shardsync
