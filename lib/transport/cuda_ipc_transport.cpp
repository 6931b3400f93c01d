// CUDA IPC transport for GPU memory between processes of one node: trainers export their
// registered allocation (send buffer and weights) as CUDA IPC handles (exchanged once over
// MPI); consumers open them once. get() reads with cudaMemcpyAsync on a copy stream (peer
// access over NVLink, or within one GPU), completion by events; mapped() hands the mapping
// to the engine, whose copy kernels read the trainer's weights directly (one pass).
// Control messages ride on MPI.
#include <cuda_runtime.h>

#include <cstring>
#include <unordered_map>

#include "common/check.hpp"
#include "transport/mpi_transport.hpp"

namespace shardsync {

namespace {

class CudaIpcTransport : public Transport {
 public:
  std::string name() const override { return "cuda_ipc"; }
  std::string describe() const override {
    return "cuda_ipc (IPC handles of the trainers' registered send buffer + weights, opened once: cudaMemcpyAsync gets and one-pass copy kernels through the mapping; control over MPI)";
  }
  bool supports(MemKind kind) const override { return kind == MemKind::kCuda; }
  void set_peers(const std::vector<bool>& peers) override { peers_ = peers; }
  // Alone it maps every peer; inside a hybrid (set_peers) only some, so the hybrid says no.
  bool maps_peer_memory() const override { return peers_.empty(); }
  const uint8_t* mapped(int peer) const override { return remote_.at(size_t(peer)); }

  void bootstrap(MPI_Comm world, const Registration& reg) override {
    if (reg.kind != MemKind::kCuda) throw Error("cuda_ipc transport: buffers must be GPU memory");
    ctrl_.bootstrap(world, Registration{});
    int rank = 0, size = 0;
    MPI_CHECK(MPI_Comm_rank(world, &rank));
    MPI_CHECK(MPI_Comm_size(world, &size));
    landing_ = static_cast<uint8_t*>(reg.landing_base);
    landing_bytes_ = reg.landing_bytes;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    struct Export {
      cudaIpcMemHandle_t handle;
      uint64_t bytes;
      int32_t has;
      int32_t pad;
    } mine{};
    if (reg.export_base && reg.export_bytes) {
      CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, reg.export_base));
      mine.bytes = reg.export_bytes;
      mine.has = 1;
    }
    std::vector<Export> all(static_cast<size_t>(size));
    MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, world));
    remote_.assign(static_cast<size_t>(size), nullptr);
    remote_bytes_.assign(static_cast<size_t>(size), 0);
    if (!reg.landing_base) return;  // only consumers read
    for (int p = 0; p < size; ++p) {
      if (!all[size_t(p)].has) continue;
      if (!peers_.empty() && !peers_[size_t(p)]) continue;  // another transport reads from it
      if (p == rank) {
        remote_[size_t(p)] = static_cast<uint8_t*>(reg.export_base);
      } else {
        void* ptr = nullptr;
        CUDA_CHECK(cudaIpcOpenMemHandle(&ptr, all[size_t(p)].handle, cudaIpcMemLazyEnablePeerAccess));
        remote_[size_t(p)] = static_cast<uint8_t*>(ptr);
        opened_.push_back(ptr);
      }
      remote_bytes_[size_t(p)] = all[size_t(p)].bytes;
    }
  }

  GetId get(int peer, size_t remote_offset, size_t local_offset, size_t bytes) override {
    uint8_t* src = remote_.at(size_t(peer));
    if (!src || remote_offset + bytes > remote_bytes_[size_t(peer)])
      throw Error("cuda_ipc: get outside rank " + std::to_string(peer) + "'s exported buffer");
    if (local_offset + bytes > landing_bytes_) throw Error("cuda_ipc: get outside the landing buffer");
    CUDA_CHECK(cudaMemcpyAsync(landing_ + local_offset, src + remote_offset, bytes, cudaMemcpyDeviceToDevice, stream_));
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, stream_));
    GetId id = next_++;
    gets_.emplace(id, e);
    return id;
  }

  bool test(GetId id) override {
    auto it = gets_.find(id);
    if (it == gets_.end()) throw Error("cuda_ipc: unknown get id");
    cudaError_t st = cudaEventQuery(it->second);
    if (st == cudaErrorNotReady) return false;
    CUDA_CHECK(st);
    CUDA_CHECK(cudaEventDestroy(it->second));
    gets_.erase(it);
    return true;
  }

  void send(int peer, const CtrlMsg& msg) override { ctrl_.send(peer, msg); }
  bool poll(CtrlMsg* msg) override { return ctrl_.poll(msg); }
  void progress() override { ctrl_.progress(); }
  void flush_sends() override { ctrl_.flush_sends(); }
  void forget_peer(int peer) override { ctrl_.forget_peer(peer); }
  void shutdown() override {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    ctrl_.shutdown();  // a barrier: nobody reads our buffer past it
    for (void* p : opened_) CUDA_CHECK(cudaIpcCloseMemHandle(p));
    opened_.clear();
  }

 private:
  MpiTransport ctrl_{true};
  std::vector<bool> peers_;
  cudaStream_t stream_ = nullptr;
  uint8_t* landing_ = nullptr;
  size_t landing_bytes_ = 0;
  std::vector<uint8_t*> remote_;
  std::vector<size_t> remote_bytes_;
  std::vector<void*> opened_;
  std::unordered_map<GetId, cudaEvent_t> gets_;
  GetId next_ = 1;
};

}  // namespace

std::unique_ptr<Transport> make_cuda_ipc_transport() { return std::make_unique<CudaIpcTransport>(); }

}  // namespace shardsync
