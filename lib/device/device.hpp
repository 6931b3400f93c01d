// Where bytes live and how they are moved locally: host memory (the CPU twin) or a CUDA
// GPU. Memory kind is a run-time property of a buffer, so the engines are one program.
// Work is issued on two lanes: `kMain` (pack, unpack, gathers) and `kBackground` (V3's
// process + copy into live weights). Fences order them and tell when work has finished.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/view.hpp"
#include "device/delta.hpp"
#include "device/mem_kind.hpp"
#include "device/synth_hash.hpp"

namespace shardsync {

// dst[desc.dst positions] = src[desc.src positions], elements of elem_bytes. --checksum inside
// the copy (Device::copy_hashed): a job with hash_tensor >= 0 and a hash_index also sums
// checksum_term(hash_tensor, index, bits) over the elements it copies, an element's index being
// its position on hash_index's source side (the piece's HF element coordinates; hash_index's
// loops have desc's sizes, and its destination side is desc's). Not owned: it must outlive the call.
struct CopyJob {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  CopyDesc desc;
  int32_t elem_bytes = 2;
  int32_t hash_tensor = -1;
  const CopyDesc* hash_index = nullptr;
};
using HashTicket = int64_t;

// dst[desc.dst positions] = synth_value(key, desc.src positions, elem_bytes) (or 0 when zero is set):
// fills trainer shards, and checks consumers' live weights.
struct SynthJob {
  uint8_t* dst = nullptr;
  SynthKey key;
  CopyDesc desc;
  int32_t elem_bytes = 2;
  bool zero = false;
};

// Block FP8 quantization (device/fp8.hpp says what the bits are) of a bf16 matrix [rows, cols]
// whose rows are src_ld elements apart: float8_e4m3fn codes into dst (rows dst_ld bytes
// apart), one fp32 scale_inv per 128 x 128 block into scale_inv (block rows scale_ld floats
// apart). The process step of an FP8 target.
struct QuantJob {
  const uint8_t* src = nullptr;  // bf16
  int64_t src_ld = 0;            // elements
  uint8_t* dst = nullptr;        // e4m3fn codes
  int64_t dst_ld = 0;            // bytes
  float* scale_inv = nullptr;
  int64_t scale_ld = 0;  // floats
  int64_t rows = 0, cols = 0;
};

// --checksum: the sum of checksum_term(tensor, element, bits) over a piece (synth_hash.hpp). The
// element indices are desc's source positions plus `index_shift` (the HF tensor's elements);
// the bits are read at desc's source positions (`at_src`: a trainer's shard or slab) or at its
// destination positions (a receiver's parameter, after its copy).
struct HashJob {
  const uint8_t* data = nullptr;
  CopyDesc desc;
  int32_t elem_bytes = 2;
  int32_t tensor = 0;
  int64_t index_shift = 0;
  bool at_src = false;
};

struct VerifyResult {
  int64_t mismatches = 0;
  int64_t first_job = -1;    // job of the lowest mismatching job index
  int64_t first_index = -1;  // its destination element index
};

enum class Lane : uint8_t { kMain = 0, kBackground = 1 };
using Fence = int64_t;

class Device {
 public:
  virtual ~Device() = default;
  virtual MemKind kind() const = 0;
  virtual std::string describe() const = 0;
  virtual uint8_t* alloc(int64_t bytes) = 0;
  virtual void release(uint8_t* p) = 0;

  // Queued on a lane, in order. The jobs of one copy() are independent (none reads or
  // writes what another writes): a GPU runs them at once (transposing ones in launches of
  // their own), the CPU in any order.
  virtual void copy(const std::vector<CopyJob>& jobs, Lane lane = Lane::kMain) = 0;
  // --checksum: copy(), each hashed job's sum computed from the bits it moves, in the same
  // pass (a GPU hashes in the copy kernel; the CPU hashes each destination right after its
  // copy). sums() waits for that copy and returns each job's sum (0 for a job not hashed);
  // every ticket is read once.
  virtual HashTicket copy_hashed(const std::vector<CopyJob>& jobs, Lane lane = Lane::kMain) = 0;
  virtual std::vector<uint64_t> sums(HashTicket ticket) = 0;
  virtual void synth(const std::vector<SynthJob>& jobs, Lane lane = Lane::kMain) = 0;
  virtual void memcpy(uint8_t* dst, const uint8_t* src, int64_t bytes, Lane lane = Lane::kMain) = 0;
  virtual void quantize_fp8(const std::vector<QuantJob>& jobs, Lane lane = Lane::kMain) = 0;
  // Marks the current end of a lane; done() tells whether everything before it finished.
  virtual Fence fence(Lane lane) = 0;
  virtual bool done(Fence f) = 0;
  // Makes `lane` wait (on the device, not the host) for a fence of another lane.
  virtual void after(Lane lane, Fence f) = 0;
  virtual void synchronize() = 0;  // both lanes

  // --delta (device/delta.hpp), synchronous, after everything queued on the main lane: each
  // job's freshly packed chunk becomes its record (a delta against the kept copy, or whole), and
  // the kept copy then holds the chunk.
  virtual std::vector<DeltaRecord> delta_encode(const std::vector<DeltaEncodeJob>& jobs) = 0;
  // Synchronous: brings the kept chunk to the record's version; throws Error naming the fault
  // for a malformed record or one on top of another version.
  virtual DeltaRecord delta_apply(const DeltaApplyJob& job) = 0;

  // Synchronous checks and host staging.
  virtual VerifyResult verify(const std::vector<SynthJob>& jobs) = 0;
  // --checksum: each job's sum, after everything queued on the main lane.
  virtual std::vector<uint64_t> checksum(const std::vector<HashJob>& jobs) = 0;
  virtual void to_host(void* dst, const uint8_t* src, int64_t bytes) = 0;
  virtual void from_host(uint8_t* dst, const void* src, int64_t bytes) = 0;
  // The native stream of the main lane (cudaStream_t), for NCCL and copies; null on the CPU.
  virtual void* main_stream() = 0;
  virtual int gpu() const { return -1; }
  // Copy jobs so far that ran row by row together with others (the CPU's
  // execute_copies_fast groups); 0 where copies are not grouped.
  virtual int64_t copies_together() const { return 0; }
  // Sharing an allocation with processes of this node (CUDA IPC): the handle of the
  // allocation at `base` (empty where the device cannot share), and a mapping of a peer's
  // handle in this process (closed with ipc_close).
  virtual std::vector<uint8_t> ipc_handle(uint8_t* base) {
    (void)base;
    return {};
  }
  virtual uint8_t* ipc_open(const std::vector<uint8_t>& handle) {
    (void)handle;
    return nullptr;
  }
  virtual void ipc_close(uint8_t* mapped) { (void)mapped; }
  // The caller's memory at `p` shared the same way: the handle of the allocation that holds
  // it and p's offset in it. False, with the reason in `why`, where it cannot be (host memory;
  // an allocation CUDA IPC does not export, such as cuMem virtual memory).
  virtual bool ipc_export(const uint8_t* p, std::vector<uint8_t>* handle, int64_t* offset, std::string* why) {
    (void)p;
    (void)handle;
    (void)offset;
    *why = "host memory, which only CUDA IPC would map in another process";
    return false;
  }
  // Host memory for staging copies (pinned on GPUs, so copies run at full speed).
  virtual uint8_t* host_alloc(int64_t bytes) = 0;
  virtual void host_release(uint8_t* p) = 0;
};

// Owns one allocation of a Device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* dev, int64_t bytes) : dev_(dev), ptr_(bytes ? dev->alloc(bytes) : nullptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept : dev_(o.dev_), ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    reset();
    dev_ = o.dev_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (ptr_) dev_->release(ptr_);
    ptr_ = nullptr;
  }
  uint8_t* data() const { return ptr_; }
  int64_t size() const { return bytes_; }

 private:
  Device* dev_ = nullptr;
  uint8_t* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

// A part of a DeviceBuffer (not owning): the send buffer and the weights share one
// registered allocation, as do the receive buffer and the live weights.
struct Region {
  uint8_t* base = nullptr;
  int64_t bytes = 0;
  uint8_t* data() const { return base; }
  int64_t size() const { return bytes; }
};

std::unique_ptr<Device> make_cpu_device();
// A CUDA device, or an Error when this build has no CUDA or the GPU is missing.
std::unique_ptr<Device> make_cuda_device(int gpu);
int cuda_device_count();  // 0 when built without CUDA, no GPU is visible, or CUDA fails
bool cuda_built();
// Why CUDA sees no GPU: the runtime's error ("" when it counts one or more, or the build has
// no CUDA). With gpus_listed_by_driver(), tells a missing GPU from a broken CUDA.
std::string cuda_error();
// The CUDA runtime and driver versions and GPU 0's name ("cuda_runtime", "cuda_driver",
// "gpu"); empty in a build without CUDA.
std::vector<std::pair<std::string, std::string>> cuda_versions();
// GPUs the NVIDIA kernel driver lists (/proc/driver/nvidia/gpus, or SHARDSYNC_NVIDIA_GPUS_DIR
// in the tests of this check): > 0 with cuda_device_count() == 0 is a defect, not a skip.
int gpus_listed_by_driver();
// "" unless the driver lists GPUs that CUDA cannot use; then what to say (counts, CUDA's error).
std::string broken_gpu_setup();

// CPU twins of the device kernels (they define the semantics the GPU kernels match).
// synth_fill writes the low `elem_bytes` bytes of synth_value(key, first + i, elem_bytes), i in [0, n).
void synth_fill(void* dst, const SynthKey& key, int64_t first, int64_t n, int64_t elem_bytes);
void cpu_synth(const SynthJob& job);
VerifyResult cpu_verify(const std::vector<SynthJob>& jobs);
std::vector<uint64_t> cpu_checksum(const std::vector<HashJob>& jobs);

}  // namespace shardsync
