#pragma once

#include <deque>
#include <unordered_map>

#include "transport/transport.hpp"

namespace shardsync {

class MpiTransport : public Transport {
 public:
  // control_only: no data path (another transport moves the bytes; CUDA IPC).
  explicit MpiTransport(bool control_only = false) : control_only_(control_only) {}
  ~MpiTransport() override;
  std::string name() const override { return "mpi"; }
  std::string describe() const override;
  bool supports(MemKind kind) const override { return kind == MemKind::kHost; }
  void bootstrap(MPI_Comm world, const Registration& reg) override;
  GetId get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) override;
  bool test(GetId id) override;
  void send(int peer, const CtrlMsg& msg) override;
  bool poll(CtrlMsg* msg) override;
  void progress() override;
  void flush_sends() override;
  void shutdown() override;
  void forget_peer(int peer) override;

 private:
  struct Pending {
    std::vector<uint8_t> bytes;
    MPI_Request req;
    int peer = -1;
  };
  void serve_reads();  // two-sided mode: answer peers' read requests from the export region

  bool control_only_;
  bool two_sided_ = false;  // MPI_Win_create unavailable: reads are served by the owner
  uint8_t* export_ = nullptr;
  size_t export_bytes_ = 0;
  std::deque<MPI_Request> serving_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Win win_ = MPI_WIN_NULL;
  uint8_t* landing_ = nullptr;
  size_t landing_bytes_ = 0;
  std::deque<Pending> sends_;  // deque: element addresses stay valid while MPI holds them
  struct Get {
    MPI_Request req;
    int peer;
  };
  std::unordered_map<GetId, Get> gets_;
  std::string rma_error_;
  std::vector<int> forgotten_;
  GetId next_id_ = 1;
};

}  // namespace shardsync
