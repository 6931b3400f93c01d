// copy_sweep: which copy-kernel shape reaches the device's copy rate, reading local memory
// and reading another process's memory through a CUDA IPC mapping (the one-pass path).
//
//   nvcc -O3 -arch=sm_90 -std=c++17 bench/gpu/copy_sweep.cu -o copy_sweep && ./copy_sweep [GiB] [reps]
//
// The process forks before touching CUDA: the child allocates and fills the source and
// exports it by cudaIpcGetMemHandle; the parent maps it (cudaIpcOpenMemHandle) and copies
// from it, then from a local source of the same bytes. Every copy is checked against the
// source (a device-side comparison of all bytes) after it is timed. One JSON line per case.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.cuh"

// Tiles of `tile` 16-byte units, one block each, U loads in flight per thread (the batched
// kernel's shape).
template <int U>
__global__ void tiled(const uint4* __restrict__ s, uint4* __restrict__ d, int64_t n, int64_t tile) {
  int64_t u = int64_t(blockIdx.x) * tile + threadIdx.x;
  const int64_t end = min(n, int64_t(blockIdx.x + 1) * tile);
  const int64_t step = blockDim.x;
  for (; u + (U - 1) * step < end; u += U * step) {
    uint4 r[U];
#pragma unroll
    for (int k = 0; k < U; ++k) r[k] = s[u + k * step];
#pragma unroll
    for (int k = 0; k < U; ++k) d[u + k * step] = r[k];
  }
  for (; u < end; u += step) d[u] = s[u];
}

// A grid of a few blocks per SM walking the whole range, U loads in flight per thread.
template <int U>
__global__ void strided_grid(const uint4* __restrict__ s, uint4* __restrict__ d, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; u + (U - 1) * step < n; u += U * step) {
    uint4 r[U];
#pragma unroll
    for (int k = 0; k < U; ++k) r[k] = s[u + k * step];
#pragma unroll
    for (int k = 0; k < U; ++k) d[u + k * step] = r[k];
  }
  for (; u < n; u += step) d[u] = s[u];
}

__global__ void fill(uint4* d, int64_t n) {
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x)
    d[u] = make_uint4(uint32_t(u), uint32_t(u >> 32) ^ 0x9e3779b9u, uint32_t(u * 2654435761u), ~uint32_t(u));
}

__global__ void compare(const uint4* a, const uint4* b, int64_t n, unsigned long long* bad) {
  unsigned long long mine = 0;
  for (int64_t u = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += int64_t(gridDim.x) * blockDim.x) {
    uint4 x = a[u], y = b[u];
    mine += (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (mine) atomicAdd(bad, mine);
}

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 4.0;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 10;
  const int64_t bytes = int64_t(gib * double(1ll << 30)) / 16 * 16, n = bytes / 16;
  int to_parent[2], to_child[2];
  if (pipe(to_parent) || pipe(to_child)) return 1;
  pid_t pid = fork();
  if (pid == 0) {  // the "trainer": owns the source
    uint4* src;
    CK(cudaMalloc(&src, size_t(bytes)));
    fill<<<1024, 256>>>(src, n);
    CK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t h;
    CK(cudaIpcGetMemHandle(&h, src));
    if (write(to_parent[1], &h, sizeof h) != sizeof h) return 1;
    char c;
    if (read(to_child[0], &c, 1) != 1) return 1;  // until the parent is done
    CK(cudaFree(src));
    return 0;
  }
  cudaIpcMemHandle_t h;
  if (read(to_parent[0], &h, sizeof h) != sizeof h) return 1;
  void* mapped = nullptr;
  CK(cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess));
  uint4 *local, *dst;
  unsigned long long* bad;
  CK(cudaMalloc(&local, size_t(bytes)));
  CK(cudaMalloc(&dst, size_t(bytes)));
  CK(cudaMalloc(&bad, sizeof *bad));
  fill<<<1024, 256>>>(local, n);
  CK(cudaDeviceSynchronize());
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int failures = 0;
  auto run = [&](const char* source, const char* name, const uint4* s, auto&& launch) {
    CK(cudaMemset(dst, 0, size_t(bytes)));
    launch(s);  // warm-up
    CK(cudaEventRecord(e0));
    for (int r = 0; r < reps; ++r) launch(s);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemset(bad, 0, sizeof *bad));
    compare<<<4 * sms, 256>>>(s, dst, n, bad);
    unsigned long long wrong = 0;
    CK(cudaMemcpy(&wrong, bad, sizeof wrong, cudaMemcpyDeviceToHost));
    failures += wrong != 0;
    const double t = ms / 1e3 / reps;
    std::printf("{\"source\": \"%s\", \"kernel\": \"%s\", \"bytes\": %lld, \"time_s\": %.6e, \"GBps_one_way\": %.1f, "
                "\"wrong_vectors\": %llu}\n",
                source, name, (long long)bytes, t, double(bytes) / t / 1e9, wrong);
    std::fflush(stdout);
  };
  for (int which = 0; which < 2; ++which) {
    const char* source = which == 0 ? "ipc" : "local";
    const uint4* s = which == 0 ? static_cast<const uint4*>(mapped) : local;
    run(source, "cudaMemcpyAsync", s, [&](const uint4* p) { CK(cudaMemcpyAsync(dst, p, size_t(bytes), cudaMemcpyDeviceToDevice)); });
    for (int64_t tile : {8192, 65536}) {
      const unsigned grid = unsigned((n + tile - 1) / tile);
      std::string a = "tiled/" + std::to_string(tile) + "/u4", b = "tiled/" + std::to_string(tile) + "/u8";
      run(source, a.c_str(), s, [&](const uint4* p) { tiled<4><<<grid, 256>>>(p, dst, n, tile); });
      run(source, b.c_str(), s, [&](const uint4* p) { tiled<8><<<grid, 256>>>(p, dst, n, tile); });
    }
    for (int per_sm : {2, 4, 8})
      for (int threads : {256, 512}) {
        std::string k = "grid/" + std::to_string(per_sm) + "xSM/" + std::to_string(threads) + "/u8";
        run(source, k.c_str(), s, [&](const uint4* p) { strided_grid<8><<<per_sm * sms, threads>>>(p, dst, n); });
      }
  }
  char c = 1;
  CK(cudaIpcCloseMemHandle(mapped));
  if (write(to_child[1], &c, 1) != 1) return 1;
  int st = 0;
  waitpid(pid, &st, 0);
  std::printf("{\"failures\": %d}\n", failures);
  return failures == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
