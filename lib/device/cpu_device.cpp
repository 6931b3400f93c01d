// The CPU twin of the device: host memory, synchronous main lane, a background thread for
// the background lane.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <sys/mman.h>

#include "common/error.hpp"
#include "device/background_worker.hpp"
#include "device/device.hpp"
#include "device/fast_copy.hpp"
#include "device/fp8.hpp"
#include "device/synth_hash.hpp"

namespace shardsync {

void cpu_synth(const SynthJob& job) {
  const int64_t eb = job.elem_bytes;
  for_each_run(job.desc, [&](int64_t s, int64_t d, int64_t n, int64_t ss, int64_t ds) {
    if (job.zero) {
      for (int64_t i = 0; i < n; ++i) std::memset(job.dst + (d + i * ds) * eb, 0, size_t(eb));
    } else if (ss == 1 && ds == 1) {
      synth_fill(job.dst + d * eb, job.key, s, n, eb);
    } else {
      for (int64_t i = 0; i < n; ++i) synth_fill(job.dst + (d + i * ds) * eb, job.key, s + i * ss, 1, eb);
    }
  });
}

std::vector<uint64_t> cpu_checksum(const std::vector<HashJob>& jobs) {
  std::vector<uint64_t> out(jobs.size(), 0);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const HashJob& job = jobs[j];
    const int64_t eb = job.elem_bytes;
    uint64_t sum = 0;
    for_each_run(job.desc, [&](int64_t s, int64_t d, int64_t n, int64_t ss, int64_t ds) {
      const uint8_t* p = job.data + (job.at_src ? s : d) * eb;
      const int64_t step = (job.at_src ? ss : ds) * eb;
      for (int64_t i = 0; i < n; ++i, p += step) {
        uint64_t bits = 0;  // little-endian, as the GPU reads it
        std::memcpy(&bits, p, size_t(std::min<int64_t>(eb, 8)));
        sum += checksum_term(job.tensor, s + i * ss + job.index_shift, bits);
      }
    });
    out[j] = sum;
  }
  return out;
}

VerifyResult cpu_verify(const std::vector<SynthJob>& jobs) {
  VerifyResult r;
  std::vector<uint8_t> want;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const SynthJob& job = jobs[j];
    const int64_t eb = job.elem_bytes;
    for_each_run(job.desc, [&](int64_t s, int64_t d, int64_t n, int64_t ss, int64_t ds) {
      want.resize(size_t(n * eb));
      if (job.zero) std::memset(want.data(), 0, want.size());
      else if (ss == 1) synth_fill(want.data(), job.key, s, n, eb);
      else
        for (int64_t i = 0; i < n; ++i) synth_fill(want.data() + i * eb, job.key, s + i * ss, 1, eb);
      if (ds == 1 && std::memcmp(job.dst + d * eb, want.data(), want.size()) == 0) return;
      for (int64_t i = 0; i < n; ++i) {
        if (std::memcmp(job.dst + (d + i * ds) * eb, want.data() + i * eb, size_t(eb)) == 0) continue;
        if (r.mismatches == 0) {
          r.first_job = int64_t(j);
          r.first_index = d + i * ds;
        }
        ++r.mismatches;
      }
    });
  }
  return r;
}

namespace {

// Test hook: SHARDSYNC_TEST_SLOW_COPY=F (a number > 1, as 1.25) makes every pack/unpack copy
// take F times as long: after the copy, the thread spins for (F - 1) times what it took (a
// deliberately slowed kernel, which the performance gate must catch; tests/perf).
double slow_copy_factor() {
  static const double f = [] {
    const char* v = std::getenv("SHARDSYNC_TEST_SLOW_COPY");
    return v ? std::max(1.0, std::atof(v)) : 1.0;
  }();
  return f;
}

void spin_for(std::chrono::steady_clock::duration d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Test hook: SHARDSYNC_TEST_SLOW_BACKGROUND_MS=N delays every task of the background lane by
// N ms (a lagging process-and-copy lane, whose buffers must stay counted as staged until it
// got to them; tests/engine).
int slow_background_ms() {
  static const int ms = [] {
    const char* v = std::getenv("SHARDSYNC_TEST_SLOW_BACKGROUND_MS");
    return v ? std::max(0, std::atoi(v)) : 0;
  }();
  return ms;
}

class CpuDevice : public Device {
  static constexpr size_t kHugePage = size_t(2) << 20;
  static constexpr int64_t kHugeFrom = int64_t(4) << 20;

 public:
  MemKind kind() const override { return MemKind::kHost; }
  std::string describe() const override { return "cpu"; }
  // Large buffers (weights, gathered slabs, send/receive buffers) ask for transparent huge
  // pages: strided packs and transposes touch a new 4 KiB page every few cache lines, and
  // each TLB miss costs a page walk (two levels of them in a VM).
  uint8_t* alloc(int64_t bytes) override {
    const size_t align = bytes >= kHugeFrom ? kHugePage : 64;
    const size_t size = (size_t(bytes) + align - 1) / align * align;
    void* p = std::aligned_alloc(align, size);
    if (!p) throw Error("host allocation of " + std::to_string(bytes) + " bytes failed");
    if (align == kHugePage) (void)madvise(p, size, MADV_HUGEPAGE);  // advice only: fine if refused
    return static_cast<uint8_t*>(p);
  }
  void release(uint8_t* p) override { std::free(p); }

  void copy(const std::vector<CopyJob>& jobs, Lane lane) override {
    run(lane, [this, jobs, slow = slow_copy_factor()] {
      const auto t0 = slow > 1 ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      std::vector<CopyTask> batch;
      batch.reserve(jobs.size());
      for (const CopyJob& j : jobs) batch.push_back(CopyTask{&j.desc, j.src, j.dst, j.elem_bytes});
      together_ += execute_copies_fast(batch);
      if (slow > 1) spin_for(std::chrono::duration_cast<std::chrono::steady_clock::duration>((std::chrono::steady_clock::now() - t0) * (slow - 1)));
    });
  }
  // The main lane is synchronous, so are these sums; a background copy's come with its task.
  HashTicket copy_hashed(const std::vector<CopyJob>& jobs, Lane lane) override {
    copy(jobs, lane);
    std::vector<HashJob> hj;
    std::vector<size_t> of;  // hj's jobs among `jobs`
    for (size_t i = 0; i < jobs.size(); ++i) {
      const CopyJob& j = jobs[i];
      if (j.hash_tensor < 0 || !j.hash_index || j.desc.numel == 0) continue;  // sum 0
      hj.push_back(HashJob{j.dst, *j.hash_index, j.elem_bytes, j.hash_tensor, 0, false});
      of.push_back(i);
    }
    if (lane == Lane::kBackground) synchronize();
    const std::vector<uint64_t> got = cpu_checksum(hj);
    std::vector<uint64_t> out(jobs.size(), 0);
    for (size_t k = 0; k < of.size(); ++k) out[of[k]] = got[k];
    const HashTicket t = ++tickets_;
    hashed_.emplace(t, std::move(out));
    return t;
  }
  std::vector<uint64_t> sums(HashTicket t) override {
    auto it = hashed_.find(t);
    if (it == hashed_.end()) throw Error("cpu device: no hashed copy " + std::to_string(t) + " to read sums of");
    std::vector<uint64_t> out = std::move(it->second);
    hashed_.erase(it);
    return out;
  }
  void synth(const std::vector<SynthJob>& jobs, Lane lane) override {
    run(lane, [jobs] {
      for (const SynthJob& j : jobs) cpu_synth(j);
    });
  }
  void memcpy(uint8_t* dst, const uint8_t* src, int64_t bytes, Lane lane) override {
    run(lane, [=] { std::memcpy(dst, src, size_t(bytes)); });
  }
  void quantize_fp8(const std::vector<QuantJob>& jobs, Lane lane) override {
    run(lane, [jobs] {
      for (const QuantJob& j : jobs)
        cpu_quantize_fp8_blocks(reinterpret_cast<const uint16_t*>(j.src), j.src_ld, j.rows, j.cols, j.dst, j.dst_ld,
                                j.scale_inv, j.scale_ld);
    });
  }
  Fence fence(Lane lane) override { return lane == Lane::kMain ? 0 : submitted_; }
  bool done(Fence f) override { return f <= completed_.load(); }
  void after(Lane, Fence f) override {
    // The main lane is synchronous; waiting on the background lane blocks until it got there.
    while (!done(f)) std::this_thread::yield();
  }
  void synchronize() override { bg_.drain(); }
  VerifyResult verify(const std::vector<SynthJob>& jobs) override { return cpu_verify(jobs); }
  std::vector<uint64_t> checksum(const std::vector<HashJob>& jobs) override { return cpu_checksum(jobs); }
  // The main lane is synchronous: the chunks are packed.
  std::vector<DeltaRecord> delta_encode(const std::vector<DeltaEncodeJob>& jobs) override {
    std::vector<DeltaRecord> out;
    out.reserve(jobs.size());
    for (const DeltaEncodeJob& j : jobs)
      out.push_back(shardsync::delta_encode(j.record, j.chunk_bytes, j.kept, j.base_version, j.version, j.whole,
                                            delta_scratch_));
    return out;
  }
  DeltaRecord delta_apply(const DeltaApplyJob& j) override {
    return shardsync::delta_apply(j.record, j.record_bytes, j.kept, j.chunk_bytes, j.have_kept, j.kept_version);
  }
  void to_host(void* dst, const uint8_t* src, int64_t bytes) override { std::memcpy(dst, src, size_t(bytes)); }
  void from_host(uint8_t* dst, const void* src, int64_t bytes) override { std::memcpy(dst, src, size_t(bytes)); }
  void* main_stream() override { return nullptr; }
  int64_t copies_together() const override { return together_.load(); }
  uint8_t* host_alloc(int64_t bytes) override { return alloc(bytes); }
  void host_release(uint8_t* p) override { release(p); }

 private:
  template <class F>
  void run(Lane lane, F&& f) {
    if (lane == Lane::kMain) {
      f();
      return;
    }
    ++submitted_;
    bg_.submit([this, g = std::forward<F>(f), delay = slow_background_ms()]() mutable {
      if (delay > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      g();
      ++completed_;
    });
  }
  BackgroundWorker bg_;
  int64_t submitted_ = 0;
  std::atomic<int64_t> completed_{0};
  std::atomic<int64_t> together_{0};
  std::vector<uint8_t> delta_scratch_;
  std::map<HashTicket, std::vector<uint64_t>> hashed_;
  HashTicket tickets_ = 0;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

#ifndef SHARDSYNC_HAVE_CUDA
std::unique_ptr<Device> make_cuda_device(int) {
  throw Error("this build has no CUDA support (configure with -DSHARDSYNC_CUDA=ON where nvcc is present)");
}
int cuda_device_count() { return 0; }
bool cuda_built() { return false; }
std::string cuda_error() { return ""; }
std::vector<std::pair<std::string, std::string>> cuda_versions() { return {}; }
#endif

int gpus_listed_by_driver() {
  const char* dir = std::getenv("SHARDSYNC_NVIDIA_GPUS_DIR");
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator(dir ? dir : "/proc/driver/nvidia/gpus", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

std::string broken_gpu_setup() {
  if (!cuda_built() || cuda_device_count() > 0) return "";
  const int listed = gpus_listed_by_driver();
  if (listed == 0) return "";
  return std::to_string(listed) + " GPU(s) listed by the driver, but CUDA: " + cuda_error();
}

}  // namespace shardsync
