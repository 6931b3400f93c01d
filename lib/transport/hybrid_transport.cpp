// A transport that picks, per peer pair, one of two: `local` between ranks of one node
// (CUDA IPC, shared memory), `remote` between nodes (UCX over the network). Pairs are
// classified once at start-up by host name; gets, control messages and polls dispatch.
#include <unistd.h>

#include <cstring>

#include "common/error.hpp"
#include "transport/transport.hpp"

namespace shardsync {

namespace {

class HybridTransport : public Transport {
 public:
  HybridTransport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote)
      : local_(std::move(local)), remote_(std::move(remote)) {}
  std::string name() const override { return local_->name() + "+" + remote_->name(); }
  std::string describe() const override {
    int n_local = 0, n_remote = 0;
    for (bool b : same_host_) (b ? n_local : n_remote)++;
    return local_->describe() + " within a node (" + std::to_string(n_local) + " peers), " + remote_->describe() +
           " across nodes (" + std::to_string(n_remote) + " peers)";
  }
  bool supports(MemKind kind) const override { return local_->supports(kind) && remote_->supports(kind); }

  void bootstrap(MPI_Comm world, const Registration& reg) override {
    int rank = 0, size = 0;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    char mine[64] = {};
    std::snprintf(mine, sizeof mine, "%s", host_name(rank).c_str());
    std::vector<char> all(static_cast<size_t>(size) * sizeof mine);
    MPI_CHECK(MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, world));
    same_host_.assign(static_cast<size_t>(size), false);
    std::vector<bool> remote(static_cast<size_t>(size), false);
    for (int p = 0; p < size; ++p) {
      same_host_[size_t(p)] = std::strncmp(mine, all.data() + size_t(p) * sizeof mine, sizeof mine) == 0;
      remote[size_t(p)] = !same_host_[size_t(p)];
    }
    local_->set_peers(same_host_);
    remote_->set_peers(remote);
    local_->bootstrap(world, reg);
    remote_->bootstrap(world, reg);
  }

  GetId get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) override {
    bool local = same_host_.at(size_t(peer));
    GetId id = (local ? local_ : remote_)->get(peer, remote_offset, local_offset, bytes);
    return id * 2 + (local ? 0 : 1);
  }
  bool test(GetId id) override { return (id % 2 == 0 ? local_ : remote_)->test(id / 2); }
  void send(int peer, const CtrlMsg& msg) override { (same_host_.at(size_t(peer)) ? local_ : remote_)->send(peer, msg); }
  bool poll(CtrlMsg* msg) override { return local_->poll(msg) || remote_->poll(msg); }
  void progress() override {
    local_->progress();
    remote_->progress();
  }
  void flush_sends() override {
    local_->flush_sends();
    remote_->flush_sends();
  }
  void shutdown() override {
    local_->shutdown();
    remote_->shutdown();
  }
  void forget_peer(int peer) override {
    local_->forget_peer(peer);
    remote_->forget_peer(peer);
  }

 private:
  std::unique_ptr<Transport> local_, remote_;
  std::vector<bool> same_host_;
};

}  // namespace

std::unique_ptr<Transport> make_hybrid_transport(std::unique_ptr<Transport> local, std::unique_ptr<Transport> remote) {
  return std::make_unique<HybridTransport>(std::move(local), std::move(remote));
}

std::string host_name(int world_rank) {
  if (const char* fake = getenv("SHARDSYNC_FAKE_HOSTS")) {
    int per = std::atoi(fake);
    if (per > 0) return "fakehost" + std::to_string(world_rank / per);
  }
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace shardsync
