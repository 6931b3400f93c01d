// strided_sweep: why a copy of column slices (runs of R bytes every S bytes, the row-parallel
// halves of o_proj and down_proj) reads at half the rate of a contiguous copy. Each case
// copies 1 GiB (or GiB) of runs from a source of four times that into a dense destination (or,
// "unpack", a dense source into runs), in tiles of 128 KiB, one block each, four 16-byte loads
// in flight per thread (the batched kernel's shape); "stream" with __ldcs/__stcs; "scatter"
// takes the tiles in a scattered order; "pair" interleaves the two complementary halves
// (tiles alternate), as one launch for both TP ranks would. Every byte checked after it is
// timed. One JSON line per case. In-order cases also run the engine's own batched kernel
// (kernels/copy_kernels.cuh, jobs_kernel) on the same bytes: as one job, and cut into jobs
// of 16 MiB (a TP2 o_proj half), with plain and with read-only-path (ld.global.nc) source
// loads ("kernel": sweep, engine, engine-nc).
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -Ilib -Ikernels bench/gpu/strided_sweep.cu -o strided_sweep -lcuda
//   ./strided_sweep [reps] [GiB] [local|ipc|vmm|vmm-local]
//
// ipc: the source lives in a child process and is read through a CUDA IPC mapping (the
// one-pass path), as the kernel bench --ipc reads it (where the strided pieces run at half the
// contiguous rate). Measured on an H200 at 9e99ee1, every case here runs at the contiguous
// rate through the mapping too (results/gpu/one-pass/sweeps-at-9e99ee1/).
// vmm: the child allocates the source with cuMemCreate, exports it as a POSIX file
// descriptor (sent over a socket), and this process maps it with cuMemMap at the
// allocation's granularity: the other way to read another process's memory. vmm-local: the
// same allocation made and mapped in this process (VMM without a second process).
#include <cuda.h>
#include <cuda_runtime.h>

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.cuh"
#include "copy_kernels.cuh"

constexpr int64_t kTile = 8192;  // 16-byte units per block

struct Case {
  const char* name;
  int64_t stride, run, offset;  // bytes: runs of `run` at `offset` of every `stride`
  int64_t dense_offset;         // bytes: where the dense side starts
  int order;    // 0 in order, 1 scattered tiles, 2 both halves (pair), 3 in order, streaming
                // loads/stores
  bool unpack;  // dense source -> runs
};

__device__ __forceinline__ uint4 value(int64_t unit) {  // the source's 16-byte unit `unit`
  uint64_t x = uint64_t(unit) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return make_uint4(uint32_t(x), uint32_t(x >> 32), uint32_t(unit), uint32_t(~x));
}

__global__ void fill(uint4* s, int64_t n) {
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n;
       u += int64_t(gridDim.x) * blockDim.x)
    s[u] = value(u);
}

// The strided side's unit of dense unit u (runs of `ru` units every `su`, first at `ou`;
// pair: even tiles the first half, odd tiles the second, each half's dense units in order).
__device__ __forceinline__ int64_t runs_unit(int64_t u, int64_t ru, int64_t su, int64_t ou) {
  const uint32_t r =
      uint32_t(u) / uint32_t(ru);  // u < 2^32 (at most 64 GiB moved): a 32-bit division
  return int64_t(r) * su + ou + (u - int64_t(r) * ru);
}

__global__ void copy(const uint4* __restrict__ s, uint4* __restrict__ d, int64_t n, int64_t ru,
                     int64_t su, int64_t ou, int64_t od, int order, int unpack, int64_t tiles) {
  int64_t t = blockIdx.x;
  if (order == 1) t = (t * 7919) % tiles;  // 7919 is prime, tiles a power of two: a permutation
  int64_t half_off = ou, base = t * kTile;
  if (order == 2) {  // tile t: half t % 2, its tile t / 2 of that half's dense units
    half_off = (t % 2) * ru;
    base = (t / 2) * kTile;
  }
  const int64_t end = min(base + kTile, n);
  const int64_t step = blockDim.x;
  for (int64_t u = base + threadIdx.x; u < end; u += 4 * step) {
    int64_t from[4], to[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t x = u + k * step, y = runs_unit(x, ru, su, half_off);
      const int64_t dense = (order == 2 ? (t % 2) * n + x : x) + od;
      from[k] = unpack ? dense : y;
      to[k] = unpack ? y : dense;
    }
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (u + k * step < end) v[k] = order == 3 ? __ldcs(s + from[k]) : s[from[k]];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (u + k * step < end) {
        if (order == 3)
          __stcs(d + to[k], v[k]);
        else
          d[to[k]] = v[k];
      }
  }
}

__global__ void check(const uint4* __restrict__ d, int64_t n, int64_t ru, int64_t su, int64_t ou,
                      int64_t od, int order, int unpack, unsigned long long* bad) {
  const int halves = order == 2 ? 2 : 1;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * halves;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t h = i / n, x = i - h * n;
    const int64_t y = runs_unit(x, ru, su, order == 2 ? h * ru : ou),
                  dense = (order == 2 ? h * n + x : x) + od;
    const uint4 want = value(unpack ? dense : y), got = d[unpack ? y : dense];
    if (want.x != got.x || want.y != got.y || want.z != got.z || want.w != got.w)
      atomicAdd(bad, 1ull);
  }
}

#define CU(x)                                                                        \
  do {                                                                               \
    CUresult r_ = (x);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                        \
      const char* m_ = "?";                                                          \
      cuGetErrorString(r_, &m_);                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, m_);            \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Device 0's VMM allocation properties, exportable as a POSIX file descriptor.
CUmemAllocationProp vmm_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Maps `handle` (bytes, a multiple of the granularity) read-write for device 0.
void* vmm_map(CUmemGenericAllocationHandle handle, size_t bytes, size_t granularity) {
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, bytes, granularity, 0, 0));
  CU(cuMemMap(va, bytes, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, bytes, &access, 1));
  return reinterpret_cast<void*>(va);
}

size_t vmm_granularity() {
  CUmemAllocationProp prop = vmm_prop();
  size_t g = 0;
  CU(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  return g;
}

// One byte, with room in the control data for one file descriptor (SCM_RIGHTS); not copied.
struct FdMessage {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof ctl;
  }
  FdMessage(const FdMessage&) = delete;
};

void send_fd(int sock, int fd) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (sendmsg(sock, &m.msg, 0) != 1) _exit(1);
}

int recv_fd(int sock) {
  FdMessage m;
  if (recvmsg(sock, &m.msg, 0) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

// The engine's batched kernel on a case: the dense units [0, n) <-> runs of ru units every su
// (first at ou), cut into jobs of `per_job` runs, and where ru does not divide n, one more
// job for the last, partial run; kNc picks the source loads. Median time in ms over reps
// (after one warm-up); the destination is then what `copy` writes. *njobs: the jobs launched.
template <bool kNc>
float engine_kernel(const uint4* s, uint4* d, int64_t n, int64_t ru, int64_t su, int64_t ou, int64_t od, bool unpack,
                    int64_t per_job, int reps, cudaEvent_t e0, cudaEvent_t e1, int64_t* njobs) {
  namespace K = shardsync::kernels;
  std::vector<K::DevJob> jobs;
  std::vector<int64_t> first;
  const int64_t runs = n / ru, tail = n - runs * ru;
  const bool one_run = ru == su && ou == 0 && od == 0;  // contiguous: one run per job (the one-run path)
  int64_t tiles = 0;
  // Runs [r0, r0 + k), each of `units` (ru, or the tail's fewer for the partial last run).
  auto add = [&](int64_t r0, int64_t k, int64_t units) {
    K::DevJob j{};
    j.src = reinterpret_cast<const uint8_t*>(s);
    j.dst = reinterpret_cast<uint8_t*>(d);
    j.elem_bytes = j.unit_bytes = 16;
    j.mode = K::kCopy;
    j.inner_src_stride = j.inner_dst_stride = 1;
    const int64_t strided = ou + r0 * su, dense = od + r0 * ru;
    j.src_offset = unpack ? dense : strided;
    j.dst_offset = unpack ? strided : dense;
    if (one_run) {
      j.runs = 1;
      j.run_units = k * units;
    } else {
      j.outer = 1;
      j.runs = j.size[0] = k;
      j.run_units = units;
      j.src_stride[0] = unpack ? ru : su;
      j.dst_stride[0] = unpack ? su : ru;
    }
    j.id = int32_t(jobs.size());
    jobs.push_back(j);
    first.push_back(tiles);
    tiles += (j.runs * j.run_units + K::kTileUnits - 1) / K::kTileUnits;
  };
  for (int64_t r0 = 0; r0 < runs; r0 += per_job) add(r0, std::min(per_job, runs - r0), ru);
  if (tail) add(runs, 1, tail);
  *njobs = int64_t(jobs.size());
  K::DevJob* dj;
  int64_t* dt;
  unsigned long long* bad;
  CK(cudaMalloc(&dj, jobs.size() * sizeof(K::DevJob)));
  CK(cudaMalloc(&dt, first.size() * sizeof(int64_t)));
  CK(cudaMalloc(&bad, 2 * sizeof(unsigned long long)));
  CK(cudaMemcpy(dj, jobs.data(), jobs.size() * sizeof(K::DevJob), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dt, first.data(), first.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  std::vector<float> ms;
  for (int r = 0; r <= reps; ++r) {
    CK(cudaEventRecord(e0));
    if (one_run) K::jobs_kernel<16, false, kNc><<<unsigned(tiles), 256>>>(dj, dt, int(jobs.size()), bad, bad + 1);
    else K::jobs_kernel<16, true, kNc><<<unsigned(tiles), 256>>>(dj, dt, int(jobs.size()), bad, bad + 1);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (r) ms.push_back(t);
  }
  CK(cudaFree(dj));
  CK(cudaFree(dt));
  CK(cudaFree(bad));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  const int64_t moved = int64_t(argc > 2 ? std::atoi(argv[2]) : 1) << 30, src_bytes = 4 * moved;
  const std::string mode = argc > 3 ? argv[3] : "local";
  if (mode != "local" && mode != "ipc" && mode != "vmm" && mode != "vmm-local") {
    std::fprintf(stderr, "strided_sweep: mode %s: expected local, ipc, vmm or vmm-local\n", mode.c_str());
    return 2;
  }
  const bool ipc = mode == "ipc", vmm = mode == "vmm", vmm_local = mode == "vmm-local";
  uint4 *s = nullptr, *d = nullptr;
  int to_parent[2] = {-1, -1}, to_child[2] = {-1, -1};
  pid_t child = -1;
  if (vmm) {  // the source in another process, exported as a file descriptor (fork before CUDA)
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
    child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      close(sv[0]);
      CK(cudaSetDevice(0));
      CK(cudaFree(nullptr));  // the primary context, current
      const size_t g = vmm_granularity();
      CUmemAllocationProp prop = vmm_prop();
      CUmemGenericAllocationHandle h;
      CU(cuMemCreate(&h, size_t(src_bytes), &prop, 0));
      uint4* src = static_cast<uint4*>(vmm_map(h, size_t(src_bytes), g));
      fill<<<2048, 256>>>(src, src_bytes / 16);
      CK(cudaDeviceSynchronize());
      int fd = -1;
      CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      send_fd(sv[1], fd);
      char c;
      _exit(read(sv[1], &c, 1) < 0 ? 1 : 0);  // EOF: the parent is done
    }
    close(sv[1]);
    to_child[1] = sv[0];
    const int fd = recv_fd(sv[0]);
    if (fd < 0) {
      std::fprintf(stderr, "strided_sweep: the source process sent no file descriptor\n");
      return 1;
    }
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CUmemGenericAllocationHandle h;
    CU(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(uintptr_t(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    s = static_cast<uint4*>(vmm_map(h, size_t(src_bytes), vmm_granularity()));
  } else if (vmm_local) {
    CK(cudaSetDevice(0));
    CK(cudaFree(nullptr));
    CUmemAllocationProp prop = vmm_prop();
    CUmemGenericAllocationHandle h;
    CU(cuMemCreate(&h, size_t(src_bytes), &prop, 0));
    s = static_cast<uint4*>(vmm_map(h, size_t(src_bytes), vmm_granularity()));
    fill<<<2048, 256>>>(s, src_bytes / 16);
    CK(cudaDeviceSynchronize());
  } else if (ipc) {  // the source in another process, read through a CUDA IPC mapping (fork before CUDA)
    if (pipe(to_parent) || pipe(to_child)) return 1;
    child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      close(to_parent[0]);
      close(to_child[1]);
      uint4* src;
      CK(cudaMalloc(&src, src_bytes));
      fill<<<2048, 256>>>(src, src_bytes / 16);
      CK(cudaDeviceSynchronize());
      cudaIpcMemHandle_t h;
      CK(cudaIpcGetMemHandle(&h, src));
      if (write(to_parent[1], &h, sizeof h) != sizeof h) _exit(1);
      char c;
      _exit(read(to_child[0], &c, 1) < 0 ? 1 : 0);  // EOF: the parent is done
    }
    close(to_parent[1]);
    close(to_child[0]);
    cudaIpcMemHandle_t h;
    if (read(to_parent[0], &h, sizeof h) != sizeof h) {
      std::fprintf(stderr, "strided_sweep: the source process sent no IPC handle\n");
      return 1;
    }
    void* mapped = nullptr;
    CK(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess));
    s = static_cast<uint4*>(mapped);
  } else {
    CK(cudaMalloc(&s, src_bytes));
    fill<<<2048, 256>>>(s, src_bytes / 16);
    CK(cudaGetLastError());
  }
  unsigned long long* bad;
  CK(cudaMalloc(&d, src_bytes));
  CK(cudaMalloc(&bad, sizeof *bad));
  CK(cudaMemset(bad, 0, sizeof *bad));
  const Case cases[] = {
      {"contiguous", 4096, 4096, 0, 0, 0, false},
      {"half-8K", 8192, 4096, 0, 0, 0, false},
      {"half-8K-second", 8192, 4096, 4096, 0, 0, false},
      {"half-8K-scatter", 8192, 4096, 0, 0, 1, false},
      {"half-8K-pair", 8192, 4096, 0, 0, 2, false},
      {"half-24K", 24576, 12288, 0, 0, 0, false},
      {"half-24K-pair", 24576, 12288, 0, 0, 2, false},
      {"half-16K", 16384, 8192, 0, 0, 0, false},
      {"half-64K", 65536, 32768, 0, 0, 0, false},
      {"half-1M", 1 << 20, 1 << 19, 0, 0, 0, false},
      {"2of3-12K", 12288, 8192, 0, 0, 0, false},
      {"quarter-16K", 16384, 4096, 0, 0, 0, false},
      {"half-8K-unpack", 8192, 4096, 0, 0, 0, true},
      {"contiguous-unpack", 4096, 4096, 0, 0, 0, true},
      {"half-8K-stream", 8192, 4096, 0, 0, 3, false},
      {"contiguous-stream", 4096, 4096, 0, 0, 3, false},
      // Starts off 4 KiB: the engine's tensors and parameters sit at multiples of 256 bytes
      {"half-8K-src256", 8192, 4096, 256, 0, 0, false},
      {"half-8K-dst256", 8192, 4096, 0, 256, 0, false},
      {"half-8K-both256", 8192, 4096, 256, 256, 0, false},
      {"half-24K-both256", 24576, 12288, 256, 256, 0, false},
      {"contiguous-both256", 4096, 4096, 256, 256, 0, false},
  };
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int failures = 0;
  // One variant of a case: time it (median ms), then check every byte it wrote.
  auto report = [&](const Case& c, const char* kernel, int64_t jobs, float ms_median, int64_t n, int64_t ru,
                    int64_t su, int64_t ou) {
    CK(cudaMemset(bad, 0, sizeof *bad));
    check<<<2048, 256>>>(d, n, ru, su, ou, c.dense_offset / 16, c.order, c.unpack, bad);
    unsigned long long wrong = 0;
    CK(cudaMemcpy(&wrong, bad, sizeof wrong, cudaMemcpyDeviceToHost));
    failures += wrong != 0;
    const double t = ms_median / 1e3;
    std::printf(
        "{\"source\": \"%s\", \"case\": \"%s\", \"kernel\": \"%s\", \"jobs\": %lld, \"stride\": %lld, "
        "\"run\": %lld, \"offset\": %lld, \"dense_offset\": %lld, \"bytes\": %lld, \"time_s\": %.6e, "
        "\"GBps_one_way\": %.1f, \"wrong_units\": %llu}\n",
        mode.c_str(), c.name, kernel, (long long)jobs, (long long)c.stride, (long long)c.run, (long long)c.offset,
        (long long)c.dense_offset, (long long)moved, t,
        moved / t / 1e9, wrong);
    std::fflush(stdout);
  };
  for (const Case& c : cases) {
    const int64_t ru = c.run / 16, su = c.stride / 16, ou = c.offset / 16;
    const int64_t n = (c.order == 2 ? moved / 2 : moved) / 16;  // dense units per half
    const int64_t tiles = (n + kTile - 1) / kTile * (c.order == 2 ? 2 : 1);
    if ((n / ru) * su > src_bytes / 16) {
      std::fprintf(stderr, "%s: the runs do not fit the source\n", c.name);
      return 2;
    }
    std::vector<float> ms;
    for (int r = 0; r <= reps; ++r) {
      CK(cudaEventRecord(e0));
      copy<<<unsigned(tiles), 256>>>(s, d, n, ru, su, ou, c.dense_offset / 16, c.order, c.unpack, tiles);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaGetLastError());
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (r) ms.push_back(t);  // the first is a warm-up
    }
    std::sort(ms.begin(), ms.end());
    report(c, "sweep", 1, ms[ms.size() / 2], n, ru, su, ou);
    if (c.order != 0) continue;
    const int64_t runs = n / ru, per_16m = std::max<int64_t>(1, (int64_t(16) << 20) / c.run);
    for (int64_t per_job : {runs, per_16m}) {
      int64_t jobs = 0;
      CK(cudaMemset(d, 0, size_t(src_bytes)));
      float t = engine_kernel<false>(s, d, n, ru, su, ou, c.dense_offset / 16, c.unpack, per_job, reps, e0, e1, &jobs);
      report(c, "engine", jobs, t, n, ru, su, ou);
      CK(cudaMemset(d, 0, size_t(src_bytes)));
      t = engine_kernel<true>(s, d, n, ru, su, ou, c.dense_offset / 16, c.unpack, per_job, reps, e0, e1, &jobs);
      report(c, "engine-nc", jobs, t, n, ru, su, ou);
    }
  }
  std::printf("{\"failures\": %d}\n", failures);
  if (ipc) CK(cudaIpcCloseMemHandle(s));
  if (ipc || vmm) {
    close(to_child[1]);
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failures += 1;
  }
  return failures ? 1 : 0;
}
