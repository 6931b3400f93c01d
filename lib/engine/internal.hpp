// Engine internals shared by the producer, consumer and broadcast implementations.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "comm/heartbeats.hpp"
#include "engine/checksum.hpp"
#include "engine/collectives.hpp"
#include "device/delta.hpp"
#include "device/device.hpp"
#include "engine/engine.hpp"
#include "engine/gather.hpp"
#include "engine/pipeline.hpp"
#include "engine/schedule.hpp"
#include "engine/synthetic.hpp"
#include "plan/dedupe.hpp"
#include "plan/quant.hpp"

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
  kMsgReadDone = 10,  // a = local rank: every one-pass read of this sync from the trainer is done
  kMsgShareReady = 11,  // --dedupe-node, puller to its sharers: a = sync index; its live weights are complete
  kMsgShareDone = 12,   // --dedupe-node, sharer to its pullers: a = sync index; its copies from them are done
  kMsgHashes = 13,      // --checksum, trainer to consumer: z = version; payload = the sums of its one-pass pieces
};

// How a consumer may read a trainer's weights itself (one pass: the trainer's bytes to the
// engine parameters' final place, no staging on either side), for pieces whose source is
// the trainer's own shard (V4 always; V1-V3 where no gather touches it). Every rank
// derives the same answer, so producer and consumer agree on which pieces are packed.
enum class OnePass : uint8_t {
  kOff,         // --one-pass off or --layerwise: every piece is packed
  kContiguous,  // one-sided gets between registered regions: pieces that are one run on both sides
  kMapped,      // the transport maps the trainer's memory (CUDA IPC): any piece, strided copies
};

// The units of one engine row, and the unit of each HF tensor.
struct UnitSchedule {
  std::vector<Unit> units;
  std::vector<int32_t> unit_of_hf;
};

// The consumer's view of one engine: units, and per unit the chunks from each trainer.
struct ConsumerSchedule : UnitSchedule {
  // chunks[unit] = list of (trainer, chunks)
  std::vector<std::vector<std::pair<int, std::vector<Chunk>>>> chunks;
  RankSchedule pulls;   // packed pulls (requested from the trainers)
  int64_t num_chunks = 0;
  // One-pass reads (not requested): per trainer, every piece it reads itself, in unit order.
  std::map<int, std::vector<ChunkPiece>> direct;
  int64_t direct_bytes = 0;
  // --dedupe-node: pieces copied from a rank of this node (not pulled), their bytes per weight
  // group and in all; the world ranks this rank copies from, and those that copy from it.
  std::vector<Share> shares;
  std::map<int32_t, int64_t> shared_group_bytes;
  int64_t shared_bytes = 0;
  std::vector<int> pullers, sharers;
};

// The producer's view of one engine.
struct ProducerSchedule : UnitSchedule {
  // expected[unit][local rank] = the packed pulls this trainer serves (from the routes)
  std::vector<std::vector<std::vector<ChunkPiece>>> expected;
  // Per local rank: bytes it reads from this trainer in one pass (> 0: READ_DONE awaited).
  std::vector<int64_t> direct_bytes;
  // --checksum: per local rank, the pieces it reads in one pass from this trainer, in the
  // consumer's order (ConsumerSchedule::direct), which the trainer hashes at each sync's start.
  std::vector<std::vector<ChunkPiece>> direct;
};

// A cached request: per unit, per local rank, the pulls it asked for (kept across syncs by
// engines whose row caches requests).
using RequestCache = std::vector<std::vector<std::optional<std::vector<ChunkPiece>>>>;

// Delta sync: a chunk as last sent or received, and the version it holds.
struct KeptChunk {
  DeviceBuffer bytes;
  uint64_t version = 0;
};
// The chunks one side keeps, by (engine, unit, local rank or trainer, chunk).
class KeptChunks {
 public:
  using Key = std::array<int32_t, 4>;
  // The chunk at `key`, its `bytes` allocated on first use (*fresh: it was; nothing kept yet).
  KeptChunk& at(const Key& key, int64_t bytes, Device* device, bool* fresh) {
    KeptChunk& k = chunks_[key];
    *fresh = k.bytes.data() == nullptr && bytes > 0;
    if (*fresh) k.bytes = DeviceBuffer(device, bytes);
    return k;
  }
  // Frees the chunks of every engine but `engine` (a run switching engines keeps one copy).
  // Both sides drop alike, so the next sync of another engine is whole.
  void keep_only(int32_t engine) {
    std::erase_if(chunks_, [&](const auto& kv) { return kv.first[0] != engine; });
  }
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& [key, k] : chunks_) b += k.bytes.size();
    return b;
  }

 private:
  std::map<Key, KeptChunk> chunks_;
};

// What a trainer rank holds: its shards, the registered send buffer, its gather groups, the
// schedule of each engine and the requests consumers sent. One registered allocation holds
// the send buffer (at 0) and the weights (at Impl::weights_base()).
struct TrainerSide {
  DeviceBuffer registered;
  std::unique_ptr<TrainerShards> shards;  // the region's table
  std::unique_ptr<WeightSource> source;   // what the region holds at each version
  CallerSource* caller = nullptr;         // source, when it is the caller's tensors
  Region send_buffer;
  std::unique_ptr<GroupComm> trainers_comm, tp_comm, etp_comm;  // gathers
  std::map<int, ProducerSchedule> schedules;                    // by engine
  std::map<int, RequestCache> request_cache;                    // by engine
  DeviceBuffer bcast_bucket;                                    // rank 0: broadcast's bucket, kept across syncs
  // --delta: each chunk as last sent, by (engine, unit, local rank, chunk), and per engine the
  // version of its last anchor (a sync that sent every chunk whole).
  KeptChunks kept;
  std::map<int, uint64_t> last_anchor;
};

// What an inference rank holds: its plan, the registered receive buffer, the live weights
// (engine params in creation order) and where each weight group lies in them, the schedule
// of each engine, and the START/FINISH it is waiting for. One registered allocation holds
// the receive buffer (at 0) and the live weights (at Impl::live_base()), so one-sided gets
// land in either.
struct ConsumerSide {
  const RankPlan* plan = nullptr;
  DeviceBuffer registered;
  Region landing;
  Region live;
  std::vector<int64_t> param_offset;                          // byte offset of each engine param in `live`
  std::vector<int32_t> group_of_param;
  std::map<int32_t, std::pair<int64_t, int64_t>> group_span;  // group -> (offset, bytes) in live
  std::map<int32_t, int64_t> group_copy_bytes;                // bytes pulled per group (plan copies)
  std::map<int, ConsumerSchedule> schedules;                  // by engine
  std::map<int, bool> requests_sent;                          // engines whose requests were sent once
  std::vector<TensorSlot> param_slots;                        // each engine param's slot in `live`
  Bindings params_bound;                                      // the caller's parameters (WeightsFrom::kCaller)
  BufferPool layerwise_pool;
  DeviceBuffer bcast_bucket;  // broadcast's receive bucket, kept across syncs
  // --delta: each chunk as last received, by (engine, unit, trainer, chunk).
  KeptChunks kept;
  // An FP8 target (plan/quant.hpp, quantize.cpp): the quantized parameters, and the live FP8
  // weights in `fp8`: each one's e4m3fn codes and fp32 scales (byte offsets in it). The bf16
  // values land in `live` or a layerwise buffer as for any target; the process step quantizes.
  std::vector<QuantParam> quant;
  std::vector<int32_t> quant_of_param;  // per engine param: index into quant, -1 if not quantized
  std::vector<int64_t> codes_offset, scale_offset;
  DeviceBuffer fp8;
  // This sync's quantized parameters arrived as codes and scales (FP8 on the wire, a pull
  // engine): nothing to quantize, and their bf16 image is not written.
  bool fp8_arrived = false;
  // A START or FINISH that arrived while it waited for an earlier sync (stood down, or a
  // replacement), and READYs that overtook the START they belong to.
  std::optional<CtrlMsg> pending_start;
  std::deque<CtrlMsg> stashed_readies;
  // --dedupe-node: SHARE_READYs and SHARE_DONEs seen, as (sync index, world rank of the sender).
  std::set<std::pair<int, int>> share_ready, share_done;
  std::map<int, CtrlMsg> direct_hashes;  // --checksum: HASHES by trainer (z: its version)
  bool stood_down = false, finish_seen = false, finish_degraded = false;
  // This sync writes the caller's parameters in place (weights.hpp's ParamSink; the consumer
  // decides at its start): param() is the caller's memory, and nothing is copied out.
  bool caller_in_place = false;
  uint8_t* param(int32_t ep) const {
    uint8_t* caller = caller_in_place ? params_bound.at(size_t(ep)) : nullptr;
    return caller ? caller : live.data() + param_offset[size_t(ep)];
  }
};

// Which ranks are alive (world ranks; rank 0's view, given to every trainer each sync):
// dead = failed; down = dead, or in a replica taken down.
struct Liveness {
  std::vector<uint8_t> dead, down;
  std::vector<uint8_t> notified_down;  // rank 0: STANDDOWN sent
  bool failures = false;
  std::vector<int> live_at_start;      // rank 0: consumers START went to in this sync
  std::deque<CtrlMsg> early_reports;   // rank 0: REPORTs that arrived while it still served
};

// Rank 0's replacements: JOINs kept until the sync boundary, and what was taken.
struct RejoinState {
  std::vector<CtrlMsg> pending_joins;
  std::vector<RejoinEvent> log, last;
  bool taken_now = false;  // every trainer: a replacement was taken at this sync's boundary
};

// One sync's one-pass reads on a consumer (one_pass.cpp): every piece it reads from the
// trainers' weights itself, written in place in the live weights. Mapped (CUDA IPC): one
// copy launch per trainer through the mapping; otherwise one-sided gets between the
// registered regions, at most a chunk each, a bounded number in flight. When every read
// from a trainer has completed the trainer is told (READ_DONE); a long read is not taken for
// a dead consumer while its heartbeats come.
class OnePassReads {
 public:
  // Reads in flight count into `busy` (the consumer's transfer time). `corrupt` (test hook):
  // mapped reads take their first piece from a private copy with one flipped bit, as if it
  // were damaged on the way (gets: the consumer flips a landed bit instead).
  OnePassReads(Engines::Impl& m, const ConsumerSchedule& s, BusyTime& busy, bool corrupt = false);
  // Posts and completes reads; `landed` runs after each completion (test hooks). True when
  // anything happened.
  template <class F>
  bool step(RankStats& st, F&& landed) {
    const bool posted = post(st);  // both run, posting first
    const bool completed = complete(st, [&] { landed(); });
    return posted || completed;
  }
  bool done() const { return left_.empty(); }
  int64_t bytes() const { return bytes_; }
  // Where the first byte read lands in the live weights (the corruption test hook).
  uint8_t* first_dst() const { return first_dst_; }
  // --checksum: the hashed copy of a trainer's pieces (mapped reads hash as they copy), or null
  // where its pieces came by gets (hashed where they landed, after the reads).
  bool corrupted() const { return corrupt_copy_.data() != nullptr; }
  const HashTicket* hashed(int trainer) const {
    auto it = hashed_.find(trainer);
    return it == hashed_.end() ? nullptr : &it->second;
  }

 private:
  struct Get {
    int trainer;
    int64_t remote, local, bytes;
  };
  bool post(RankStats& st);
  bool complete(RankStats& st, const std::function<void()>& landed);
  void finished(int trainer, RankStats& st);
  const uint8_t* damaged_source(const uint8_t* src, const CopyDesc& d, int64_t eb);
  Engines::Impl& m_;
  BusyTime& busy_;
  std::deque<Get> queue_;
  std::map<int64_t, Get> in_flight_;          // by transport get id
  std::map<int, int64_t> left_;               // trainer -> bytes not yet read
  std::map<int, Fence> launched_;  // mapped: trainer -> its copy's fence
  std::map<int, HashTicket> hashed_;  // mapped with --checksum: trainer -> its copy's sums
  DeviceBuffer corrupt_copy_;         // the test hook's damaged source
  int64_t bytes_ = 0;
  uint8_t* first_dst_ = nullptr;
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
  std::unique_ptr<GroupComm> bcast_comm;  // rank 0 + every inference rank (broadcast baseline)
  std::map<int, Routes> routes;           // by source policy
  // --dedupe-node: each world rank's node (the lowest world rank on its host), the assignment
  // of shared pieces per source policy (applied to `routes`), and each local rank's parameter
  // offsets in its live weights (where a sharer reads its puller's).
  std::vector<int> host_of_rank;
  std::map<int, NodeDedupe> dedupes;
  std::map<int, std::vector<int64_t>> param_offsets_of_local;
  const std::vector<int64_t>& param_offsets(int local_rank);
  int world_rank_of_local(int local_rank) const {  // in this rank's replica
    return world.num_trainers + world.replica * inference.layout().ranks_per_replica() + local_rank;
  }
  // --dedupe-node: the consumer's copies from its node's pullers after its own pulls (and its
  // SHARE_READYs to its sharers); entries whose bytes were lost to a dead puller go to `lost`.
  void share_in_node(const ConsumerSchedule& s, int sync_index, RankStats& st, std::set<int32_t>* lost);
  OnePass one_pass = OnePass::kOff;
  std::map<int, WeightsLayout> trainer_weights;  // consumers: layouts of the trainers they read

  // Byte offsets in the registered allocations (256-aligned after the buffers).
  int64_t weights_base() const { return (opt.send_buffer_bytes + 255) & ~int64_t(255); }
  int64_t live_base() const { return (opt.recv_buffer_bytes + 255) & ~int64_t(255); }
  // Whether the consumer reads `piece` (served by `trainer_rank` under `policy`) in one pass.
  bool reads_directly(SourcePolicy policy, int trainer_rank, const ChunkPiece& piece) const;
  // The pieces local rank `local_rank` reads in one pass from `trainer_rank`, in its order
  // (ConsumerSchedule::direct): ProducerSchedule::direct, made once with the schedule.
  std::vector<ChunkPiece> direct_pieces(EngineKind e, int local_rank, int trainer_rank);
  // --checksum, consumer: the landed pieces' sums against the trainer's; a difference is counted
  // and the first named in st.
  void compare_sums(const std::vector<ChunkPiece>& pieces, const std::vector<uint64_t>& landed,
                    const std::vector<uint8_t>& sent, int trainer_rank, RankStats& st);
  void check_direct_sums(const ConsumerSchedule& s, const OnePassReads& direct, uint64_t version, RankStats& st);
  // FP8 on the wire: per HF tensor, the source trainer_rank quantizes under `policy`
  // (make_chunks' `fp8`); null when the wire carries bf16.
  const std::vector<Fp8Source>* fp8_sources(SourcePolicy policy, int trainer_rank);
  std::map<std::pair<int, int>, std::vector<Fp8Source>> fp8_sources_cache;
  // The consumer's copy of an FP8 piece's scales into its parameter's weight_scale_inv.
  CopyDesc fp8_scales_copy(const ChunkPiece& piece) const;
  const WeightsLayout& weights_of(int trainer_rank);
  // The caller's weights where the node's processes map each other's memory (not with a
  // transport whose one-pass reads are gets at region offsets, nor one that takes replacement
  // processes, which would miss the exchange): every trainer's TensorTable, exchanged at the
  // first sync (share_tables, collective), and the caller segments this rank mapped.
  bool shares_tables() const;
  void share_tables();
  bool tables_shared = false;
  std::map<int, TensorTable> tables;
  std::map<std::pair<int, int32_t>, uint8_t*> opened;  // (trainer rank, segment) -> mapping
  // Where trainer rank t's shard of hf lies in this process when t keeps it in its own memory
  // (shared through its table); null when it lies in t's region (at weights_of(t)'s offset).
  const uint8_t* caller_shard(int trainer_rank, int32_t hf);

  TrainerSide trainer_side;
  ConsumerSide consumer_side;
  Liveness liveness;
  RejoinState rejoin;

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

  // Liveness (liveness.cpp): heartbeats to and from every peer, started at bootstrap (or join).
  std::unique_ptr<Heartbeats> heartbeats;
  void start_heartbeats(const std::vector<std::vector<uint8_t>>& contacts);  // by world rank; empty: unknown
  // Whether `rank` is lost (heartbeats silent past the failure timeout, or its process gone).
  bool lost(int rank) const { return heartbeats && heartbeats->lost(rank); }
  std::function<bool(int)> lost_fn() const {
    return [this](int r) { return lost(r); };
  }
  // On the heartbeat thread: a loss the run cannot survive ends this process with one line.
  void on_peer_lost(int peer, const PeerLoss& why);
  // "rank 3 (inference, replica 1)" / "rank 1 (trainer)"
  std::string describe_rank(int rank) const;
  // A loss or a stall the run cannot survive. The CLI (syncs back to back): prints `line` (once
  // per process: a loss and the stall watchdog never both) and ends the process with `status`.
  // The library: never ends the process; the run is broken, and the call in flight (or the
  // next) throws Error(line) from its wait (check_broken), collectives among the trainers
  // included, which it polls (wait()).
  void end_run(const std::string& line, int status);
  std::atomic<bool> broken{false};
  std::mutex broken_mu;
  std::string broken_why;
  void check_broken();
  // Completes a non-blocking collective: MPI_Wait in the CLI; polled in the library, so that a
  // broken run ends the wait.
  void wait(MPI_Request* req);
  std::atomic<bool> in_broadcast{false};  // a collective over every rank: no loss survivable

  Impl(World& w, const ModelSpec& m, const TrainerPlacement& t, const InferencePlacement& i,
       const std::vector<RankPlan>& p, const SyncOptions& o);
  ~Impl();

  // Stall watchdog: armed from the first sync to the end of the run; every step of
  // progress (a message, a landed chunk, a bucket, a collective) beats it. What the rank
  // waits for (a phase, and a peer or -1) is named when it fires.
  std::atomic<double> last_beat{0};
  std::atomic<bool> armed{false}, stop_watchdog{false};
  std::atomic<const char*> wait_phase{"starting"};
  std::atomic<int> wait_peer{-1};
  std::thread watchdog;
  void start_watchdog();
  void beat() { last_beat.store(now_s(), std::memory_order_relaxed); }
  void waiting(const char* phase, int peer = -1) {
    wait_phase.store(phase, std::memory_order_relaxed);
    wait_peer.store(peer, std::memory_order_relaxed);
  }
  void arm() {
    beat();
    armed = true;
  }

  const Routes& routes_for(SourcePolicy policy);
  UnitSchedule unit_schedule(EngineKind e) const;
  const ProducerSchedule& producer_schedule(EngineKind e);
  const ConsumerSchedule& consumer_schedule(EngineKind e);
  std::vector<int> consumers_of_local(int local_rank) const;  // world ranks, every replica
  GatherContext gather_context();

  RankStats run_producer(EngineKind e, int sync_index, uint64_t version);
  RankStats run_consumer(EngineKind e, int sync_index, uint64_t version);
  RankStats run_broadcast_trainer(int sync_index, uint64_t version);
  RankStats run_broadcast_consumer(int sync_index, uint64_t version);
  void verify(uint64_t version, RankStats& st, const std::set<int32_t>& skip_entries = {});
  // Test hook (SyncOptions::stall_at_sync): this rank sleeps here if the hook names it.
  void stall_for_test(SyncOptions::StallIn where, int sync_index);
  // FP8 targets (quantize.cpp): the live FP8 weights; the quantization of a group's (every
  // group's: -1) quantized parameters whose bf16 values lie at bf16 + param_offset - bf16_offset,
  // into the live FP8 weights or into codes/scales (one parameter's, only_param); the process
  // step; every code and scale against the expected.
  void setup_quant();
  std::vector<QuantJob> quant_jobs(int32_t group, const uint8_t* bf16, int64_t bf16_offset, uint8_t* codes,
                                   uint8_t* scales, int32_t only_param = -1) const;
  void quantize_group(int32_t group, const uint8_t* bf16, int64_t bf16_offset, Lane lane, RankStats& st);
  void verify_fp8(uint64_t version, RankStats& st);
  // The layerwise buffer of a group (allocated on first use, padding zero-filled).
  DeviceBuffer& layerwise(int32_t group, std::map<int32_t, DeviceBuffer>& buffers, StagingMeter& meter);
};

// Test hook: SHARDSYNC_TEST_SLOW_ENGINE=NAME:F[,NAME:F...] (as v3:1.2 or broadcast:1.25,v4:1.25)
// stretches every rank's sync of each named engine (broadcast and the pull engines), trainers'
// and inference ranks', to F times its time (a spin before the sync's time is taken): the sync the benchmarks report, the slowest rank's, is then F times as long, a
// deliberately slower engine the performance gate must catch (tests/perf). No-op otherwise.
void stretch_sync_for_test(EngineKind e, double t0);

}  // namespace shardsync
