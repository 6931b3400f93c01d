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

// Pinned host buffers for staging, reused across operations.
class StagingPool {
 public:
  explicit StagingPool(Device* dev) : dev_(dev) {}
  ~StagingPool() {
    for (auto& b : bufs_) dev_->host_release(b.ptr);
  }
  int acquire(int64_t bytes) {
    for (size_t i = 0; i < bufs_.size(); ++i)
      if (!bufs_[i].busy && bufs_[i].size >= bytes) {
        bufs_[i].busy = true;
        return int(i);
      }
    int64_t size = 1 << 20;
    while (size < bytes) size *= 2;
    bufs_.push_back(Buf{dev_->host_alloc(size), size, true});
    return int(bufs_.size()) - 1;
  }
  uint8_t* ptr(int i) const { return bufs_[size_t(i)].ptr; }
  void release(int i) {
    if (i >= 0) bufs_[size_t(i)].busy = false;
  }

 private:
  struct Buf {
    uint8_t* ptr;
    int64_t size;
    bool busy;
  };
  Device* dev_;
  std::vector<Buf> bufs_;
};

// MPI on host memory; with a staging device, device buffers go through pinned host copies.
class MpiGroup : public GroupComm {
 public:
  MpiGroup(MPI_Comm comm, Device* staging) : comm_(comm), staging_(staging) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    if (staging_) pool_ = std::make_unique<StagingPool>(staging_);
  }
  std::string name() const override { return staging_ ? "mpi-staged" : "mpi"; }

  struct MpiOp : Op {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<int> counts, displs;
    StagingPool* pool = nullptr;
    int send_host = -1, recv_host = -1;  // staging buffers (pool indices)
    uint8_t* recv_dev = nullptr;
    int64_t recv_bytes = 0;
    ~MpiOp() override {
      if (pool) {
        pool->release(send_host);
        pool->release(recv_host);
      }
    }
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
      staging_->from_host(op.recv_dev, pool_->ptr(op.recv_host), op.recv_bytes);
    return flag != 0;
  }

  void bcast(uint8_t* buf, int64_t bytes, int root) override {
    uint8_t* p = buf;
    int h = -1;
    if (staging_) {
      h = pool_->acquire(bytes);
      p = pool_->ptr(h);
      if (rank_ == root) staging_->to_host(p, buf, bytes);
    }
    constexpr int64_t kPiece = int64_t(1) << 30;
    for (int64_t off = 0; off < bytes; off += kPiece)
      MPI_CHECK(MPI_Bcast(p + off, int(std::min(kPiece, bytes - off)), MPI_BYTE, root, comm_));
    if (staging_ && rank_ != root) staging_->from_host(buf, p, bytes);
    if (pool_) pool_->release(h);
  }

 private:
  const uint8_t* stage_send(MpiOp& op, const uint8_t* send, int64_t bytes) {
    if (!staging_) return send;
    op.pool = pool_.get();
    op.send_host = pool_->acquire(bytes);
    if (bytes > 0) staging_->to_host(pool_->ptr(op.send_host), send, bytes);
    return pool_->ptr(op.send_host);
  }
  uint8_t* stage_recv(MpiOp& op, uint8_t* recv, int64_t bytes) {
    if (!staging_) return recv;
    op.pool = pool_.get();
    op.recv_host = pool_->acquire(bytes);
    op.recv_dev = recv;
    op.recv_bytes = bytes;
    return pool_->ptr(op.recv_host);
  }

  MPI_Comm comm_;
  Device* staging_;
  std::unique_ptr<StagingPool> pool_;
};

}  // namespace

std::unique_ptr<GroupComm> make_mpi_group(MPI_Comm comm, Device* staging_device) {
  return std::make_unique<MpiGroup>(comm, staging_device);
}

namespace {

// Host-staged MPI for collectives, plus every member's registered allocation mapped by CUDA
// IPC (exchanged once here) for gathers that read the members' weights themselves.
class IpcGroup : public GroupComm {
 public:
  IpcGroup(MPI_Comm comm, Device& device, uint8_t* region) : device_(device), base_(make_mpi_group(comm, &device)) {
    rank_ = base_->rank();
    size_ = base_->size();
    std::vector<uint8_t> mine = device.ipc_handle(region);
    const int n = int(mine.size());
    std::vector<uint8_t> all(size_t(n) * size_t(size_));
    MPI_CHECK(MPI_Allgather(mine.data(), n, MPI_BYTE, all.data(), n, MPI_BYTE, comm));
    for (int m = 0; m < size_; ++m)
      if (m == rank_) {
        regions_.push_back(region);
      } else {
        regions_.push_back(device.ipc_open(std::vector<uint8_t>(all.begin() + m * n, all.begin() + (m + 1) * n)));
        opened_.push_back(regions_.back());
      }
  }
  ~IpcGroup() override {
    for (uint8_t* p : opened_) device_.ipc_close(p);
  }
  std::string name() const override { return "ipc+" + base_->name(); }
  std::unique_ptr<Op> allgatherv(const uint8_t* send, int64_t bytes, uint8_t* recv, const std::vector<int64_t>& counts,
                                 const std::vector<int64_t>& displs) override {
    return base_->allgatherv(send, bytes, recv, counts, displs);
  }
  std::unique_ptr<Op> gatherv(const uint8_t* send, int64_t bytes, uint8_t* recv, const std::vector<int64_t>& counts,
                              const std::vector<int64_t>& displs, int root) override {
    return base_->gatherv(send, bytes, recv, counts, displs, root);
  }
  bool test(Op& op) override { return base_->test(op); }
  void bcast(uint8_t* buf, int64_t bytes, int root) override { base_->bcast(buf, bytes, root); }
  const uint8_t* peer_region(int m) const override { return regions_.at(size_t(m)); }

 private:
  Device& device_;
  std::unique_ptr<GroupComm> base_;
  std::vector<uint8_t*> regions_, opened_;
};

}  // namespace

std::unique_ptr<GroupComm> make_group_comm(MPI_Comm comm, Device& device, uint8_t* region) {
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
  // One node (every key's host part alike), and this rank's weights to share (every member
  // passes one, or none: trainer groups and the broadcast group are built alike everywhere).
  std::set<std::string> hosts;
  for (const std::string& k : distinct) hosts.insert(k.substr(0, k.find('#')));
  int share = region != nullptr && hosts.size() == 1 && !device.ipc_handle(region).empty(), all_share = 0;
  MPI_CHECK(MPI_Allreduce(&share, &all_share, 1, MPI_INT, MPI_MIN, comm));
  if (all_share) return std::make_unique<IpcGroup>(comm, device, region);
  return make_mpi_group(comm, &device);
}

#ifndef SHARDSYNC_HAVE_NCCL
std::unique_ptr<GroupComm> make_nccl_group(MPI_Comm, Device&) { return nullptr; }
bool nccl_built() { return false; }
std::string nccl_version() { return ""; }
#endif

}  // namespace shardsync
