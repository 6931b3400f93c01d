// The pipelines' building blocks (pipeline.hpp).
#include "engine/pipeline.hpp"

namespace shardsync {

namespace {
std::atomic<bool> g_idle_sleep{true};
}
void set_idle_sleep_allowed(bool allowed) {
  g_idle_sleep = allowed;
}
bool idle_sleep_allowed() {
  return g_idle_sleep;
}

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

}  // namespace shardsync
