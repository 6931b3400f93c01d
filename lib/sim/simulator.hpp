// The cluster-scale schedule simulator: predicts each engine's sync time from the same plans
// and routes the real engine uses (so its byte counts are the engine's byte counts), with
// gathers as collectives over the right groups, transfers sharing per-GPU NIC and NVLink
// bandwidth (the busiest endpoint bounds a phase), per-tensor and per-group costs, V3's
// pipelining and its serialization over trainer PP groups. docs/simulator.md explains the
// model and where it is off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine_table.hpp"
#include "engine/update_model.hpp"
#include "sim/cluster.hpp"

namespace shardsync {

// What the simulated pull engines send (the broadcast baseline always sends every tensor whole).
struct SimBytes {
  // FP8 target only: trainers send e4m3fn codes and fp32 scales (fp8_wire_bytes).
  bool fp8_wire = false;
  // --dedupe-node: the engines' assignment (plan/dedupe.hpp): a piece that several inference
  // ranks of one replica on one node need identically crosses the network once, and is copied
  // from its puller to the others inside the node in a phase after the pulls (whole bytes).
  bool dedupe_node = false;
  // --delta: a sync between anchors, each chunk sent as device/delta.hpp's record of what changed
  // under `updates` (its expected size: the index plus the changed words), and trainers compare
  // every packed byte with their kept copy (two reads at device memory speed).
  bool delta = false;
  UpdateModel updates;
  std::string describe() const;  // "full", "dedupe-node", "delta 2% uniform", "dedupe-node + delta ..."
};

// The expected bytes of a delta record for `bytes` of a pull whose wire order visits contiguous
// source runs of `run` elements of `elem_bytes` each, of a tensor whose rows hold `row`
// elements, under `updates` (device/delta.hpp's format: 4 bytes of prefix count per 2 KiB
// segment, a 128-byte bitmap per segment with a change, the changed 16-bit words). At most
// `bytes`: a record that would not be smaller goes whole. A model, not a count: the engine's
// records depend on where chunk boundaries fall and which units change at a version.
double expected_delta_bytes(double bytes, int64_t elem_bytes, int64_t run, int64_t row, const UpdateModel& updates);

struct SimResult {
  std::string engine;
  double total_s = 0;
  double gather_s = 0, transfer_s = 0, overhead_s = 0, process_s = 0;  // parts (overlapping in V3)
  int64_t bytes_moved = 0;     // bytes received by inference ranks from trainers
  int64_t bytes_full = 0;      // the same as whole chunks (bytes_moved without delta; broadcast: = bytes_moved)
  int64_t bytes_in_node = 0;   // dedupe: bytes copied from a node's puller to its other ranks
  int64_t node_ingress_max = 0;  // the busiest inference node's bytes from other nodes
  double detect_s = 0;         // delta: trainers' change detection (inside gather_s)
  int64_t bytes_nvlink = 0, bytes_ib = 0;  // by link class, gathers and transfers
  double aggregate_gbps = 0;
  int64_t trainer_peak_bytes = 0, inference_peak_bytes = 0;
  double sol_abs_s = 0;        // busiest replica's bytes over its GPUs' line rate
  double sol_pp_serial_s = 0;  // the same with trainer PP groups sending one after another
  int64_t tensors = 0, groups = 0, pulls = 0;
  // Per trainer PP stage, the time to serve its units; total_s takes their maximum when the
  // stages overlap (stages_overlap) and their sum when they go one after another (then the
  // parts after the stages, FP8 quantize and dedupe copies, are added either way).
  std::vector<double> stage_s;
  bool stages_overlap = false;
  double pulls_together_s = 0;  // stages at once: every pull as one phase (the shared receivers' bound)
  bool pulls_overlap_iterator = false;  // the per-tensor engines: pulls hidden under the iterator
  double tensor_us = 0;                 // the cluster file's per-tensor cost used for this engine
  double byte_ps = 0;                   // and its per-byte cost (ClusterSpec::byte_ps)
};

// GPUs: trainer rank r on node r / gpus_per_node; inference ranks on the nodes after the
// trainer's, in rank order (trainer and inference on separate nodes, as the seed's runs).
class Simulator {
 public:
  // An FP8 target (inference.layout().quant): the process step quantizes (bf16 read, codes
  // written); fp8_wire: the trainer sends codes and scales instead (fp8_wire_bytes) and the
  // process step places them.
  Simulator(const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inference,
            const std::vector<RankPlan>& plans, const ClusterSpec& cluster, const SimBytes& bytes = {});
  // Throws Error naming the row when the table gives it no schedule model.
  SimResult run(const EngineSpec& engine, int64_t bucket_bytes = int64_t(1) << 30) const;
  SimResult run(EngineKind engine, int64_t bucket_bytes = int64_t(1) << 30) const {
    return run(engine_spec(engine), bucket_bytes);
  }
  // The schedule of a row under the cluster file's profile: shardsync's engines overlap trainer PP
  // stages exactly when the engine table says so (stages_concurrent); the published stack
  // serializes them (the blog). The per-tensor engines' pulls overlap the iterator in the published
  // stack (an asynchronous RDMA thread) and where a row holds more than one unit (depth != 1).
  bool stages_overlap(const EngineSpec& engine) const;
  bool pulls_overlap_iterator(const EngineSpec& engine) const;
  int trainer_nodes() const;
  int inference_nodes() const;

 private:
  struct Flow {
    int src, dst;  // GPU ids
    int64_t bytes;
    int64_t full = 0;     // the bytes as a whole chunk (= bytes without delta)
    bool shared = false;  // dedupe: a copy inside a node from the rank that pulled it
  };
  int node_of(int gpu) const { return gpu / cluster_.gpus_per_node; }
  int trainer_gpu(int rank) const { return rank; }
  int inference_gpu(int rank) const;
  // Per HF tensor: the pulls of every inference rank under a source policy, with delta's
  // expected record bytes and dedupe's node-internal copies when asked for.
  std::vector<std::vector<Flow>> flows(SourcePolicy policy) const;
  // Delta: the slowest trainer's change detection for `tensors`' flows (its distinct packed bytes).
  double detect_time(const std::vector<std::vector<Flow>>& f, const std::vector<int32_t>& tensors) const;
  double phase_time(const std::vector<Flow>& flows, int64_t* nvlink, int64_t* ib) const;
  // Every pull of a sync as one phase: the bound on stages served at once, whose pulls share
  // the inference ranks' links.
  double all_pulls_bound(const std::vector<std::vector<Flow>>& f) const;
  // total_s from stage_s: the slowest stage, bounded by all_pulls_bound, where the stages
  // overlap; their sum where they go one after another.
  void combine_stages(SimResult& r, const std::vector<std::vector<Flow>>& f) const;
  double allgather_time(const std::vector<int>& gpus, int64_t bytes, int64_t* nvlink, int64_t* ib) const;
  double gather_root_time(int root, const std::vector<std::pair<int, int64_t>>& pieces, int64_t* nvlink, int64_t* ib) const;
  void speed_of_light(SimResult& r, const std::vector<std::vector<Flow>>& f) const;
  // Bytes on the wire of n elements of HF tensor p (FP8 on the wire: codes and scales).
  int64_t wire_bytes(const ParamMeta& p, int64_t n) const;
  // Device bytes read and written by the process step's copy per bf16 byte that lands: 2
  // (read + write), 1 placing FP8 codes sent on the wire.
  double process_factor() const;
  // Inference ranks whose process steps run at once on one device (shared_node_bandwidth: the
  // busiest node's inference ranks; else 1).
  double ranks_sharing_hbm() const;
  // A receiver-side FP8 target: the engines quantize a rank's weights in one pass after the
  // last piece landed (in place, the default): bf16 read, codes written, 1.5 bytes per bf16
  // byte of the busiest rank at HBM speed, not overlapped. 0 otherwise.
  double quantize_pass_s() const;

  const ModelSpec& model_;
  const TrainerPlacement& trainer_;
  const InferencePlacement& inference_;
  const std::vector<RankPlan>& plans_;
  ClusterSpec cluster_;
  SimBytes bytes_;
  // The speed of light's NVLink rate: the hardware's, also where an engine's per-byte cost has
  // slowed cluster_'s (nic_raw_gbps, the other line rate, is never slowed).
  double line_nvlink_gbps_;
};

}  // namespace shardsync
