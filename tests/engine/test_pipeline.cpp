// The threaded part of the V3 pipeline, as the consumer drives it: copies into layerwise
// buffers on the main lane, process + copy into live weights on the background lane
// (a thread on CPUs) ordered by fences, buffers back to the pool once their fence passed.
// Built and run under ThreadSanitizer by `make test` (build-tsan). What the consumer counts as
// staged while the background lane works is checked on the real engine
// (mpi.staging_peak_layerwise).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>

#include "device/device.hpp"
#include "engine/internal.hpp"

namespace shardsync {
namespace {

TEST(Pipeline, BackgroundLaneProcessAndCopy) {
  auto dev = make_cpu_device();
  const int groups = 64;
  const int64_t bytes = 1 << 16;
  std::vector<uint8_t> src(size_t(groups * bytes)), live(size_t(groups * bytes), 0);
  std::mt19937 rng(1);
  for (auto& b : src) b = uint8_t(rng());
  BufferPool pool(dev.get());
  struct Pending {
    Fence fence;
    DeviceBuffer buf;
  };
  std::deque<Pending> pending;
  for (int round = 0; round < 3; ++round) {
    for (int g = 0; g < groups; ++g) {
      DeviceBuffer buf = pool.take(bytes);
      CopyDesc d = make_pack_desc(SubView::contiguous({bytes}), 0);
      dev->copy({CopyJob{src.data() + g * bytes, buf.data(), d, 1}});  // unpack: main lane
      dev->after(Lane::kBackground, dev->fence(Lane::kMain));
      dev->memcpy(live.data() + g * bytes, buf.data(), bytes, Lane::kBackground);  // process + copy
      pending.push_back(Pending{dev->fence(Lane::kBackground), std::move(buf)});
      while (!pending.empty() && dev->done(pending.front().fence)) {
        pool.give(std::move(pending.front().buf));
        pending.pop_front();
      }
    }
    dev->synchronize();
    for (auto& p : pending) pool.give(std::move(p.buf));
    pending.clear();
    EXPECT_EQ(std::memcmp(live.data(), src.data(), src.size()), 0) << "round " << round;
    std::fill(live.begin(), live.end(), 0);
  }
}

TEST(Pipeline, WorkerRunsTasksInOrder) {
  BackgroundWorker w;
  std::vector<int> seen;
  std::mutex mu;
  for (int i = 0; i < 1000; ++i)
    w.submit([&, i] {
      std::lock_guard<std::mutex> l(mu);
      seen.push_back(i);
    });
  w.drain();
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[size_t(i)], i);
}

}  // namespace
}  // namespace shardsync
