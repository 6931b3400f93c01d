// Building blocks of the engines' pipelines: idle pacing, phase timers, staging meters, the
// send/receive buffer allocator, a pool of layerwise buffers, and the background lane's
// worker thread (the CPU device). No MPI, no transport.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "device/background_worker.hpp"
#include "device/device.hpp"

namespace shardsync {

// Whether idle polling may sleep (set when a node runs more ranks than it has cores).
void set_idle_sleep_allowed(bool allowed);
bool idle_sleep_allowed();

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Polling loops back off when idle for long: yield first, then sleep a few microseconds,
// so ranks sharing cores (local runs) leave them to the ranks that have work. Any progress
// resets it. This paces idle polling only; no step of the pipeline waits on a timer. With a
// core per rank (idle_sleep_allowed() false) it only yields.
class IdleBackoff {
 public:
  void progress() { idle_ = 0; }
  void pause() {
    // A core per rank: only yield (a sleep costs ~50 us of timer slack, against ~100 us per
    // tensor round trip: measured, v1 0.077 s without sleeps and 0.163 s with them on dense
    // Qwen3-8B). Oversubscribed: sleep up to 200 us, so the ranks with work get the cores.
    if (++idle_ < 64 || !idle_sleep_allowed()) {
      std::this_thread::yield();
      return;
    }
    int64_t us = std::min<int64_t>(200, int64_t(idle_ - 63) * 4);
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

 private:
  int64_t idle_ = 0;
};

// Adds elapsed time to a counter when it goes out of scope.
class PhaseTimer {
 public:
  explicit PhaseTimer(double& acc) : acc_(acc), t0_(now_s()) {}
  ~PhaseTimer() { acc_ += now_s() - t0_; }

 private:
  double& acc_;
  double t0_;
};

// Current and peak bytes of staging memory on a rank (sub may come from the background
// thread).
class StagingMeter {
 public:
  void add(int64_t b) {
    int64_t now = cur_.fetch_add(b) + b;
    int64_t p = peak_.load();
    while (now > p && !peak_.compare_exchange_weak(p, now)) {
    }
  }
  void sub(int64_t b) { cur_.fetch_sub(b); }
  int64_t peak() const { return peak_.load(); }

 private:
  std::atomic<int64_t> cur_{0}, peak_{0};
};

// Wall time during which at least one read was in flight (the consumer's transfer column):
// overlapping reads count once, so it never exceeds the sync's time.
class BusyTime {
 public:
  void begin(double t) {
    if (in_flight_++ == 0) since_ = t;
  }
  void end(double t) {
    if (--in_flight_ == 0) total_ += t - since_;
  }
  double total() const { return total_; }

 private:
  int64_t in_flight_ = 0;
  double since_ = 0, total_ = 0;
};

// First-fit allocator over a byte range (send and receive buffers).
class RangeAllocator {
 public:
  explicit RangeAllocator(int64_t size = 0) : size_(size) { free_[0] = size; }
  std::optional<int64_t> alloc(int64_t bytes);
  void release(int64_t offset, int64_t bytes);
  int64_t size() const { return size_; }
  bool idle() const { return free_.size() == 1 && free_.begin()->second == size_; }  // nothing allocated

 private:
  int64_t size_;
  std::map<int64_t, int64_t> free_;  // offset -> length
};

// Reuses device buffers (layerwise buffers) so steady-state syncs do not allocate.
class BufferPool {
 public:
  explicit BufferPool(Device* dev = nullptr) : dev_(dev) {}
  void set_device(Device* dev) { dev_ = dev; }
  DeviceBuffer take(int64_t bytes);
  void give(DeviceBuffer&& buf);

 private:
  Device* dev_;
  std::multimap<int64_t, DeviceBuffer> free_;
};

}  // namespace shardsync
