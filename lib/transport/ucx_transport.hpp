#pragma once

#include <ucp/api/ucp.h>

#include <deque>
#include <set>
#include <unordered_map>

#include "transport/transport.hpp"

namespace shardsync {

class UcxTransport : public Transport {
 public:
  UcxTransport();
  ~UcxTransport() override;
  std::string name() const override { return "ucx"; }
  std::string describe() const override;
  bool supports(MemKind kind) const override;
  void bootstrap(MPI_Comm world, const Registration& reg) override;
  GetId get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) override;
  bool test(GetId id) override;
  void send(int peer, const CtrlMsg& msg) override;
  bool poll(CtrlMsg* msg) override;
  void progress() override;
  void flush_sends() override;
  void shutdown() override;

  // Peers whose endpoint reported an error (filled by UCX's error callback).
  const std::set<int>& failed_peers() const { return failed_; }
  void mark_failed(int peer) { failed_.insert(peer); }

 private:
  struct Peer {
    ucp_ep_h ep = nullptr;
    uint64_t remote_base = 0;
    size_t remote_bytes = 0;
    ucp_rkey_h rkey = nullptr;
  };
  struct PendingSend {
    std::vector<uint8_t> bytes;
    void* req = nullptr;
    int peer = -1;
  };
  struct EpErrorArg {
    UcxTransport* self;
    int peer;
  };
  void check_peer(int peer) const;

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h export_memh_ = nullptr, landing_memh_ = nullptr;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  uint8_t* landing_ = nullptr;
  size_t landing_bytes_ = 0;
  std::vector<Peer> peers_;
  std::vector<EpErrorArg> err_args_;
  std::deque<PendingSend> sends_;
  std::unordered_map<GetId, std::pair<void*, int>> gets_;  // request, peer
  GetId next_id_ = 1;
  std::set<int> failed_;
  std::string tls_;
  bool peer_errors_ = false;  // SHARDSYNC_UCX_PEER_ERRORS=1
};

}  // namespace shardsync
