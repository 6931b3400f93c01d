// CUDA_CHECK / NCCL_CHECK: report host:rank file:line call -> the library's error string
// and throw (never exit): the top level aborts every MPI rank.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/error.hpp"

namespace shardsync {

std::string where_am_i();

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw Error(where_am_i() + " " + file + ":" + std::to_string(line) + " " + call + " -> " + cudaGetErrorString(e));
}

}  // namespace shardsync

#define CUDA_CHECK(call)                                                                 \
  do {                                                                                   \
    cudaError_t cuda_check_e_ = (call);                                                  \
    if (cuda_check_e_ != cudaSuccess) ::shardsync::throw_cuda(cuda_check_e_, #call, __FILE__, __LINE__); \
  } while (0)
