#include "engine/collectives.hpp"

#include <unistd.h>

#include <climits>
#include <cstring>
#include <set>

#include "common/error.hpp"
#include "transport/transport.hpp"

namespace shardsync {

namespace {

std::vector<int> to_int(const std::vector<int64_t>& v) {
  std::vector<int> out;
  for (int64_t x : v) {
    if (x > INT_MAX) throw Error("collective: more than 2 GiB from one member");
    out.push_back(int(x));
  }
  return out;
}

// MPI on host memory; with a staging device, device buffers go through host copies.
class MpiGroup : public GroupComm {
 public:
  MpiGroup(MPI_Comm comm, Device* staging) : comm_(comm), staging_(staging) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
  }
  std::string name() const override { return staging_ ? "mpi-staged" : "mpi"; }

  struct MpiOp : Op {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<int> counts, displs;
    std::vector<uint8_t> send_host, recv_host;  // staging copies
    uint8_t* recv_dev = nullptr;
    int64_t recv_bytes = 0;
  };

  std::unique_ptr<Op> allgatherv(const uint8_t* send, int64_t bytes, uint8_t* recv, const std::vector<int64_t>& counts,
                                 const std::vector<int64_t>& displs) override {
    auto op = std::make_unique<MpiOp>();
    op->counts = to_int(counts);
    op->displs = to_int(displs);
    int64_t total = displs.empty() ? 0 : displs.back() + counts.back();
    const uint8_t* s = stage_send(*op, send, bytes);
    uint8_t* r = stage_recv(*op, recv, total);
    MPI_CHECK(MPI_Iallgatherv(s, int(bytes), MPI_BYTE, r, op->counts.data(), op->displs.data(), MPI_BYTE, comm_, &op->req));
    return op;
  }

  std::unique_ptr<Op> gatherv(const uint8_t* send, int64_t bytes, uint8_t* recv, const std::vector<int64_t>& counts,
                              const std::vector<int64_t>& displs, int root) override {
    auto op = std::make_unique<MpiOp>();
    op->counts = to_int(counts);
    op->displs = to_int(displs);
    int64_t total = displs.empty() ? 0 : displs.back() + counts.back();
    const uint8_t* s = stage_send(*op, send, bytes);
    uint8_t* r = rank_ == root ? stage_recv(*op, recv, total) : nullptr;
    MPI_CHECK(MPI_Igatherv(s, int(bytes), MPI_BYTE, r, op->counts.data(), op->displs.data(), MPI_BYTE, root, comm_, &op->req));
    return op;
  }

  bool test(Op& base) override {
    auto& op = static_cast<MpiOp&>(base);
    if (op.req == MPI_REQUEST_NULL) return true;
    int flag = 0;
    MPI_CHECK(MPI_Test(&op.req, &flag, MPI_STATUS_IGNORE));
    if (flag && staging_ && op.recv_dev && op.recv_bytes > 0)
      staging_->from_host(op.recv_dev, op.recv_host.data(), op.recv_bytes);
    return flag != 0;
  }

  void bcast(uint8_t* buf, int64_t bytes, int root) override {
    std::vector<uint8_t> host;
    uint8_t* p = buf;
    if (staging_) {
      host.resize(size_t(bytes));
      if (rank_ == root) staging_->to_host(host.data(), buf, bytes);
      p = host.data();
    }
    constexpr int64_t kPiece = int64_t(1) << 30;
    for (int64_t off = 0; off < bytes; off += kPiece)
      MPI_CHECK(MPI_Bcast(p + off, int(std::min(kPiece, bytes - off)), MPI_BYTE, root, comm_));
    if (staging_ && rank_ != root) staging_->from_host(buf, host.data(), bytes);
  }

 private:
  const uint8_t* stage_send(MpiOp& op, const uint8_t* send, int64_t bytes) {
    if (!staging_) return send;
    op.send_host.resize(size_t(bytes));
    if (bytes > 0) staging_->to_host(op.send_host.data(), send, bytes);
    return op.send_host.data();
  }
  uint8_t* stage_recv(MpiOp& op, uint8_t* recv, int64_t bytes) {
    if (!staging_) return recv;
    op.recv_host.resize(size_t(bytes));
    op.recv_dev = recv;
    op.recv_bytes = bytes;
    return op.recv_host.data();
  }

  MPI_Comm comm_;
  Device* staging_;
};

}  // namespace

std::unique_ptr<GroupComm> make_mpi_group(MPI_Comm comm, Device* staging_device) {
  return std::make_unique<MpiGroup>(comm, staging_device);
}

std::unique_ptr<GroupComm> make_group_comm(MPI_Comm comm, Device& device) {
  if (device.kind() == MemKind::kHost) return make_mpi_group(comm, nullptr);
  // Distinct GPUs in the group? (host name, GPU id) of every member.
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::string key = std::string(host) + "#" + std::to_string(device.gpu());
  key.resize(72, '\0');
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<char> all(size_t(size) * 72);
  MPI_CHECK(MPI_Allgather(key.data(), 72, MPI_CHAR, all.data(), 72, MPI_CHAR, comm));
  std::set<std::string> distinct;
  for (int i = 0; i < size; ++i) distinct.insert(std::string(all.data() + i * 72, 72));
  if (int(distinct.size()) == size && nccl_built()) {
    if (auto g = make_nccl_group(comm, device)) return g;
  }
  return make_mpi_group(comm, &device);
}

#ifndef SHARDSYNC_HAVE_NCCL
std::unique_ptr<GroupComm> make_nccl_group(MPI_Comm, Device&) { return nullptr; }
bool nccl_built() { return false; }
#endif

}  // namespace shardsync
