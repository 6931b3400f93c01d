// The pipelines' building blocks (pipeline.hpp).
#include "engine/pipeline.hpp"

namespace shardsync {

namespace {
std::atomic<bool> g_idle_sleep{true};
}
void set_idle_sleep_allowed(bool allowed) { g_idle_sleep = allowed; }
bool idle_sleep_allowed() { return g_idle_sleep; }

std::optional<int64_t> RangeAllocator::alloc(int64_t bytes) {
  bytes = (bytes + 63) & ~int64_t(63);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    int64_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > bytes) free_[off + bytes] = len - bytes;
    return off;
  }
  return std::nullopt;
}

void RangeAllocator::release(int64_t offset, int64_t bytes) {
  bytes = (bytes + 63) & ~int64_t(63);
  auto it = free_.emplace(offset, bytes).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

DeviceBuffer BufferPool::take(int64_t bytes) {
  auto it = free_.find(bytes);
  if (it == free_.end()) return DeviceBuffer(dev_, bytes);
  DeviceBuffer b = std::move(it->second);
  free_.erase(it);
  return b;
}

void BufferPool::give(DeviceBuffer&& buf) {
  int64_t n = buf.size();
  free_.emplace(n, std::move(buf));
}

BackgroundWorker::BackgroundWorker() : thread_([this] { loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundWorker::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void BackgroundWorker::drain() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [this] { return tasks_.empty() && !busy_; });
}

void BackgroundWorker::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) {
      if (stop_) return;
      continue;
    }
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    l.unlock();
    task();
    l.lock();
    busy_ = false;
    if (tasks_.empty()) idle_.notify_all();
  }
}

}  // namespace shardsync
