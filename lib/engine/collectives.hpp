// Collectives among trainer ranks (gathers) and for the broadcast baseline, over buffers of
// a Device: MPI on host memory; NCCL on GPU memory when every member has its own GPU; MPI
// through pinned host staging when members share a GPU (NCCL refuses duplicate GPUs), where
// the group also maps the members' weights (CUDA IPC) so gathers read them directly.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device.hpp"

namespace shardsync {

class GroupComm {
 public:
  struct Op;  // an operation in flight
  virtual ~GroupComm() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl", "mpi-staged"
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Non-blocking; every member calls with the same counts and displacements (bytes).
  virtual std::unique_ptr<Op> allgatherv(const uint8_t* send, int64_t bytes, uint8_t* recv,
                                         const std::vector<int64_t>& counts, const std::vector<int64_t>& displs) = 0;
  virtual std::unique_ptr<Op> gatherv(const uint8_t* send, int64_t bytes, uint8_t* recv,
                                      const std::vector<int64_t>& counts, const std::vector<int64_t>& displs, int root) = 0;
  // True once `op` completed (its results are in the receive buffer).
  virtual bool test(Op& op) = 0;
  // Blocking broadcast from `root`.
  virtual void bcast(uint8_t* buf, int64_t bytes, int root) = 0;
  // Capability: member `m`'s registered allocation mapped into this process (CUDA IPC within
  // a node; its own allocation for this rank), so a gather may read the members' weights
  // directly instead of running a collective. Null where the group cannot.
  virtual const uint8_t* peer_region(int m) const {
    (void)m;
    return nullptr;
  }

 protected:
  int rank_ = 0, size_ = 0;
};

struct GroupComm::Op {
  virtual ~Op() = default;
};

// Picks the implementation for `comm` and `device` (collective over comm). `region`: this
// member's registered allocation (its weights); given, and the members on one node sharing a
// GPU or without NCCL, the group maps every member's region (peer_region) for gathers by
// CUDA IPC reads, with host-staged MPI left for the rest.
std::unique_ptr<GroupComm> make_group_comm(MPI_Comm comm, Device& device, uint8_t* region = nullptr);
std::unique_ptr<GroupComm> make_mpi_group(MPI_Comm comm, Device* staging_device);
// NCCL (only in CUDA builds with NCCL); null when unavailable.
std::unique_ptr<GroupComm> make_nccl_group(MPI_Comm comm, Device& device);
bool nccl_built();
std::string nccl_version();  // "" in a build without NCCL

}  // namespace shardsync
