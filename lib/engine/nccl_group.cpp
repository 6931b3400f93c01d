// GroupComm over NCCL for GPU buffers when every member has its own GPU. All-gather of
// uneven pieces is one grouped ncclBroadcast per member; gather to a root is grouped
// send/recv. NCCL runs on its own stream, ordered after the device's main stream.
#include <nccl.h>

#include "engine/collectives.hpp"
#include <cuda_runtime.h>

#include "common/check.hpp"
#include "transport/transport.hpp"


namespace shardsync {

namespace {

class NcclGroup : public GroupComm {
 public:
  NcclGroup(MPI_Comm comm, Device& dev) : dev_(dev) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
    CUDA_CHECK(cudaSetDevice(dev.gpu()));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
  }
  ~NcclGroup() override {
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return "nccl"; }

  struct NcclOp : Op {
    cudaEvent_t done = nullptr;
    ~NcclOp() override {
      if (done) cudaEventDestroy(done);
    }
  };

  std::unique_ptr<Op> allgatherv(const uint8_t* send, int64_t bytes, uint8_t* recv, const std::vector<int64_t>& counts,
                                 const std::vector<int64_t>& displs) override {
    order_after_main();
    NCCL_CHECK(ncclGroupStart());
    for (int m = 0; m < size_; ++m)
      if (counts[size_t(m)] > 0)
        NCCL_CHECK(ncclBroadcast(m == rank_ ? send : nullptr, recv + displs[size_t(m)], size_t(counts[size_t(m)]), ncclUint8, m,
                                 comm_, stream_));
    NCCL_CHECK(ncclGroupEnd());
    (void)bytes;
    return finish();
  }

  std::unique_ptr<Op> gatherv(const uint8_t* send, int64_t bytes, uint8_t* recv, const std::vector<int64_t>& counts,
                              const std::vector<int64_t>& displs, int root) override {
    order_after_main();
    NCCL_CHECK(ncclGroupStart());
    if (rank_ == root) {
      for (int m = 0; m < size_; ++m)
        if (m != root && counts[size_t(m)] > 0)
          NCCL_CHECK(ncclRecv(recv + displs[size_t(m)], size_t(counts[size_t(m)]), ncclUint8, m, comm_, stream_));
    } else if (bytes > 0) {
      NCCL_CHECK(ncclSend(send, size_t(bytes), ncclUint8, root, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
    if (rank_ == root && bytes > 0)
      CUDA_CHECK(cudaMemcpyAsync(recv + displs[size_t(root)], send, size_t(bytes), cudaMemcpyDeviceToDevice, stream_));
    return finish();
  }

  bool test(Op& base) override {
    auto& op = static_cast<NcclOp&>(base);
    cudaError_t st = cudaEventQuery(op.done);
    if (st == cudaErrorNotReady) return false;
    CUDA_CHECK(st);
    return true;
  }

  void bcast(uint8_t* buf, int64_t bytes, int root) override {
    order_after_main();
    NCCL_CHECK(ncclBroadcast(buf, buf, size_t(bytes), ncclUint8, root, comm_, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  void order_after_main() {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(dev_.main_stream())));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, e, 0));
    CUDA_CHECK(cudaEventDestroy(e));
  }
  std::unique_ptr<Op> finish() {
    auto op = std::make_unique<NcclOp>();
    CUDA_CHECK(cudaEventCreateWithFlags(&op->done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(op->done, stream_));
    return op;
  }

  Device& dev_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<GroupComm> make_nccl_group(MPI_Comm comm, Device& device) {
  return std::make_unique<NcclGroup>(comm, device);
}

bool nccl_built() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "?";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace shardsync
