// Weight sync engines: the rank-level API over the rows of the engine table
// (engine_table.hpp): the broadcast baseline, the sharded pull engines V1, V2, V3 of the
// seed design, and V4 (direct pulls from the trainer shards).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_table.hpp"
#include "engine/pipeline.hpp"  // set_idle_sleep_allowed
#include "engine/stats.hpp"
#include "engine/synthetic.hpp"  // UpdateModel
#include "engine/weights.hpp"
#include "layout/inference.hpp"
#include "layout/trainer.hpp"
#include "plan/plan.hpp"
#include "plan/routes.hpp"
#include "transport/transport.hpp"

namespace shardsync {

struct SyncOptions {
  std::string transport;                // "ucx", "mpi", "cuda_ipc"
  MemKind memory = MemKind::kHost;       // where weights and buffers live
  int gpu = -1;                          // this rank's GPU when memory is kCuda
  int64_t send_buffer_bytes = 64 << 20;  // trainer's registered send buffer
  int64_t recv_buffer_bytes = 16 << 20;  // consumer's registered receive buffer
  int64_t chunk_bytes = 4 << 20;         // largest packed chunk (capped at half of each buffer)
  int64_t bucket_bytes = 64 << 20;       // broadcast bucket
  int inflight = 2;                      // V3: gathered weight groups a trainer may hold
  bool verify = true;
  // Checksums of the bytes moved (engine/checksum.hpp): the trainer hashes each piece where it
  // lies, the receiver where it landed, and the sums are compared; a difference names the tensor
  // and the elements. The caller's weights have no expected values, so this is how their syncs
  // are verified. Pull engines only; not with FP8 on the wire or --dedupe-node.
  bool checksum = false;
  // Where the trainers' weights come from (engine/weights.hpp): synthetic values (verified
  // element by element against their expected values), or the caller's tensors (the library:
  // bound to Engines::slots(); no expected values, so no element verification here).
  WeightsFrom weights = WeightsFrom::kSynthetic;
  // How the synthetic weights change from one version to the next (--update-density).
  UpdateModel updates;
  // One pass: consumers read the trainers' weights themselves where the transport allows
  // (pieces from the trainer's own shards), writing the engine parameters in place.
  bool one_pass = true;
  // One pass over gets (not a mapping): smaller pieces stay packed. A get costs a round trip
  // (microseconds on UCX, more through MPI RMA); a packed piece costs two local copies inside
  // a chunk fetched by one get. 64 KiB keeps a real model's weight matrices direct and its
  // norms and biases packed.
  int64_t min_get_bytes = 64 << 10;
  // vLLM's layerwise reload: pieces land in a per-group buffer, processed and copied into
  // the live weights when the group is complete (on the row's lane); every piece packed.
  // Off (the default, a copy process): pieces are written in place in the live weights.
  bool layerwise = false;
  // FP8 on the wire (an FP8 target only; plan/quant.hpp check_fp8_wire): pull engines send the
  // quantized tensors' pieces as e4m3fn codes and fp32 scales, quantized by the trainer when it
  // packs them; inference ranks place them in the live FP8 weights. Off: bf16 on the wire,
  // inference ranks quantize (the process step). The broadcast baseline always sends bf16.
  bool wire_fp8 = false;
  // Delta sync (device/delta.hpp): pull engines send each packed chunk as what changed since it
  // was last sent (trainers and inference ranks keep the chunks as last sent / received; every
  // piece packed, none read in one pass). Every `anchor_every`-th sync of an engine, and any
  // sync at which a replacement joined, sends every chunk whole (an anchor). The device encodes
  // and applies the records (Device::delta_encode, delta_apply), on host or GPU memory.
  bool delta = false;
  int anchor_every = 8;
  // Node-level dedupe (plan/dedupe.hpp): a piece several inference ranks of one replica on one
  // node need identically is pulled over the network by one of them and copied from its live
  // weights by the others (a one-sided read inside the node: shared memory or CUDA IPC), once
  // the puller's sync is complete. Nodes: host names (SHARDSYNC_FAKE_HOSTS=N pretends N ranks a
  // host). A sharer whose puller dies reports those bytes lost (its replica goes down with the
  // puller's); other replicas never depend on it.
  bool dedupe_node = false;
  // Fault injection for tests: corrupt one received byte / pack one stale tensor at this sync.
  int corrupt_at_sync = -1;
  enum class CorruptIn : uint8_t { kAny, kFp8Code, kFp8Scale } corrupt_in = CorruptIn::kAny;  // where that bit is
  int stale_at_sync = -1;
  // Fault handling (liveness.cpp, lib/comm/heartbeats.hpp): a rank whose heartbeats stop for
  // this long, or whose process is gone, is lost; a busy rank, whose heartbeats go on, never is.
  // With failure tolerance on, a lost inference rank is dead and its whole replica is taken
  // down while the run goes on; a lost trainer rank, a rank lost during a broadcast, or any
  // lost rank with tolerance off ends the run on every survivor with one line (status 5).
  // Test hooks kill, slow or stall one inference rank.
  double failure_timeout_s = 10.0;
  bool tolerate_failures = false;
  int fail_at_sync = -1, fail_rank = -1;   // that world rank SIGKILLs itself mid-sync
  int slow_rank = -1;                      // that world rank sleeps after every chunk
  int slow_ms = 0;
  // Test hook: at sync `stall_at_sync` of each engine, inference world rank `stall_rank` sleeps
  // `stall_s` seconds in its process step or at the start of its verification (a busy rank: its
  // heartbeats go on, so it must not be taken for dead).
  enum class StallIn : uint8_t { kProcess, kVerify };
  int stall_at_sync = -1, stall_rank = -1;
  StallIn stall_in = StallIn::kProcess;
  double stall_s = 0;
  // Rejoin: trainers publish how to reach them in this directory (a replacement reads it).
  std::string rendezvous;
  // A rank inside the run that sees no progress for this long exits (status 4) with one line
  // naming the phase and the peer it waited for, instead of hanging (a peer alive but stuck).
  // 0: never.
  double stall_timeout_s = 120.0;
  // true (the CLI): syncs follow each other, so any wait inside the run is watched. false (the
  // library): the time between syncs (an optimizer step, a rollout) is the caller's, so the
  // watchdog is disarmed between syncs (Engines::disarm) and a consumer's wait for START is
  // not a stall (a lost trainer is still seen by the heartbeats).
  bool syncs_back_to_back = true;

  int64_t effective_chunk_bytes() const;
  // Throws InputError naming the option, the value and the range for a size out of range (a
  // zero chunk, a buffer too small to hold one): refused, never silently clamped.
  void check_sizes() const;
};

// Ranks 0..T-1 train, the rest serve inference; communicators built once at start-up.
struct World {
  MPI_Comm comm = MPI_COMM_NULL;      // MPI_COMM_WORLD
  int rank = 0, size = 0;
  int num_trainers = 0;
  bool trainer = false;
  int inference_rank = -1;  // rank among inference ranks
  int local_rank = -1;      // rank within its replica
  int replica = -1;
  MPI_Comm trainers = MPI_COMM_NULL;  // all trainer ranks
  MPI_Comm tp_group = MPI_COMM_NULL;  // dense TP group (same dp, pp)
  MPI_Comm etp_group = MPI_COMM_NULL; // expert TP group (same ep, edp, pp)
  MPI_Comm bcast = MPI_COMM_NULL;     // rank 0 + every inference rank (broadcast baseline)

  static World create(MPI_Comm comm, const TrainerPlacement& trainer, const InferencePlacement& inference);
  // A replacement process for inference world rank `rank`: no MPI communicators.
  static World replacement(int rank, const TrainerPlacement& trainer, const InferencePlacement& inference);
};

// Idle polling sleeps only where this job's ranks on this node outnumber its cores (collective
// over `comm`).
void allow_idle_sleep_where_oversubscribed(MPI_Comm comm);

// Whether mpirun lets the job go on when a rank dies: Open MPI's recovery settings
// (kRecoverySettings), which it passes to the ranks as OMPI_MCA_* variables.
bool launcher_survives_death();
inline constexpr char kRecoverySettings[] =
    "mpirun --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 --mca orte_allowed_exit_without_sync 1";

class Engines {
 public:
  Engines(World& world, const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inference,
          const std::vector<RankPlan>& plans, const SyncOptions& options);
  ~Engines();
  // Registration and key exchange (collective); returns seconds spent.
  double bootstrap();
  // One sync of `engine` with weights of `version` (every rank calls it).
  RankStats sync(EngineKind engine, int sync_index, uint64_t version);
  // Every rank's stats of the last sync, on rank 0 (empty elsewhere). Trainers use a
  // trainer-only gather; consumers report with a control message; a consumer that does not
  // report within the failure timeout is declared dead and its replica taken down.
  std::vector<RankStats> collect(const RankStats& mine);
  // Consumers: true when this rank's replica was taken down (it serves no more syncs).
  bool stood_down() const;
  // Replicas taken down so far (rank 0's view), for the progress line and results.
  std::vector<int> down_replicas() const;
  // End of the run: rank 0 tells every live rank whether any failed; returns that on every
  // live rank (then only the non-collective cleanup runs).
  bool finish();
  // Rank 0: replacements taken in the last sync, and in the whole run.
  std::vector<RejoinEvent> last_rejoins() const;
  std::vector<RejoinEvent> rejoins() const;

  // A replacement process (no MPI): instead of bootstrap, read the trainers' contacts from
  // the rendezvous directory (waiting up to timeout_s for them), take this world rank's
  // place, and ask rank 0 to take it back. Returns seconds spent.
  double join(double timeout_s);
  // A replacement: waits up to timeout_s for the next sync (true, `*out` its stats, already
  // reported to rank 0) or the end of the run (false).
  bool serve_next(double timeout_s, RankStats* out, EngineKind* engine, uint64_t* version);
  // The raw bandwidth of the pull path: inference rank 0 reads trainer rank 0's whole send
  // buffer through the transport, after a 25 ms warm-up, in three rounds of `iters` gets:
  // the fastest round's rate. Called by every rank (start-up phase); returns GB/s on rank 0
  // (0 elsewhere).
  double measure_link(int iters);
  // Device copy bandwidth on trainer rank 0: `iters` copies of 256 MiB within its device (after a
  // 25 ms warm-up, the fastest of three rounds), counted as bytes read plus bytes written, as
  // cluster files count HBM bandwidth. Called by every rank; GB/s on rank 0 (0 elsewhere).
  double measure_copy(int iters);
  // Releases transport registrations (collective, normal path only).
  void shutdown();
  // Between syncs (SyncOptions::syncs_back_to_back false): the stall watchdog is off until
  // the next sync.
  void disarm();
  // The library (syncs_back_to_back false): a loss or stall the run cannot survive broke it;
  // every call since throws Error with the line that says why. finish() and shutdown() must
  // not be called then (their collectives would wait for the lost rank).
  bool broken() const;
  std::string transport_description() const;
  std::string device_description() const;
  // How gathers and the broadcast run ("mpi", "nccl", "mpi-staged"), for the rank map.
  std::string collectives_description() const;
  // How consumers read trainers' weights in one pass: "mapped ...", "contiguous ...", "off ...".
  std::string one_pass_description() const;
  const RankPlan* my_plan() const;
  // This rank's tensors and their slots in its registered region: a trainer's HF shards (HF
  // names, the local shard's shape), an inference rank's engine parameters (vLLM's names and
  // shapes), in a fixed order.
  std::vector<TensorSlot> slots() const;
  // With SyncOptions::weights == kCaller: the caller's memory for slot `index` (of the same
  // memory kind; null or the slot itself: kept in the slot, zero copy). A trainer's bound
  // tensors are read at every sync; an inference rank's are written after every sync.
  void bind(size_t index, uint8_t* data);

  // The engines' state (internal.hpp), opaque here; public so that the engines' own files
  // (the producer's and consumer's classes) can name it.
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardsync
