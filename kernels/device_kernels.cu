// device_kernels.cu: the CUDA device (lib/device/device.hpp) and its batched kernels.
// CPU twins: execute_copy (lib/tensor/view.cpp), cpu_synth and cpu_verify
// (lib/device/cpu_device.cpp); tests/kernels compare the two on random jobs.
//
//   build/tests/test_kernels --gtest_filter='Kernels.*'   # skips without a GPU
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "common/error.hpp"
#include "device/device.hpp"
#include "common/check.hpp"
#include "copy_kernels.cuh"
#include "delta_kernels.cuh"
#include "fp8_kernels.cuh"

namespace shardsync {


namespace {

using kernels::DevJob;

// Converts a CopyDesc job to the kernel form, choosing the widest safe vector unit. With
// `index` (--checksum: a kHash job, or a copy that hashes what it moves), each element is also
// hashed as element (index's source position + index_shift) of HF tensor `tensor`, into sums
// slot `slot`; index's loops have the sizes of desc's.
DevJob make_dev_job(const CopyDesc& desc, const uint8_t* src, uint8_t* dst, int32_t eb, int32_t mode, const SynthKey& key,
                    const CopyDesc* index = nullptr, int64_t index_shift = 0, int32_t tensor = -1, int32_t slot = 0) {
  if (desc.dims.size() > size_t(kernels::kMaxOuter) + 1)
    throw Error("device kernels: a copy with more than 8 loops");
  DevJob j{};
  j.hash_tensor = -1;
  if (index) {
    bool same = index->dims.size() == desc.dims.size();
    for (size_t k = 0; same && k < desc.dims.size(); ++k) same = index->dims[k].size == desc.dims[k].size;
    if (!same) throw Error("device checksum: a hashed copy whose index loops differ from its copy's");
    j.hash_tensor = tensor;
    j.hash_slot = slot;
    j.hash_offset = index->src_offset + index_shift;
    j.hash_inner_stride = index->dims.back().src_stride;
    for (size_t k = 0; k + 1 < desc.dims.size(); ++k) j.hash_stride[k] = index->dims[k].src_stride;
  }
  j.src = src;
  j.dst = dst;
  j.src_offset = desc.src_offset;
  j.dst_offset = desc.dst_offset;
  j.elem_bytes = eb;
  j.mode = mode;
  j.key = key;
  const CopyDim& in = desc.dims.back();
  j.outer = int32_t(desc.dims.size()) - 1;
  for (int k = 0; k < j.outer; ++k) {
    j.size[k] = desc.dims[size_t(k)].size;
    j.src_stride[k] = desc.dims[size_t(k)].src_stride;
    j.dst_stride[k] = desc.dims[size_t(k)].dst_stride;
  }
  j.inner_src_stride = in.src_stride;
  j.inner_dst_stride = in.dst_stride;
  j.runs = in.size == 0 ? 0 : desc.numel / in.size;
  // Vector width: both sides contiguous (synth: the index side is always "contiguous" when
  // its stride is 1), every run start and the base pointers aligned to it.
  bool src_contig = in.src_stride == 1 || mode == kernels::kZero || mode == kernels::kVerifyZero, dst_contig = in.dst_stride == 1;
  if (index) src_contig = src_contig && j.hash_inner_stride == 1;  // a vector's elements at consecutive indices
  int32_t v = eb;
  if (src_contig && dst_contig) {
    for (int32_t cand : {16, 8, 4}) {
      if (cand <= eb || cand % eb) continue;
      int64_t per = cand / eb;
      bool ok = in.size % per == 0 && desc.dst_offset % per == 0 &&
                reinterpret_cast<uintptr_t>(dst) % uintptr_t(cand) == 0;
      if (mode == kernels::kCopy)
        ok = ok && desc.src_offset % per == 0 && reinterpret_cast<uintptr_t>(src) % uintptr_t(cand) == 0;
      for (int k = 0; ok && k < j.outer; ++k) {
        ok = j.dst_stride[k] % per == 0;
        if (mode == kernels::kCopy) ok = ok && j.src_stride[k] % per == 0;
      }
      if (ok) {
        v = cand;
        break;
      }
    }
  }
  j.unit_bytes = v;
  j.run_units = in.size / (v / eb);
  return j;
}

class CudaDevice : public Device {
 public:
  explicit CudaDevice(int gpu) : gpu_(gpu) {
    CUDA_CHECK(cudaSetDevice(gpu));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[0], cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams_[1], cudaStreamNonBlocking));
    CUDA_CHECK(cudaMalloc(&counters_, 2 * sizeof(unsigned long long)));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, gpu));
    name_ = prop.name;
  }
  ~CudaDevice() override {
    cudaDeviceSynchronize();
    for (auto e : events_) cudaEventDestroy(e);
    cudaFree(counters_);
    if (delta_buf_) cudaFree(delta_buf_);
    if (delta_host_) cudaFreeHost(delta_host_);
    cudaStreamDestroy(streams_[0]);
    cudaStreamDestroy(streams_[1]);
  }
  MemKind kind() const override { return MemKind::kCuda; }
  std::string describe() const override { return "cuda:" + std::to_string(gpu_) + " (" + name_ + ")"; }
  int gpu() const override { return gpu_; }
  // Allocations of 2 MiB or more are rounded up to a multiple of 2 MiB (the GPU's large
  // page). Another process read an allocation with a partial last page through a CUDA IPC
  // mapping (the one-pass path, IPC gathers, --measure-link) at 49-83% of the rate it gets
  // from one of whole pages, wherever the data sat in it: on an H200, the kernel bench's
  // strided pieces of Qwen3-8B TP2 read 2,050 GB/s (r+w) through the mapping, 3,850 with the
  // allocation rounded up; the engine's TP1 -> TP2 sync took 13.1 ms, then 9.6
  // (results/gpu/align/). At most 2 MiB of each large allocation is spent.
  uint8_t* alloc(int64_t bytes) override {
    constexpr int64_t kLargePage = int64_t(2) << 20;
    if (bytes >= kLargePage) bytes = (bytes + kLargePage - 1) / kLargePage * kLargePage;
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, size_t(std::max<int64_t>(bytes, 16))));
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* p) override { CUDA_CHECK(cudaFree(p)); }

  // Transposing jobs get the tiled kernel, one launch each; the rest go in batched launches,
  // one per vector width for copies of rows (is_rows) and one for the others (jobs of one copy
  // are independent: any order). Not cudaMemcpyAsync for
  // the large one-run jobs: the batched kernel reads an IPC mapping at 92% of cudaMemcpy's
  // rate (bench/gpu/copy_sweep.cu), and one launch beat hundreds of memcpy calls where
  // several ranks share the GPU (results/gpu/one-pass).
  void copy(const std::vector<CopyJob>& jobs, Lane lane) override { copy_jobs(jobs, lane, nullptr); }
  // --checksum inside the copy: the sums in a stream-ordered device array, one slot per job,
  // zeroed before the copy and read back by sums().
  HashTicket copy_hashed(const std::vector<CopyJob>& jobs, Lane lane) override {
    cudaStream_t s = stream(lane);
    unsigned long long* sums = nullptr;
    const size_t bytes = std::max<size_t>(jobs.size(), 1) * sizeof(unsigned long long);
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&sums), bytes, s));
    CUDA_CHECK(cudaMemsetAsync(sums, 0, bytes, s));
    copy_jobs(jobs, lane, sums);
    hashed_.push_back(Hashed{++tickets_, sums, jobs.size(), lane});
    return tickets_;
  }
  std::vector<uint64_t> sums(HashTicket t) override {
    auto it = std::find_if(hashed_.begin(), hashed_.end(), [&](const Hashed& h) { return h.ticket == t; });
    if (it == hashed_.end()) throw Error("cuda device: no hashed copy " + std::to_string(t) + " to read sums of");
    const Hashed h = *it;
    hashed_.erase(it);
    cudaStream_t s = stream(h.lane);
    std::vector<unsigned long long> got(h.n);
    if (h.n > 0) CUDA_CHECK(cudaMemcpyAsync(got.data(), h.sums, h.n * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaFreeAsync(h.sums, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return std::vector<uint64_t>(got.begin(), got.end());
  }
  void synth(const std::vector<SynthJob>& jobs, Lane lane) override {
    std::vector<DevJob> dj;
    for (const SynthJob& j : jobs)
      if (j.desc.numel > 0)
        dj.push_back(make_dev_job(j.desc, nullptr, j.dst, j.elem_bytes, j.zero ? kernels::kZero : kernels::kSynth, j.key));
    launch(dj, lane);
  }
  void memcpy(uint8_t* dst, const uint8_t* src, int64_t bytes, Lane lane) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, stream(lane)));
  }
  // One launch for all jobs: a thread block per 128 x 128 quantization block (fp8_kernels.cuh).
  void quantize_fp8(const std::vector<QuantJob>& jobs, Lane lane) override {
    std::vector<kernels::Fp8Job> fj;
    std::vector<int64_t> first;
    int64_t blocks = 0;
    for (const QuantJob& j : jobs) {
      if (j.rows <= 0 || j.cols <= 0) continue;
      const int64_t br = (j.rows + kFp8Block - 1) / kFp8Block, bc = (j.cols + kFp8Block - 1) / kFp8Block;
      fj.push_back(kernels::Fp8Job{reinterpret_cast<const uint16_t*>(j.src), j.dst, j.scale_inv, j.src_ld, j.dst_ld,
                                   j.scale_ld, j.rows, j.cols, bc});
      first.push_back(blocks);
      blocks += br * bc;
    }
    if (blocks == 0) return;
    if (blocks > int64_t(INT32_MAX)) throw Error("device kernels: an FP8 quantization of more than 2^31 blocks");
    cudaStream_t s = stream(lane);
    if (fj.size() <= size_t(kernels::kFp8InlineJobs)) {  // the jobs ride in the launch
      kernels::Fp8Launch l{};
      for (size_t i = 0; i < fj.size(); ++i) {
        l.jobs[i] = fj[i];
        l.first[i] = first[i];
      }
      l.njobs = int(fj.size());
      kernels::fp8_quantize_inline_kernel<<<unsigned(blocks), 256, 0, s>>>(l);
      CUDA_CHECK(cudaGetLastError());
      return;
    }
    uint8_t* d = upload_jobs(fj, first, s);
    kernels::fp8_quantize_kernel<<<unsigned(blocks), 256, 0, s>>>(
        reinterpret_cast<const kernels::Fp8Job*>(d), reinterpret_cast<const int64_t*>(d + fj.size() * sizeof(kernels::Fp8Job)),
        int(fj.size()));
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaFreeAsync(d, s));
  }
  Fence fence(Lane lane) override {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, stream(lane)));
    events_.push_back(e);
    return Fence(events_.size() - 1);
  }
  bool done(Fence f) override {
    cudaError_t st = cudaEventQuery(events_.at(size_t(f)));
    if (st == cudaErrorNotReady) return false;
    CUDA_CHECK(st);
    return true;
  }
  void after(Lane lane, Fence f) override { CUDA_CHECK(cudaStreamWaitEvent(stream(lane), events_.at(size_t(f)), 0)); }
  void synchronize() override {
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    CUDA_CHECK(cudaStreamSynchronize(streams_[1]));
    // Fences recorded so far are complete: recycle them.
    for (auto e : events_) CUDA_CHECK(cudaEventDestroy(e));
    events_.clear();
  }
  VerifyResult verify(const std::vector<SynthJob>& jobs) override {
    std::vector<DevJob> dj;
    std::vector<int64_t> index;  // device job -> caller's job
    for (size_t i = 0; i < jobs.size(); ++i)
      if (jobs[i].desc.numel > 0) {
        dj.push_back(make_dev_job(jobs[i].desc, nullptr, jobs[i].dst, jobs[i].elem_bytes,
                                  jobs[i].zero ? kernels::kVerifyZero : kernels::kVerify, jobs[i].key));
        index.push_back(int64_t(i));
      }
    unsigned long long init[2] = {0ull, ~0ull};
    CUDA_CHECK(cudaMemcpyAsync(counters_, init, sizeof init, cudaMemcpyHostToDevice, streams_[0]));
    launch(dj, Lane::kMain);
    unsigned long long out[2];
    CUDA_CHECK(cudaMemcpyAsync(out, counters_, sizeof out, cudaMemcpyDeviceToHost, streams_[0]));
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    VerifyResult r;
    r.mismatches = int64_t(out[0]);
    if (r.mismatches > 0) {
      r.first_job = index.at(size_t(out[1] >> 40));
      r.first_index = int64_t(out[1] & ((1ull << 40) - 1));
    }
    return r;
  }
  // kHash jobs of the copy kernels (copy_kernels.cuh): one launch per vector width for the
  // batch on the main stream, after everything queued there; the sums come back.
  std::vector<uint64_t> checksum(const std::vector<HashJob>& jobs) override {
    std::vector<DevJob> dj;
    for (size_t i = 0; i < jobs.size(); ++i)
      if (jobs[i].desc.numel > 0) dj.push_back(hash_job(jobs[i], int32_t(i)));
    unsigned long long* sums = nullptr;
    cudaStream_t s = streams_[0];
    const size_t bytes = std::max<size_t>(jobs.size(), 1) * sizeof(unsigned long long);
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&sums), bytes, s));
    CUDA_CHECK(cudaMemsetAsync(sums, 0, bytes, s));
    launch(std::move(dj), Lane::kMain, sums);
    std::vector<unsigned long long> got(jobs.size());
    if (!got.empty()) CUDA_CHECK(cudaMemcpyAsync(got.data(), sums, got.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaFreeAsync(sums, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return std::vector<uint64_t>(got.begin(), got.end());
  }
  // kernels/delta_kernels.cuh: four launches for the batch on the main stream (after its
  // pack), then the records' sizes come back.
  std::vector<DeltaRecord> delta_encode(const std::vector<DeltaEncodeJob>& jobs) override {
    std::vector<DeltaRecord> out;
    if (jobs.empty()) return out;
    using kernels::DeltaEncJob;
    using kernels::DeltaEncResult;
    const size_t n = jobs.size();
    auto up16 = [](int64_t b) { return (b + 15) & ~int64_t(15); };
    // Device scratch: jobs, results, the scan's temporary storage, then per job its packed
    // counts, their prefix sums and its record.
    std::vector<DeltaEncJob> kj(n);
    int64_t blocks = 0, most_segs = 0;
    for (size_t i = 0; i < n; ++i) {
      const DeltaEncodeJob& j = jobs[i];
      DeltaEncJob& k = kj[i];
      k.fresh = j.record + kDeltaHeaderBytes;
      k.kept = j.kept;
      k.record = j.record;
      k.chunk_bytes = j.chunk_bytes;
      k.words = j.chunk_bytes / 2;
      k.segs = (k.words + kDeltaSegmentWords - 1) / kDeltaSegmentWords;
      k.copy_segs = ((j.chunk_bytes + 1) / 2 + kDeltaSegmentWords - 1) / kDeltaSegmentWords;
      k.first_block = blocks;
      k.base_version = j.base_version;
      k.version = j.version;
      k.whole = j.whole || j.kept == nullptr;
      blocks += std::max<int64_t>(k.copy_segs, 1);
      most_segs = std::max(most_segs, k.segs);
    }
    if (blocks > int64_t(INT32_MAX) || most_segs > int64_t(INT32_MAX))
      throw Error("device kernels: a delta batch of more than 2^31 segments");
    cudaStream_t s = streams_[0];
    size_t temp = 0;
    CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp, static_cast<const uint64_t*>(nullptr),
                                             static_cast<uint64_t*>(nullptr), int(std::max<int64_t>(most_segs, 1)), s));
    int64_t bytes = up16(int64_t(n * sizeof(DeltaEncJob))) + up16(int64_t(n * sizeof(DeltaEncResult))) + up16(int64_t(temp));
    for (const DeltaEncJob& k : kj) bytes += 2 * up16(8 * k.segs) + up16(kDeltaHeaderBytes + k.chunk_bytes);
    uint8_t* d = delta_scratch(bytes);
    uint8_t* at = d + up16(int64_t(n * sizeof(DeltaEncJob)));
    auto* results = reinterpret_cast<DeltaEncResult*>(at);
    at += up16(int64_t(n * sizeof(DeltaEncResult)));
    uint8_t* temp_at = at;
    at += up16(int64_t(temp));
    for (DeltaEncJob& k : kj) {
      k.packed = reinterpret_cast<uint64_t*>(at);
      at += up16(8 * k.segs);
      k.prefix = reinterpret_cast<uint64_t*>(at);
      at += up16(8 * k.segs);
      k.scratch = at;
      at += up16(kDeltaHeaderBytes + k.chunk_bytes);
    }
    auto* dj = reinterpret_cast<DeltaEncJob*>(d);
    std::memcpy(delta_staging(n * sizeof(DeltaEncJob)), kj.data(), n * sizeof(DeltaEncJob));
    CUDA_CHECK(cudaMemcpyAsync(dj, delta_host_, n * sizeof(DeltaEncJob), cudaMemcpyHostToDevice, s));
    kernels::delta_count_kernel<<<unsigned(blocks), kernels::kDeltaThreads, 0, s>>>(dj, int(n));
    CUDA_CHECK(cudaGetLastError());
    for (const DeltaEncJob& k : kj)
      if (!k.whole && k.segs > 0) {
        size_t t = temp;
        CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp_at, t, k.packed, k.prefix, int(k.segs), s));
      }
    kernels::delta_finish_kernel<<<unsigned((n + 127) / 128), 128, 0, s>>>(dj, int(n), results);
    kernels::delta_write_kernel<<<unsigned(blocks), kernels::kDeltaThreads, 0, s>>>(dj, int(n), results);
    kernels::delta_copyback_kernel<<<dim3(64, unsigned(n)), 256, 0, s>>>(dj, results);
    CUDA_CHECK(cudaGetLastError());
    auto* r = static_cast<DeltaEncResult*>(static_cast<void*>(delta_staging(n * sizeof(DeltaEncResult))));
    CUDA_CHECK(cudaMemcpyAsync(r, results, n * sizeof(DeltaEncResult), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; ++i) out.push_back(DeltaRecord{r[i].bytes, r[i].index_bytes, r[i].changed_bytes, r[i].whole != 0});
    return out;
  }
  DeltaRecord delta_apply(const DeltaApplyJob& j) override {
    using kernels::DeltaCheck;
    const int64_t words = j.chunk_bytes / 2;
    const int64_t segs = (words + kDeltaSegmentWords - 1) / kDeltaSegmentWords;
    const int64_t copy_segs = ((j.chunk_bytes + 1) / 2 + kDeltaSegmentWords - 1) / kDeltaSegmentWords;
    if (segs > int64_t(INT32_MAX)) throw Error("device kernels: a delta record of more than 2^31 segments");
    cudaStream_t s = streams_[0];
    size_t temp = 0;
    CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), int(std::max<int64_t>(segs, 1)), s));
    const int64_t ranks = (4 * std::max<int64_t>(segs, 1) + 15) & ~int64_t(15);
    uint8_t* d = delta_scratch(64 + 2 * ranks + int64_t(temp));
    auto* chk = reinterpret_cast<DeltaCheck*>(d);
    static_assert(sizeof(DeltaCheck) <= 64);
    kernels::DeltaApplyK k;
    k.record = j.record;
    k.record_bytes = j.record_bytes;
    k.kept = j.kept;
    k.chunk_bytes = j.chunk_bytes;
    k.have_kept = j.have_kept;
    k.kept_version = j.kept_version;
    k.flags = reinterpret_cast<int32_t*>(d + 64);
    k.seg_rank = reinterpret_cast<int32_t*>(d + 64 + ranks);
    kernels::delta_check_kernel<<<1, 1, 0, s>>>(k, chk);
    if (segs > 0) {
      kernels::delta_flags_kernel<<<unsigned((segs + 255) / 256), 256, 0, s>>>(k, chk, segs);
      CUDA_CHECK(cub::DeviceScan::ExclusiveSum(d + 64 + 2 * ranks, temp, k.flags, k.seg_rank, int(segs), s));
    }
    kernels::delta_size_kernel<<<1, 1, 0, s>>>(k, chk, segs);
    if (copy_segs > 0) kernels::delta_apply_kernel<<<unsigned(copy_segs), kernels::kDeltaThreads, 0, s>>>(k, chk);
    CUDA_CHECK(cudaGetLastError());
    auto* c = static_cast<DeltaCheck*>(static_cast<void*>(delta_staging(sizeof(DeltaCheck))));
    CUDA_CHECK(cudaMemcpyAsync(c, chk, sizeof(DeltaCheck), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (c->error != kernels::kDeltaErrOk) throw Error(delta_error(*c, j));
    if (c->whole) return DeltaRecord{j.record_bytes, kDeltaHeaderBytes, j.chunk_bytes, true};
    return DeltaRecord{j.record_bytes, c->index, 2 * c->changed, false};
  }
  void to_host(void* dst, const uint8_t* src, int64_t bytes) override {
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
    CUDA_CHECK(cudaMemcpy(dst, src, size_t(bytes), cudaMemcpyDeviceToHost));
  }
  void from_host(uint8_t* dst, const void* src, int64_t bytes) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyHostToDevice, streams_[0]));
    CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
  }
  void* main_stream() override { return streams_[0]; }
  std::vector<uint8_t> ipc_handle(uint8_t* base) override {
    cudaIpcMemHandle_t h;
    CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
    std::vector<uint8_t> out(sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }
  // The allocation holding `p` (PyTorch's caching allocator hands out blocks inside larger
  // cudaMalloc segments): its base from the driver's cuMemGetAddressRange (reached through the
  // runtime, so nothing links libcuda), its IPC handle, and p's offset in it.
  bool ipc_export(const uint8_t* p, std::vector<uint8_t>* handle, int64_t* offset, std::string* why) override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
      cudaGetLastError();
      *why = "not device memory (cudaPointerGetAttributes)";
      return false;
    }
    using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
    static const AddressRange range = [] {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult q{};
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
          q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return AddressRange(nullptr);
      }
      return reinterpret_cast<AddressRange>(fn);
    }();
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!range || range(&base, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) {
      *why = "the driver gave no allocation range for it (cuMemGetAddressRange)";
      return false;
    }
    cudaIpcMemHandle_t h;
    const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
    if (e != cudaSuccess) {
      cudaGetLastError();
      *why = std::string("cudaIpcGetMemHandle: ") + cudaGetErrorString(e) +
             " (cuMem virtual memory, such as PyTorch's expandable_segments, has no IPC handle)";
      return false;
    }
    handle->assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof h);
    *offset = int64_t(reinterpret_cast<uintptr_t>(p) - uintptr_t(base));
    return true;
  }
  uint8_t* ipc_open(const std::vector<uint8_t>& handle) override {
    cudaIpcMemHandle_t h;
    if (handle.size() != sizeof h) throw Error("cuda device: a CUDA IPC handle of the wrong size");
    std::memcpy(&h, handle.data(), sizeof h);
    void* p = nullptr;
    CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    return static_cast<uint8_t*>(p);
  }
  void ipc_close(uint8_t* mapped) override { CUDA_CHECK(cudaIpcCloseMemHandle(mapped)); }
  uint8_t* host_alloc(int64_t bytes) override {
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, size_t(std::max<int64_t>(bytes, 16))));
    return static_cast<uint8_t*>(p);
  }
  void host_release(uint8_t* p) override { CUDA_CHECK(cudaFreeHost(p)); }

 private:
  cudaStream_t stream(Lane lane) const { return streams_[lane == Lane::kMain ? 0 : 1]; }

  // Transposing jobs get the tiled kernel, one launch each; the rest go in batched launches,
  // one per vector width for copies of rows (is_rows) and one for the others (jobs of one copy
  // are independent: any order). Not cudaMemcpyAsync for the large one-run jobs: the batched
  // kernel reads an IPC mapping at 92% of cudaMemcpy's rate (bench/gpu/copy_sweep.cu), and one
  // launch beat hundreds of memcpy calls where several ranks share the GPU
  // (results/gpu/one-pass). With `sums` (copy_hashed), a job with a hash_tensor hashes each
  // unit as it copies it; a transposing one is hashed where it landed right after its copy.
  void copy_jobs(const std::vector<CopyJob>& jobs, Lane lane, unsigned long long* sums) {
    std::vector<DevJob> dj, after;
    std::vector<kernels::TransposeJob> tj;
    for (size_t i = 0; i < jobs.size(); ++i) {  // every job checked before anything is queued
      const CopyJob& j = jobs[i];
      if (j.desc.numel == 0) continue;
      const bool hashed = sums && j.hash_tensor >= 0 && j.hash_index;
      if (copy_transposes(j.desc) && (j.elem_bytes == 1 || j.elem_bytes == 2 || j.elem_bytes == 4 || j.elem_bytes == 8)) {
        tj.push_back(make_transpose_job(j));
        if (hashed) {  // read at the destination, indexed by the piece's source positions
          CopyDesc at = j.desc;
          at.src_offset = j.hash_index->src_offset;
          for (size_t k = 0; k < at.dims.size() && k < j.hash_index->dims.size(); ++k) at.dims[k].src_stride = j.hash_index->dims[k].src_stride;
          after.push_back(make_dev_job(at, nullptr, j.dst, j.elem_bytes, kernels::kHash, 0, j.hash_index, 0, j.hash_tensor, int32_t(i)));
        }
      } else {
        dj.push_back(make_dev_job(j.desc, j.src, j.dst, j.elem_bytes, kernels::kCopy, 0, hashed ? j.hash_index : nullptr, 0,
                                  j.hash_tensor, int32_t(i)));
      }
    }
    for (const kernels::TransposeJob& t : tj) launch_transpose(t, stream(lane));
    launch(std::move(dj), lane, sums);
    launch(std::move(after), lane, sums);
  }

  // A HashJob as a kHash job: the bits read at its data side's positions (the source's for a
  // trainer's slab, the destination's for a receiver's parameter), each at its index (the
  // source position + index_shift).
  static DevJob hash_job(const HashJob& h, int32_t slot) {
    CopyDesc at = h.desc;
    if (h.at_src) {
      at.dst_offset = at.src_offset;
      for (CopyDim& k : at.dims) k.dst_stride = k.src_stride;
    }
    return make_dev_job(at, nullptr, const_cast<uint8_t*>(h.data), h.elem_bytes, kernels::kHash, 0, &h.desc, h.index_shift,
                        h.tensor, slot);
  }

  // Tiles every job and launches one kernel per vector width present: the jobs and each
  // one's first tile go up (the tiles themselves are found on the device). `sums`: the
  // launches with hashing jobs add their terms there.
  void launch(std::vector<DevJob> jobs, Lane lane, unsigned long long* sums = nullptr) {
    if (jobs.empty()) return;
    if (!sums && std::any_of(jobs.begin(), jobs.end(), [](const DevJob& j) { return j.mode == kernels::kHash; }))
      throw Error("device kernels: hashing jobs launched without sums");
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].id = int32_t(i);
    cudaStream_t s = stream(lane);
    for (int v : {16, 8, 4, 2, 1})
      for (bool rows : {false, true}) launch_kind(jobs, v, rows, s, sums);
  }

  // The jobs of vector width v that are (rows) or are not copies of rows (is_rows): one launch.
  void launch_kind(const std::vector<DevJob>& jobs, int v, bool rows, cudaStream_t s, unsigned long long* sums) {
    std::vector<DevJob> sel;
    std::vector<int64_t> first_tile;
    int64_t tiles = 0;
    for (const DevJob& j : jobs) {
      const int64_t units = j.runs * j.run_units;
      if (j.unit_bytes != v || units == 0 || rows != kernels::is_rows(j)) continue;
      sel.push_back(j);
      first_tile.push_back(tiles);
      tiles += (units + kernels::kTileUnits - 1) / kernels::kTileUnits;
    }
    if (tiles == 0) return;
    if (tiles > int64_t(INT32_MAX)) throw Error("device kernels: a batch of more than 2^31 tiles");
    uint8_t* d = upload_jobs(sel, first_tile, s);
    auto* dj = reinterpret_cast<const DevJob*>(d);
    auto* dt = reinterpret_cast<const int64_t*>(d + sel.size() * sizeof(DevJob));
    const int n = int(sel.size());
    unsigned grid = unsigned(tiles);
    auto* bad = reinterpret_cast<unsigned long long*>(counters_);
    const bool hash = sums && std::any_of(sel.begin(), sel.end(), [](const DevJob& j) { return kernels::hashes(j); });
    if (hash) {
      if (rows) launch_jobs<true, true>(v, grid, s, dj, dt, n, bad, sums);
      else launch_jobs<false, true>(v, grid, s, dj, dt, n, bad, sums);
    } else if (rows) {
      launch_jobs<true>(v, grid, s, dj, dt, n, bad);
    } else {
      launch_jobs<false>(v, grid, s, dj, dt, n, bad);
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaFreeAsync(d, s));
  }

  // A launch's jobs, then each one's first tile (or block), in one stream-ordered allocation
  // the caller frees with cudaFreeAsync after the launch. Pageable sources: the copies
  // complete (to a driver buffer) before returning.
  template <class Job>
  static uint8_t* upload_jobs(const std::vector<Job>& jobs, const std::vector<int64_t>& first, cudaStream_t s) {
    const size_t jb = jobs.size() * sizeof(Job), tb = first.size() * sizeof(int64_t);
    uint8_t* d = nullptr;
    CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&d), jb + tb, s));
    CUDA_CHECK(cudaMemcpyAsync(d, jobs.data(), jb, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(d + jb, first.data(), tb, cudaMemcpyHostToDevice, s));
    return d;
  }

  // Plain source loads. The read-only path (ld.global.nc, load_src in copy_kernels.cuh) was
  // measured on an H200 at 841fa50 and made no difference: the engine's kernel moved the
  // same bytes at the same rate with either load, locally and through a CUDA IPC mapping
  // (results/gpu/one-pass/nc-loads/), so the engine keeps the load without the promise
  // that nothing writes a source while it is read. strided_sweep runs both.
  static constexpr bool kNcLoads = false;

  template <bool kRows, bool kH = false>
  static void launch_jobs(int v, unsigned grid, cudaStream_t s, const DevJob* dj, const int64_t* dt, int n,
                          unsigned long long* bad, unsigned long long* sums = nullptr) {
    switch (v) {
      case 16: kernels::jobs_kernel<16, kRows, kNcLoads, kH><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1, sums); break;
      case 8: kernels::jobs_kernel<8, kRows, kNcLoads, kH><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1, sums); break;
      case 4: kernels::jobs_kernel<4, kRows, kNcLoads, kH><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1, sums); break;
      case 2: kernels::jobs_kernel<2, kRows, kNcLoads, kH><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1, sums); break;
      default: kernels::jobs_kernel<1, kRows, kNcLoads, kH><<<grid, 256, 0, s>>>(dj, dt, n, bad, bad + 1, sums); break;
    }
  }

  static kernels::TransposeJob make_transpose_job(const CopyJob& cj) {
    const CopyDesc& d = cj.desc;
    const size_t n = d.dims.size();
    if (n > size_t(kernels::kMaxOuter) + 2) throw Error("device kernels: a transposing copy with more than 9 loops");
    constexpr int64_t kT = kernels::kTransposeTile;
    kernels::TransposeJob t{};
    t.src = cj.src;
    t.dst = cj.dst;
    t.src_offset = d.src_offset;
    t.dst_offset = d.dst_offset;
    t.ni = d.dims[n - 2].size;
    t.nj = d.dims[n - 1].size;
    t.ss = d.dims[n - 1].src_stride;
    t.ds = d.dims[n - 2].dst_stride;
    t.outer = int32_t(n - 2);
    // 16-bit pairs where every offset, stride and base is even (4-byte aligned accesses).
    bool pairs = cj.elem_bytes == 2 && t.src_offset % 2 == 0 && t.dst_offset % 2 == 0 && t.ss % 2 == 0 &&
                 t.ds % 2 == 0 && reinterpret_cast<uintptr_t>(cj.src) % 4 == 0 &&
                 reinterpret_cast<uintptr_t>(cj.dst) % 4 == 0;
    for (size_t k = 0; k + 2 < n; ++k) {
      t.size[k] = d.dims[k].size;
      t.src_stride[k] = d.dims[k].src_stride;
      t.dst_stride[k] = d.dims[k].dst_stride;
      pairs = pairs && t.src_stride[k] % 2 == 0 && t.dst_stride[k] % 2 == 0;
    }
    const int64_t tile = pairs ? 2 * kT : kT;
    t.tiles_i = (t.ni + tile - 1) / tile;
    t.tiles = t.tiles_i * ((t.nj + tile - 1) / tile);
    t.total = t.tiles * (d.numel / (t.ni * t.nj));
    t.elem_bytes = cj.elem_bytes;
    t.pairs = pairs ? 1 : 0;
    return t;
  }

  static void launch_transpose(const kernels::TransposeJob& t, cudaStream_t s) {
    const unsigned grid = unsigned(std::min<int64_t>(t.total, int64_t(1) << 16));
    const dim3 block(unsigned(kernels::kTransposeTile), 8);
    if (t.pairs) kernels::transpose16_kernel<<<grid, block, 0, s>>>(t);
    else
      switch (t.elem_bytes) {
        case 1: kernels::transpose_kernel<uint8_t><<<grid, block, 0, s>>>(t); break;
        case 2: kernels::transpose_kernel<uint16_t><<<grid, block, 0, s>>>(t); break;
        case 4: kernels::transpose_kernel<uint32_t><<<grid, block, 0, s>>>(t); break;
        default: kernels::transpose_kernel<uint64_t><<<grid, block, 0, s>>>(t); break;
      }
    CUDA_CHECK(cudaGetLastError());
  }

  // Device scratch for delta batches, grown as needed (steady-state syncs do not allocate).
  uint8_t* delta_scratch(int64_t bytes) {
    if (bytes > delta_bytes_) {
      CUDA_CHECK(cudaStreamSynchronize(streams_[0]));
      if (delta_buf_) CUDA_CHECK(cudaFree(delta_buf_));
      delta_buf_ = nullptr;
      CUDA_CHECK(cudaMalloc(&delta_buf_, size_t(bytes)));
      delta_bytes_ = bytes;
    }
    return static_cast<uint8_t*>(delta_buf_);
  }
  // Pinned host memory for the delta calls' job lists and results (grown as needed; one call at a time).
  uint8_t* delta_staging(size_t bytes) {
    if (bytes > delta_host_bytes_) {
      if (delta_host_) CUDA_CHECK(cudaFreeHost(delta_host_));
      delta_host_ = nullptr;
      const size_t size = std::max<size_t>(bytes, 4096);
      CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&delta_host_), size));
      delta_host_bytes_ = size;
    }
    return delta_host_;
  }
  // The host codec's wording for what the check found (lib/device/delta.cpp).
  static std::string delta_error(const kernels::DeltaCheck& c, const DeltaApplyJob& j) {
    std::string head = "delta record of " + std::to_string(j.record_bytes) + " bytes for a chunk of " +
                       std::to_string(j.chunk_bytes) + ": ";
    switch (c.error) {
      case kernels::kDeltaErrShort: return head + "shorter than its 32-byte header";
      case kernels::kDeltaErrMagic: return head + "no DLT1 header (magic " + std::to_string(c.a) + ")";
      case kernels::kDeltaErrWholeSize: return head + "a whole chunk must be header + chunk bytes";
      case kernels::kDeltaErrFormat: return head + "format " + std::to_string(c.a) + " (expected 0, whole, or 1, delta)";
      case kernels::kDeltaErrNoKept:
        return head + "a delta on top of version " + std::to_string(c.a) +
               " for a chunk this rank has never received (it needed the whole chunk, an anchor)";
      case kernels::kDeltaErrVersion:
        return head + "a delta on top of version " + std::to_string(c.a) + ", but this rank holds version " +
               std::to_string(j.kept_version) + " of the chunk (it needed an anchor)";
      case kernels::kDeltaErrWords:
        return head + "header says " + std::to_string(c.a) + " words, the chunk has " + std::to_string(j.chunk_bytes / 2);
      case kernels::kDeltaErrNoPrefix: return head + "shorter than its prefix counts (" + std::to_string(c.a) + " bytes)";
      case kernels::kDeltaErrSegment: return head + "segment " + std::to_string(c.a) + "'s count disagrees with its neighbours'";
      case kernels::kDeltaErrSize:
        return head + "header and prefix counts say " + std::to_string(c.a) + " bytes (" + std::to_string(c.b) +
               " segments with a change)";
      case kernels::kDeltaErrPastEnd: return head + "a changed word past the chunk's end";
      case kernels::kDeltaErrBitmap: return head + "segment " + std::to_string(c.a) + "'s count disagrees with its bitmap";
      default: return head + "check error " + std::to_string(c.error);
    }
  }

  int gpu_;
  std::string name_;
  void* delta_buf_ = nullptr;
  int64_t delta_bytes_ = 0;
  uint8_t* delta_host_ = nullptr;
  size_t delta_host_bytes_ = 0;
  cudaStream_t streams_[2]{};
  void* counters_ = nullptr;
  struct Hashed {  // a copy_hashed() whose sums() is owed
    HashTicket ticket;
    unsigned long long* sums;
    size_t n;
    Lane lane;
  };
  std::vector<Hashed> hashed_;
  HashTicket tickets_ = 0;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int gpu) { return std::make_unique<CudaDevice>(gpu); }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_error() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n > 0 ? "" : "cudaGetDeviceCount found no device";
  cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::vector<std::pair<std::string, std::string>> cuda_versions() {
  auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  int rt = 0, drv = 0;
  std::vector<std::pair<std::string, std::string>> out;
  out.emplace_back("cuda_runtime", cudaRuntimeGetVersion(&rt) == cudaSuccess ? dotted(rt) : "?");
  out.emplace_back("cuda_driver", cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0 ? dotted(drv) : "none");
  cudaDeviceProp prop{};
  if (cuda_device_count() > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    out.emplace_back("gpu", prop.name);
  else
    out.emplace_back("gpu", "none");
  cudaGetLastError();
  return out;
}

bool cuda_built() { return true; }

}  // namespace shardsync
