// device_kernels.cu: the CUDA device (lib/device/device.hpp) and its batched kernels.
// CPU twins: execute_copy (lib/tensor/view.cpp), cpu_synth and cpu_verify
// (lib/device/cpu_device.cpp); tests/kernels compare the two on random jobs.
//
//   build/tests/test_kernels --gtest_filter='Kernels.*'   # skips without a GPU
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "common/error.hpp"
#include "device/device.hpp"
#include "device/synth_hash.hpp"
#include "common/check.hpp"
#include "strided.cuh"

namespace shardsync {

namespace kernels {

namespace {

// Element offsets of outer iteration r of a job (DevJob, TransposeJob): its outer loops
// walked with the innermost fastest.
template <class Job>
__device__ __forceinline__ void run_base(const Job& j, int64_t r, int64_t* s, int64_t* d) {
  int64_t so = j.src_offset, dof = j.dst_offset;
  for (int k = j.outer - 1; k >= 0; --k) {
    int64_t n = j.size[k];
    int64_t i = r % n;
    r /= n;
    so += i * j.src_stride[k];
    dof += i * j.dst_stride[k];
  }
  *s = so;
  *d = dof;
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

// A job's runs are contiguous on both sides: its units are vectors (or single elements of
// stride 1), so unit w of a run starts w * (unit_bytes / elem_bytes) elements in.
__host__ __device__ __forceinline__ bool runs_contiguous(const DevJob& j) {
  return j.unit_bytes != j.elem_bytes || (j.inner_src_stride == 1 && j.inner_dst_stride == 1);
}

// One unit of a job: `s`/`d` are the run's first element; `w` the unit within the run.
template <int V>
__device__ __forceinline__ void do_unit(const DevJob& j, int64_t s, int64_t d, int64_t w, unsigned long long* bad,
                                        unsigned long long* first, int job_idx) {
  using T = typename Vec<V>::T;
  const int eb = j.elem_bytes;
  const bool contiguous = runs_contiguous(j);
  int64_t per = V / eb;  // elements per unit (1 when elementwise)
  int64_t se = contiguous ? s + w * per : s + w * j.inner_src_stride;
  int64_t de = contiguous ? d + w * per : d + w * j.inner_dst_stride;
  uint8_t* dp = j.dst + de * eb;
  if (j.mode == kCopy) {
    *reinterpret_cast<T*>(dp) = *reinterpret_cast<const T*>(j.src + se * eb);
    return;
  }
  // Synthetic values of `per` consecutive source elements, packed little-endian.
  union {
    T v;
    uint8_t b[V];
  } u;
  for (int64_t e = 0; e < per; ++e) {
    uint32_t x = j.mode == kZero ? 0u : synth_bits(j.seed, se + e);
    for (int k = 0; k < eb; ++k) u.b[e * eb + k] = k < 4 ? uint8_t(x >> (8 * k)) : 0;
  }
  if (j.mode == kVerify) {
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
    return;
  }
  *reinterpret_cast<T*>(dp) = u.v;
}

// A copy of one contiguous run on both sides, moved in whole vector units.
__host__ __device__ __forceinline__ bool is_one_run(const DevJob& j) {
  return j.mode == kCopy && j.runs == 1 && runs_contiguous(j);
}

// A copy of rows: several runs, one outer loop (the row-parallel column slices, o_proj and
// down_proj halves), at most 2^31 units. Units [u, end) of the tile, four loads in flight
// per thread; a unit's run and place in it come from a 32-bit division, so a thread keeps
// no walking state (48 registers, five blocks of 256 per SM). Through a CUDA IPC mapping
// these copies still read at 59% of a contiguous copy, as every earlier form of this path
// did (walked 64-bit state, launch bounds, fields in registers); from local memory they
// run at the contiguous rate: results/gpu/one-pass/README.md.
__host__ __device__ __forceinline__ bool is_rows(const DevJob& j) {
  return j.mode == kCopy && j.runs > 1 && j.outer == 1 && j.runs * j.run_units <= (int64_t(1) << 31);
}

template <int V>
__device__ __forceinline__ void copy_rows(const DevJob& j, int64_t u, int64_t end) {
  using T = typename Vec<V>::T;
  const int64_t eb = j.elem_bytes;
  const bool contiguous = runs_contiguous(j);
  const int64_t us = (contiguous ? V / eb : j.inner_src_stride) * eb;  // bytes from unit to unit of a run
  const int64_t ud = (contiguous ? V / eb : j.inner_dst_stride) * eb;
  const int64_t rs = j.src_stride[0] * eb, rd = j.dst_stride[0] * eb;  // bytes from run to run
  const uint8_t* const src = j.src + j.src_offset * eb;
  uint8_t* const dst = j.dst + j.dst_offset * eb;
  const uint32_t ru = uint32_t(j.run_units), e = uint32_t(end), step = blockDim.x;
  for (uint32_t x = uint32_t(u); x < e; x += 4 * step) {
    T v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t y = x + k * step, r = y / ru;
      if (y < e) v[k] = *reinterpret_cast<const T*>(src + r * rs + (y - r * ru) * us);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t y = x + k * step, r = y / ru;
      if (y < e) *reinterpret_cast<T*>(dst + r * rd + (y - r * ru) * ud) = v[k];
    }
  }
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
// unit by unit.
template <int V>
__device__ __forceinline__ void copy_any(const DevJob& j, int64_t u, int64_t end, unsigned long long* bad,
                                         unsigned long long* first) {
  if (is_one_run(j)) {
    // One contiguous run (whole rows of a column-parallel slice, whole tensors): a plain
    // vector copy, four units in flight per thread.
    using T = typename Vec<V>::T;
    const T* src = reinterpret_cast<const T*>(j.src + j.src_offset * j.elem_bytes);
    T* dst = reinterpret_cast<T*>(j.dst + j.dst_offset * j.elem_bytes);
    const int64_t step = blockDim.x;
    for (; u + 3 * step < end; u += 4 * step) {
      T a = src[u], b = src[u + step], c = src[u + 2 * step], e = src[u + 3 * step];
      dst[u] = a;
      dst[u + step] = b;
      dst[u + 2 * step] = c;
      dst[u + 3 * step] = e;
    }
    for (; u < end; u += step) dst[u] = src[u];
    return;
  }
  if (j.run_units >= blockDim.x) {
    // Long runs: locate the run once, then walk it; re-locate only when crossing a run.
    int64_t r = u / j.run_units, w = u - r * j.run_units, s, d;
    run_base(j, r, &s, &d);
    for (; u < end; u += blockDim.x) {
      do_unit<V>(j, s, d, w, bad, first, j.id);
      w += blockDim.x;
      while (w >= j.run_units && u + blockDim.x < end) {
        w -= j.run_units;
        run_base(j, ++r, &s, &d);
      }
    }
  } else {
    for (; u < end; u += blockDim.x) {
      int64_t r = u / j.run_units, w = u - r * j.run_units, s, d;
      run_base(j, r, &s, &d);
      do_unit<V>(j, s, d, w, bad, first, j.id);
    }
  }
}

// Jobs of one vector width V. kRows: copies of rows only (copy_rows); else any job.
template <int V, bool kRows>
__global__ void jobs_kernel(const DevJob* jobs, const int64_t* first_tile, int njobs, unsigned long long* bad,
                            unsigned long long* first) {
  const int64_t b = blockIdx.x;
  const int ji = find_job(first_tile, njobs, b);
  const DevJob& j = jobs[ji];
  const int64_t first_unit = (b - first_tile[ji]) * kTileUnits;
  const int64_t end = min(first_unit + kTileUnits, j.runs * j.run_units);
  int64_t u = first_unit + threadIdx.x;
  if (u >= end) return;
  if constexpr (kRows) copy_rows<V>(j, u, end);
  else copy_any<V>(j, u, end, bad, first);
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

namespace {

using kernels::DevJob;

// Converts a CopyDesc job to the kernel form, choosing the widest safe vector unit.
DevJob make_dev_job(const CopyDesc& desc, const uint8_t* src, uint8_t* dst, int32_t eb, int32_t mode, uint64_t seed) {
  if (desc.dims.size() > size_t(kernels::kMaxOuter) + 1)
    throw Error("device kernels: a copy with more than 8 loops");
  DevJob j{};
  j.src = src;
  j.dst = dst;
  j.src_offset = desc.src_offset;
  j.dst_offset = desc.dst_offset;
  j.elem_bytes = eb;
  j.mode = mode;
  j.seed = seed;
  const CopyDim& in = desc.dims.back();
  j.outer = int32_t(desc.dims.size()) - 1;
  for (int k = 0; k < j.outer; ++k) {
    j.size[k] = desc.dims[size_t(k)].size;
    j.src_stride[k] = desc.dims[size_t(k)].src_stride;
    j.dst_stride[k] = desc.dims[size_t(k)].dst_stride;
  }
  j.inner_src_stride = in.src_stride;
  j.inner_dst_stride = in.dst_stride;
  j.runs = in.size == 0 ? 0 : desc.numel / in.size;
  // Vector width: both sides contiguous (synth: the index side is always "contiguous" when
  // its stride is 1), every run start and the base pointers aligned to it.
  bool src_contig = in.src_stride == 1 || mode == kernels::kZero, dst_contig = in.dst_stride == 1;
  int32_t v = eb;
  if (src_contig && dst_contig) {
    for (int32_t cand : {16, 8, 4}) {
      if (cand <= eb || cand % eb) continue;
      int64_t per = cand / eb;
      bool ok = in.size % per == 0 && desc.dst_offset % per == 0 &&
                reinterpret_cast<uintptr_t>(dst) % uintptr_t(cand) == 0;
      if (mode == kernels::kCopy)
        ok = ok && desc.src_offset % per == 0 && reinterpret_cast<uintptr_t>(src) % uintptr_t(cand) == 0;
      for (int k = 0; ok && k < j.outer; ++k) {
        ok = j.dst_stride[k] % per == 0;
        if (mode == kernels::kCopy) ok = ok && j.src_stride[k] % per == 0;
      }
      if (ok) {
        v = cand;
        break;
      }
    }
  }
  j.unit_bytes = v;
  j.run_units = in.size / (v / eb);
  return j;
}

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int gpu) : gpu_(gpu) {
    CUDA_CHECK(cudaSetDevice(gpu));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[0], cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[1], cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&counters_, 2 * sizeof(unsigned long long)));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
    name_ = prop.name;
  }
  ~CudaDevice() override {
    cudaDeviceSynchronize();
    for (auto e : events_) cudaEventDestroy(e);
    cudaFree(counters_);
    cudaStreamDestroy(streams_[0]);
    cudaStreamDestroy(streams_[1]);
  }
  MemKind kind() const override { return MemKind::kCuda; }
  std::string describe() const override { return "cuda:" + std::to_string(gpu_) + " (" + name_ + ")"; }
  int gpu() const override { return gpu_; }
  uint8_t* alloc(int64_t bytes) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(bytes, 16))));
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* p) override { CUDA_CHECK(cudaFree(p)); }

  // Transposing jobs get the tiled kernel, one launch each; the rest go in batched launches,
  // one per vector width for copies of rows (is_rows) and one for the others (jobs of one copy
  // are independent: any order). Not cudaMemcpyAsync for
  // the large one-run jobs: the batched kernel reads an IPC mapping at 92% of cudaMemcpy's
  // rate (bench/gpu/copy_sweep.cu), and one launch beat hundreds of memcpy calls where
  // several ranks share the GPU (results/gpu/one-pass).
  void copy(const std::vector<CopyJob>& jobs, Lane lane) override {
    std::vector<DevJob> dj;
    std::vector<kernels::TransposeJob> tj;
    for (const CopyJob& j : jobs) {  // every job checked before anything is queued
      if (j.desc.numel == 0) continue;
      if (copy_transposes(j.desc) && (j.elem_bytes == 1 || j.elem_bytes == 2 || j.elem_bytes == 4 || j.elem_bytes == 8))
        tj.push_back(make_transpose_job(j));
      else
        dj.push_back(make_dev_job(j.desc, j.src, j.dst, j.elem_bytes, kernels::kCopy, 0));
    }
    for (const kernels::TransposeJob& t : tj) launch_transpose(t, stream(lane));
    launch(dj, lane);
  }
  void synth(const std::vector<SynthJob>& jobs, Lane lane) override {
    std::vector<DevJob> dj;
    for (const SynthJob& j : jobs)
      if (j.desc.numel > 0)
        dj.push_back(make_dev_job(j.desc, nullptr, j.dst, j.elem_bytes, j.zero ? kernels::kZero : kernels::kSynth, j.seed));
    launch(dj, lane);
  }
  void memcpy(uint8_t* dst, const uint8_t* src, int64_t bytes, Lane lane) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, stream(lane)));
  }
  Fence fence(Lane lane) override {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, stream(lane)));
    events_.push_back(e);
    return Fence(events_.size() - 1);
  }
  bool done(Fence f) override {
    cudaError_t st = cudaEventQuery(events_.at(size_t(f)));
    if (st == cudaErrorNotReady) return false;
    CUDA_CHECK(st);
    return true;
  }
  void after(Lane lane, Fence f) override { CUDA_CHECK(cudaStreamWaitEvent(stream(lane), events_.at(size_t(f)), 0)); }
  void synchronize() override {
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    CUDA_CHECK(cudaStreamSynchronize(streams_[1]));
    // Fences recorded so far are complete: recycle them.
    for (auto e : events_) CUDA_CHECK(cudaEventDestroy(e));
    events_.clear();
  }
  VerifyResult verify(const std::vector<SynthJob>& jobs) override {
    std::vector<DevJob> dj;
    std::vector<int64_t> index;  // device job -> caller's job
    for (size_t i = 0; i < jobs.size(); ++i)
      if (jobs[i].desc.numel > 0) {
        dj.push_back(make_dev_job(jobs[i].desc, nullptr, jobs[i].dst, jobs[i].elem_bytes, kernels::kVerify, jobs[i].seed));
        index.push_back(int64_t(i));
      }
    unsigned long long init[2] = {0ull, ~0ull};
    CUDA_CHECK(cudaMemcpyAsync(counters_, init, sizeof init, cudaMemcpyHostToDevice, streams_[0]));
    launch(dj, Lane::kMain);
    unsigned long long out[2];
    CUDA_CHECK(cudaMemcpyAsync(out, counters_, sizeof out, cudaMemcpyDeviceToHost, streams_[0]));
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    VerifyResult r;
    r.mismatches = int64_t(out[0]);
    if (r.mismatches > 0) {
      r.first_job = index.at(size_t(out[1] >> 40));
      r.first_index = int64_t(out[1] & ((1ull << 40) - 1));
    }
    return r;
  }
  void to_host(void* dst, const uint8_t* src, int64_t bytes) override {
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    CUDA_CHECK(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDeviceToHost));
  }
  void from_host(uint8_t* dst, const void* src, int64_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, streams_[0]));
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
  }
  void* main_stream() override { return streams_[0]; }
  std::vector<uint8_t> ipc_handle(uint8_t* base) override {
    cudaIpcMemHandle_t h;
    CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
    std::vector<uint8_t> out(sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }
  uint8_t* ipc_open(const std::vector<uint8_t>& handle) override {
    cudaIpcMemHandle_t h;
    if (handle.size() != sizeof h) throw Error("cuda device: a CUDA IPC handle of the wrong size");
    std::memcpy(&h, handle.data(), sizeof h);
    void* p = nullptr;
    CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    return static_cast<uint8_t*>(p);
  }
  void ipc_close(uint8_t* mapped) override { CUDA_CHECK(cudaIpcCloseMemHandle(mapped)); }
  uint8_t* host_alloc(int64_t bytes) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, size_t(std::max<int64_t>(bytes, 16))));
    return static_cast<uint8_t*>(p);
  }
  void host_release(uint8_t* p) override { CUDA_CHECK(cudaFreeHost(p)); }

 private:
  cudaStream_t stream(Lane lane) const { return streams_[lane == Lane::kMain ? 0 : 1]; }

  // Tiles every job and launches one kernel per vector width present: the jobs and each
  // one's first tile go up (the tiles themselves are found on the device).
  void launch(std::vector<DevJob> jobs, Lane lane) {
    if (jobs.empty()) return;
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].id = int32_t(i);
    cudaStream_t s = stream(lane);
    for (int v : {16, 8, 4, 2, 1})
      for (bool rows : {false, true}) launch_kind(jobs, v, rows, s);
  }

  // The jobs of vector width v that are (rows) or are not copies of rows (is_rows): one launch.
  void launch_kind(const std::vector<DevJob>& jobs, int v, bool rows, cudaStream_t s) {
    std::vector<DevJob> sel;
    std::vector<int64_t> first_tile;
    int64_t tiles = 0;
    for (const DevJob& j : jobs) {
      const int64_t units = j.runs * j.run_units;
      if (j.unit_bytes != v || units == 0 || rows != kernels::is_rows(j)) continue;
      sel.push_back(j);
      first_tile.push_back(tiles);
      tiles += (units + kernels::kTileUnits - 1) / kernels::kTileUnits;
    }
    if (tiles == 0) return;
    if (tiles > int64_t(INT32_MAX)) throw Error("device kernels: a batch of more than 2^31 tiles");
    size_t jb = sel.size() * sizeof(DevJob), tb = first_tile.size() * sizeof(int64_t);
    uint8_t* d = nullptr;
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), jb + tb, s));
    // Pageable sources: the copies complete (to a driver buffer) before returning.
    CUDA_CHECK(cudaMemcpyAsync(d, sel.data(), jb, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(d + jb, first_tile.data(), tb, cudaMemcpyHostToDevice, s));
    auto* dj = reinterpret_cast<const DevJob*>(d);
    auto* dt = reinterpret_cast<const int64_t*>(d + jb);
    const int n = int(sel.size());
    unsigned grid = unsigned(tiles);
    auto* bad = reinterpret_cast<unsigned long long*>(counters_);
    if (rows) launch_jobs<true>(v, grid, s, dj, dt, n, bad);
    else launch_jobs<false>(v, grid, s, dj, dt, n, bad);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaFreeAsync(d, s));
  }

  template <bool kRows>
  static void launch_jobs(int v, unsigned grid, cudaStream_t s, const DevJob* dj, const int64_t* dt, int n,
                          unsigned long long* bad) {
    switch (v) {
      case 16: kernels::jobs_kernel<16, kRows><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1); break;
      case 8: kernels::jobs_kernel<8, kRows><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1); break;
      case 4: kernels::jobs_kernel<4, kRows><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1); break;
      case 2: kernels::jobs_kernel<2, kRows><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1); break;
      default: kernels::jobs_kernel<1, kRows><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1); break;
    }
  }

  static kernels::TransposeJob make_transpose_job(const CopyJob& cj) {
    const CopyDesc& d = cj.desc;
    const size_t n = d.dims.size();
    if (n > size_t(kernels::kMaxOuter) + 2) throw Error("device kernels: a transposing copy with more than 9 loops");
    constexpr int64_t kT = kernels::kTransposeTile;
    kernels::TransposeJob t{};
    t.src = cj.src;
    t.dst = cj.dst;
    t.src_offset = d.src_offset;
    t.dst_offset = d.dst_offset;
    t.ni = d.dims[n - 2].size;
    t.nj = d.dims[n - 1].size;
    t.ss = d.dims[n - 1].src_stride;
    t.ds = d.dims[n - 2].dst_stride;
    t.outer = int32_t(n - 2);
    // 16-bit pairs where every offset, stride and base is even (4-byte aligned accesses).
    bool pairs = cj.elem_bytes == 2 && t.src_offset % 2 == 0 && t.dst_offset % 2 == 0 && t.ss % 2 == 0 &&
                 t.ds % 2 == 0 && reinterpret_cast<uintptr_t>(cj.src) % 4 == 0 &&
                 reinterpret_cast<uintptr_t>(cj.dst) % 4 == 0;
    for (size_t k = 0; k + 2 < n; ++k) {
      t.size[k] = d.dims[k].size;
      t.src_stride[k] = d.dims[k].src_stride;
      t.dst_stride[k] = d.dims[k].dst_stride;
      pairs = pairs && t.src_stride[k] % 2 == 0 && t.dst_stride[k] % 2 == 0;
    }
    const int64_t tile = pairs ? 2 * kT : kT;
    t.tiles_i = (t.ni + tile - 1) / tile;
    t.tiles = t.tiles_i * ((t.nj + tile - 1) / tile);
    t.total = t.tiles * (d.numel / (t.ni * t.nj));
    t.elem_bytes = cj.elem_bytes;
    t.pairs = pairs ? 1 : 0;
    return t;
  }

  static void launch_transpose(const kernels::TransposeJob& t, cudaStream_t s) {
    const unsigned grid = unsigned(std::min<int64_t>(t.total, int64_t(1) << 16));
    const dim3 block(unsigned(kernels::kTransposeTile), 8);
    if (t.pairs) kernels::transpose16_kernel<<<grid, block, 0, s>>>(t);
    else
      switch (t.elem_bytes) {
        case 1: kernels::transpose_kernel<uint8_t><<<grid, block, 0, s>>>(t); break;
        case 2: kernels::transpose_kernel<uint16_t><<<grid, block, 0, s>>>(t); break;
        case 4: kernels::transpose_kernel<uint32_t><<<grid, block, 0, s>>>(t); break;
        default: kernels::transpose_kernel<uint64_t><<<grid, block, 0, s>>>(t); break;
      }
    CUDA_CHECK(cudaGetLastError());
  }

  int gpu_;
  std::string name_;
  cudaStream_t streams_[2]{};
  void* counters_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int gpu) { return std::make_unique<CudaDevice>(gpu); }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_error() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n > 0 ? "" : "cudaGetDeviceCount found no device";
  cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::vector<std::pair<std::string, std::string>> cuda_versions() {
  auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int rt = 0, drv = 0;
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("cuda_runtime", cudaRuntimeGetVersion(&rt) == cudaSuccess ? dotted(rt) : "?");
  out.emplace_back("cuda_driver", cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0 ? dotted(drv) : "none");
  cudaDeviceProp prop{};
  if (cuda_device_count() > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    out.emplace_back("gpu", prop.name);
  else
    out.emplace_back("gpu", "none");
  cudaGetLastError();
  return out;
}

bool cuda_built() { return true; }

}  // namespace shardsync
