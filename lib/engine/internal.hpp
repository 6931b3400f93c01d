// Engine internals shared by the producer, consumer and broadcast implementations.
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

#include "engine/collectives.hpp"
#include "engine/device.hpp"
#include "engine/engine.hpp"
#include "engine/gather.hpp"
#include "engine/schedule.hpp"
#include "engine/synthetic.hpp"

namespace shardsync {

enum MsgType : uint32_t {
  kMsgStart = 1,    // a = sync index, b = engine, c = 1: skipped, x = version
  kMsgRequest = 2,  // a = unit, b = local rank; payload = pulls
  kMsgReady = 3,    // a = unit, b = chunk, c = local rank, x = remote offset, y = bytes, z = version
  kMsgDone = 4,     // a = unit, b = chunk, c = local rank
  kMsgReport = 5,   // payload = RankStats
  kMsgStandDown = 6,  // this replica is down: serve no more syncs
  kMsgFinish = 7,     // end of the run; a = 1 when some rank failed
  kMsgJoin = 8,       // a replacement for a dead rank; payload = contact bytes + fingerprint
  kMsgReject = 9,     // to a replacement: not taken; payload = the reason
};

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

// Runs tasks in order on one background thread (V3: process + copy into live weights).
class BackgroundWorker {
 public:
  BackgroundWorker();
  ~BackgroundWorker();
  void submit(std::function<void()> task);
  void drain();  // waits until every submitted task has run

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false, busy_ = false;
  std::thread thread_;
};

// The consumer's view of one engine: units, and per unit the chunks from each trainer.
struct ConsumerSchedule {
  std::vector<Unit> units;
  std::vector<int32_t> unit_of_hf;
  // chunks[unit] = list of (trainer, chunks)
  std::vector<std::vector<std::pair<int, std::vector<Chunk>>>> chunks;
  RankSchedule pulls;
  int64_t num_chunks = 0;
};

// The producer's view of one engine.
struct ProducerSchedule {
  std::vector<Unit> units;
  std::vector<int32_t> unit_of_hf;
  // expected[unit][local rank] = the pulls this trainer serves (from the routes)
  std::vector<std::vector<std::vector<ChunkPiece>>> expected;
};

struct Engines::Impl {
  World& world;
  const ModelSpec& model;
  const TrainerPlacement& trainer;
  const InferencePlacement& inference;
  const std::vector<RankPlan>& plans;
  SyncOptions opt;
  std::unique_ptr<Device> device;
  std::unique_ptr<Transport> transport;
  int64_t chunk_bytes = 0;
  // Group communicators (trainer gathers; broadcast baseline).
  std::unique_ptr<GroupComm> trainers_comm, tp_comm, etp_comm, bcast_comm;

  // Trainer state.
  std::unique_ptr<TrainerShards> shards;
  DeviceBuffer send_buffer;
  std::map<int, ProducerSchedule> producer_schedules;  // by engine
  // Cached requests: [engine][unit][local rank] -> decoded pulls (V2/V3 keep them across syncs).
  std::map<int, std::vector<std::vector<std::optional<std::vector<ChunkPiece>>>>> request_cache;

  // Consumer state.
  const RankPlan* plan = nullptr;
  DeviceBuffer landing;
  DeviceBuffer live;                         // live weights, engine params in creation order
  std::vector<int64_t> param_offset;         // byte offset of each engine param in `live`
  std::vector<int32_t> group_of_param;
  std::map<int32_t, std::pair<int64_t, int64_t>> group_span;  // group -> (offset, bytes) in live
  std::map<int32_t, int64_t> group_copy_bytes;                // bytes pulled per group (plan copies)
  std::map<int, ConsumerSchedule> consumer_schedules;
  std::map<int, bool> requests_sent;  // V2/V3: metadata sent once per engine
  std::map<int, Routes> routes;       // by source policy
  std::deque<CtrlMsg> early_reports;  // rank 0: REPORTs that arrived while it still served
  BufferPool layerwise_pool;
  // Liveness (world ranks): dead = failed; down = dead, or in a replica taken down.
  std::vector<uint8_t> dead, down;
  std::vector<uint8_t> notified_down;  // rank 0: STANDDOWN sent
  bool stood_down = false, failures = false;
  std::vector<int> live_at_start;      // rank 0: consumers START went to in this sync
  // Rejoin. Rank 0 keeps JOINs until the sync boundary; consumers keep a START or FINISH
  // that arrived while they waited for an earlier sync (stood down, or a replacement).
  std::vector<CtrlMsg> pending_joins;
  std::vector<RejoinEvent> rejoin_log, last_rejoins;
  std::optional<CtrlMsg> pending_start;
  std::deque<CtrlMsg> stashed_readies;  // READYs that overtook the START they belong to
  bool finish_seen = false, finish_degraded = false;
  std::string fingerprint() const;     // what a replacement must match (model, layouts, chunks)
  void absorb_join(CtrlMsg&& m);       // rank 0: a JOIN seen in any polling loop
  void accept_joins(uint64_t version); // trainers, at a sync boundary (collective over trainers)
  // Consumers: takes the next START (returns true) or FINISH (false) off the wire.
  bool wait_start_or_finish(double timeout_s = 0);  // timeout_s > 0: give up after it
  // Takes this sync's START (pending, or off the wire); false when the replica was taken
  // down instead. Throws if the START is for another sync.
  bool take_start(EngineKind e, int sync_index, uint64_t version, std::deque<CtrlMsg>* early_readies, CtrlMsg* start);
  void publish_contact();              // trainers, with --rendezvous
  void withdraw_contact();
  void declare_dead(int rank);
  void take_down_replicas();           // rank 0: down = every replica with a dead member

  Impl(World& w, const ModelSpec& m, const TrainerPlacement& t, const InferencePlacement& i,
       const std::vector<RankPlan>& p, const SyncOptions& o);
  ~Impl();

  // Stall watchdog: armed from the first sync to the end of the run; every step of
  // progress (a message, a landed chunk, a bucket, a collective) beats it.
  std::atomic<double> last_beat{0};
  std::atomic<bool> armed{false}, stop_watchdog{false};
  std::thread watchdog;
  void beat() { last_beat.store(now_s(), std::memory_order_relaxed); }
  void arm() {
    beat();
    armed = true;
  }

  const Routes& routes_for(SourcePolicy policy);
  const ProducerSchedule& producer_schedule(EngineKind e);
  const ConsumerSchedule& consumer_schedule(EngineKind e);
  std::vector<int> consumers_of_local(int local_rank) const;  // world ranks, every replica
  GatherContext gather_context();

  RankStats run_producer(EngineKind e, int sync_index, uint64_t version);
  RankStats run_consumer(EngineKind e, int sync_index, uint64_t version);
  RankStats run_broadcast_trainer(int sync_index, uint64_t version);
  RankStats run_broadcast_consumer(int sync_index, uint64_t version);
  void verify(uint64_t version, RankStats& st);
  // The layerwise buffer of a group (allocated on first use, padding zero-filled).
  DeviceBuffer& layerwise(int32_t group, std::map<int32_t, DeviceBuffer>& buffers, StagingMeter& meter);
};

}  // namespace shardsync
