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
  std::vector<int> flush_sends_unless(const std::function<bool(int)>& lost) override;
  void shutdown() override;

  // Peers whose endpoint reported an error (filled by UCX's error callback).
  const std::set<int>& failed_peers() const { return failed_; }
  void mark_failed(int peer) { failed_.insert(peer); }
  void forget_peer(int peer) override;
  bool supports_rejoin() const override { return true; }
  std::vector<uint8_t> contact() const override;
  void join(int rank, int size, const std::vector<std::vector<uint8_t>>& contacts, const Registration& reg) override;
  void accept_peer(int peer, const std::vector<uint8_t>& contact) override;
  void send_to_contact(const std::vector<uint8_t>& contact, const CtrlMsg& msg) override;

 private:
  struct Peer {
    ucp_ep_h ep = nullptr;
    uint64_t remote_base = 0;
    size_t remote_bytes = 0;
    ucp_rkey_h rkey = nullptr;
    uint32_t generation = 0;  // bumped when a replacement takes the rank over
  };
  struct PendingSend {
    std::vector<uint8_t> bytes;
    void* req = nullptr;
    int peer = -1;
    uint32_t generation = 0;
  };
  struct EpErrorArg {
    UcxTransport* self;
    int peer;
    uint32_t generation;
  };
  void check_peer(int peer) const;
  void map_memory(const Registration& reg);
  // An endpoint (and rkey, if the contact carries one) to the process behind `contact`.
  void connect(int peer, const uint8_t* address, uint64_t base, size_t bytes, const uint8_t* rkey, size_t rkey_len);
  void connect_contact(int peer, const std::vector<uint8_t>& contact);
  void close_peer(int peer);

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h export_memh_ = nullptr, landing_memh_ = nullptr;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  MemKind kind_ = MemKind::kHost;
  uint8_t* landing_ = nullptr;
  size_t landing_bytes_ = 0;
  std::vector<Peer> peers_;
  std::deque<EpErrorArg> err_args_;  // stable addresses for UCX's error callback
  void* export_base_ = nullptr;
  size_t export_bytes_ = 0;
  std::deque<PendingSend> sends_;
  std::deque<PendingSend> abandoned_;  // to peers declared dead
  std::unordered_map<GetId, std::pair<void*, int>> gets_;  // request, peer
  GetId next_id_ = 1;
  std::set<int> failed_;
  std::string tls_;
  bool peer_errors_ = false;  // SHARDSYNC_UCX_PEER_ERRORS=1
};

}  // namespace shardsync
