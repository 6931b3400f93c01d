// Every check macro of the project, one convention: on failure, throw shardsync::Error with
// "host:rank file:line call -> the library's error string" (never exit: the top level
// aborts every MPI rank). The macros name library types and functions only when expanded,
// so a file includes the library's own header (mpi.h, cuda_runtime.h, nccl.h, ucp/api/ucp.h)
// and this one, and a build without that library compiles everything else.
#pragma once

#include <string>

#include "common/error.hpp"

namespace shardsync {

// "host:rank" of this process for error messages (the rank from the launcher's environment:
// Open MPI, PMIx or Slurm; "-" outside a launch). No MPI call: safe on any thread.
std::string where_am_i();

[[noreturn]] void throw_call_error(const std::string& detail, const char* call, const char* file, int line);

}  // namespace shardsync

#define SHARDSYNC_CHECK_CALL(type, ok, message, call)                                                 \
  do {                                                                                                \
    type check_rc_ = (call);                                                                          \
    if (check_rc_ != (ok)) ::shardsync::throw_call_error(message(check_rc_), #call, __FILE__, __LINE__); \
  } while (0)

// MPI: the message from MPI_Error_string.
#define MPI_CHECK(call)                                                                          \
  do {                                                                                           \
    int mpi_check_rc_ = (call);                                                                  \
    if (mpi_check_rc_ != MPI_SUCCESS) {                                                          \
      char mpi_check_msg_[MPI_MAX_ERROR_STRING];                                                 \
      int mpi_check_len_ = 0;                                                                    \
      MPI_Error_string(mpi_check_rc_, mpi_check_msg_, &mpi_check_len_);                          \
      ::shardsync::throw_call_error(std::string(mpi_check_msg_, size_t(mpi_check_len_)), #call, \
                                    __FILE__, __LINE__);                                         \
    }                                                                                            \
  } while (0)
#define CUDA_CHECK(call) SHARDSYNC_CHECK_CALL(cudaError_t, cudaSuccess, cudaGetErrorString, call)
#define NCCL_CHECK(call) SHARDSYNC_CHECK_CALL(ncclResult_t, ncclSuccess, ncclGetErrorString, call)
#define UCS_CHECK(call) SHARDSYNC_CHECK_CALL(ucs_status_t, UCS_OK, ucs_status_string, call)
