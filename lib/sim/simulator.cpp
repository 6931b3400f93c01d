#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "common/error.hpp"
#include "device/delta.hpp"
#include "plan/dedupe.hpp"
#include "plan/quant.hpp"

namespace shardsync {

namespace {

bool is_expert(TensorKind k) {
  return k == TensorKind::kExpertGate || k == TensorKind::kExpertUp || k == TensorKind::kExpertDown ||
         k == TensorKind::kFusedExpertsGateUp || k == TensorKind::kFusedExpertsDown;
}

// The elements a pull's wire order visits in a row before it jumps: the innermost loop's length
// when it reads consecutive source elements, else 1 (a transposing copy).
int64_t contiguous_run(const CopyDesc& c) {
  if (c.dims.empty()) return std::max<int64_t>(1, c.numel);
  return c.dims.back().src_stride == 1 ? c.dims.back().size : 1;
}

}  // namespace

std::string SimBytes::describe() const {
  std::string d;
  if (dedupe_node) d = "dedupe-node";
  if (delta) {
    char b[96];
    std::snprintf(b, sizeof b, "delta %.4g%% %s", 100.0 * std::min(1.0, updates.density),
                  updates.clustered ? "rows" : "uniform");
    d += (d.empty() ? "" : " + ") + std::string(b);
  }
  return d.empty() ? "full" : d;
}

double expected_delta_bytes(double bytes, int64_t elem_bytes, int64_t run, int64_t row, const UpdateModel& updates) {
  if (bytes <= 0) return 0;
  const double density = std::clamp(updates.density, 0.0, 1.0);
  const double segment = double(kDeltaSegmentWords) * 2.0;  // bytes
  // Change units a segment touches: a unit is an element (uniform) or a row (clustered), and the
  // wire order runs over `run` elements of one row at a time.
  const double per_segment = segment / double(std::max<int64_t>(1, elem_bytes));
  const double unit = updates.clustered ? double(std::max<int64_t>(1, std::min(run, row))) : 1.0;
  const double units = 1.0 + (per_segment - 1.0) / unit;
  const double p_segment = 1.0 - std::pow(1.0 - density, units);
  const double fraction = 4.0 / segment + p_segment * double(kDeltaSegmentWords / 8) / segment + density;
  return std::min(bytes, bytes * fraction);
}

Simulator::Simulator(const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inference,
                     const std::vector<RankPlan>& plans, const ClusterSpec& cluster, const SimBytes& bytes)
    : model_(model), trainer_(trainer), inference_(inference), plans_(plans), cluster_(cluster), bytes_(bytes),
      line_nvlink_gbps_(cluster.nvlink_gbps) {
  if (bytes.fp8_wire && inference.layout().quant != Quant::kFp8Block128)
    throw InputError("--wire", "fp8", "FP8 on the wire needs an FP8 target (--quant fp8-block128)");
  if (bytes.fp8_wire && bytes.delta)
    throw InputError("--delta", "--wire fp8",
                     "the delta model is for bf16 on the wire (a changed weight can change its whole FP8 block: "
                     "the codes' changes are not modelled)");
  if (bytes.delta && !(bytes.updates.density >= 0.0))
    throw InputError("--update-density", std::to_string(bytes.updates.density), "expected a fraction in [0, 1]");
}

int64_t Simulator::wire_bytes(const ParamMeta& p, int64_t n) const {
  return bytes_.fp8_wire && fp8_quantized_hf(p) ? fp8_wire_bytes(n) : n * dtype_bytes(p.dtype);
}

double Simulator::process_factor() const { return bytes_.fp8_wire ? 1.0 : 2.0; }

double Simulator::ranks_sharing_hbm() const {
  if (!cluster_.shared_node_bandwidth) return 1;
  std::map<int, int> per_node;
  for (int i = 0; i < inference_.world_size(); ++i) per_node[node_of(inference_gpu(i))]++;
  int most = 1;
  for (auto& [n, c] : per_node) most = std::max(most, c);
  return double(most);
}

double Simulator::quantize_pass_s() const {
  if (inference_.layout().quant == Quant::kNone || bytes_.fp8_wire) return 0;
  int64_t share = 0;
  for (int i = 0; i < inference_.layout().ranks_per_replica(); ++i) share = std::max(share, inference_.needed_bytes(i));
  return 1.5 * double(share) * ranks_sharing_hbm() / (cluster_.hbm_gbps * 1e9);
}

int Simulator::trainer_nodes() const {
  return (trainer_.world_size() + cluster_.gpus_per_node - 1) / cluster_.gpus_per_node;
}

int Simulator::inference_nodes() const {
  int first = node_of(inference_gpu(0)), last = node_of(inference_gpu(inference_.world_size() - 1));
  return last - first + 1;
}

int Simulator::inference_gpu(int rank) const {
  return (cluster_.separate_nodes ? trainer_nodes() * cluster_.gpus_per_node : trainer_.world_size()) + rank;
}

std::vector<std::vector<Simulator::Flow>> Simulator::flows(SourcePolicy policy) const {
  std::vector<std::vector<Flow>> out(model_.params().size());
  Routes routes = route_plans(model_, trainer_, plans_, inference_.layout().replicas, policy);
  const int per = inference_.layout().ranks_per_replica(), replicas = inference_.layout().replicas;
  // Dedupe: the engines' assignment (plan/dedupe.hpp), on this cluster's nodes; every replica
  // laid out alike, as the engines require.
  NodeDedupe dedupe;
  if (bytes_.dedupe_node) {
    std::vector<int> host_of_local;
    for (int l = 0; l < per; ++l) host_of_local.push_back(node_of(inference_gpu(l)));
    for (int rep = 1; rep < replicas; ++rep)
      for (int a = 0; a < per; ++a)
        for (int b = 0; b < a; ++b)
          if ((node_of(inference_gpu(rep * per + a)) == node_of(inference_gpu(rep * per + b))) !=
              (host_of_local[size_t(a)] == host_of_local[size_t(b)]))
            throw InputError("--dedupe-node", "on", "every replica's ranks laid out alike on the cluster's nodes (" +
                                                        std::to_string(cluster_.gpus_per_node) + " GPUs a node); replica " +
                                                        std::to_string(rep) + " is not");
    const bool fp8 = inference_.layout().quant != Quant::kNone;
    dedupe = dedupe_node(model_, plans_, replicas, routes, host_of_local,
                         [&](int32_t hf) { return !(fp8 && fp8_quantized_hf(model_.param(hf))); });
  }
  for (const RankPlan& p : plans_) {
    for (const Pull& pull : routes.pulls[size_t(p.local_rank)]) {
      const PlanEntry& e = p.entries[size_t(pull.entry)];
      const ParamMeta& meta = model_.param(e.hf_param);
      const int64_t full = wire_bytes(meta, pull.copy.numel);
      int64_t bytes = full;
      if (bytes_.delta)
        bytes = std::llround(expected_delta_bytes(double(full), dtype_bytes(meta.dtype), contiguous_run(pull.copy),
                                                  meta.shape.empty() ? 1 : meta.shape.back(), bytes_.updates));
      for (int rep = 0; rep < replicas; ++rep)
        out[size_t(e.hf_param)].push_back(Flow{trainer_gpu(pull.trainer_rank), inference_gpu(rep * per + p.local_rank), bytes, full});
    }
    // A shared piece: a copy of the final bytes (whole, delta or not) from the puller inside the node.
    if (bytes_.dedupe_node)
      for (const Share& sh : dedupe.shares[size_t(p.local_rank)])
        for (int rep = 0; rep < replicas; ++rep)
          out[size_t(p.entries[size_t(sh.entry)].hf_param)].push_back(
              Flow{inference_gpu(rep * per + sh.from), inference_gpu(rep * per + p.local_rank), sh.bytes, sh.bytes, true});
  }
  return out;
}

double Simulator::all_pulls_bound(const std::vector<std::vector<Flow>>& f) const {
  std::vector<Flow> all;
  for (const auto& x : f) all.insert(all.end(), x.begin(), x.end());
  int64_t nvlink = 0, ib = 0;  // counted by the phases themselves
  return phase_time(all, &nvlink, &ib);
}

void Simulator::combine_stages(SimResult& r, const std::vector<std::vector<Flow>>& f) const {
  r.total_s = 0;
  for (double t : r.stage_s) r.total_s = r.stages_overlap ? std::max(r.total_s, t) : r.total_s + t;
  // Stages at once share the receivers' links: never faster than every pull in one phase.
  if (r.stages_overlap) {
    r.pulls_together_s = all_pulls_bound(f);
    r.total_s = std::max(r.total_s, r.pulls_together_s);
  }
}

bool Simulator::stages_overlap(const EngineSpec& engine) const {
  return cluster_.profile == CostProfile::kShardsync && stages_concurrent(engine);
}

bool Simulator::pulls_overlap_iterator(const EngineSpec& engine) const {
  if (engine.unit != UnitKind::kTensor) return false;
  return cluster_.profile == CostProfile::kVllmPublished ? engine.cache_requests : engine.depth != 1;
}

double Simulator::detect_time(const std::vector<std::vector<Flow>>& f, const std::vector<int32_t>& tensors) const {
  if (!bytes_.delta) return 0;
  // A trainer packs each of its chunks once for every replica: its distinct bytes are those of
  // one replica's flows.
  const int per = inference_.layout().ranks_per_replica();
  std::map<int, double> packed;
  for (int32_t t : tensors)
    for (const Flow& x : f[size_t(t)])
      if (!x.shared && x.dst < inference_gpu(per)) packed[x.src] += double(x.full);
  double busiest = 0;
  for (auto& [gpu, b] : packed) busiest = std::max(busiest, b);
  return 2.0 * busiest / (cluster_.hbm_gbps * 1e9);
}

// The busiest endpoint bounds a phase: every flow loads its source's and destination's NIC
// (between nodes) or NVLink port (within a node).
double Simulator::phase_time(const std::vector<Flow>& flows, int64_t* nvlink, int64_t* ib) const {
  std::map<int, double> out_nic, in_nic, out_nvl, in_nvl;
  bool any_ib = false, any_nvl = false;
  for (const Flow& f : flows) {
    if (f.bytes == 0 || f.src == f.dst) continue;
    if (node_of(f.src) == node_of(f.dst)) {
      out_nvl[f.src] += double(f.bytes);
      in_nvl[f.dst] += double(f.bytes);
      *nvlink += f.bytes;
      any_nvl = true;
    } else {
      out_nic[f.src] += double(f.bytes);
      in_nic[f.dst] += double(f.bytes);
      *ib += f.bytes;
      any_ib = true;
    }
  }
  double t = 0;
  for (auto* m : {&out_nic, &in_nic})
    for (auto& [g, b] : *m) t = std::max(t, b / (cluster_.nic_gbps * 1e9));
  if (cluster_.shared_node_bandwidth) {
    // One device a node: every copy inside it shares its bandwidth.
    std::map<int, double> node_bytes;
    for (auto& [g, b] : out_nvl) node_bytes[node_of(g)] += b;
    for (auto& [n, b] : node_bytes) t = std::max(t, b / (cluster_.nvlink_gbps * 1e9));
  } else {
    for (auto* m : {&out_nvl, &in_nvl})
      for (auto& [g, b] : *m) t = std::max(t, b / (cluster_.nvlink_gbps * 1e9));
  }
  if (any_ib) t += cluster_.nic_latency_us * 1e-6;
  else if (any_nvl) t += cluster_.nvlink_latency_us * 1e-6;
  return t;
}

// All-gather of `bytes` in total over `gpus` (NCCL-style, channels over every NIC): every
// GPU receives (n-1)/n of the tensor, within a node over NVLink; every node receives the
// other nodes' (k-1)/k through its group members' NICs. The slower of the two sets the pace.
double Simulator::allgather_time(const std::vector<int>& gpus, int64_t bytes, int64_t* nvlink, int64_t* ib) const {
  size_t n = gpus.size();
  if (n <= 1 || bytes == 0) return 0;
  std::map<int, int> per_node;
  for (int g : gpus) per_node[node_of(g)]++;
  const double k = double(per_node.size());
  const double b = double(bytes);
  // Each member receives (n-1)/n of the tensor; on a shared device all n receive through it.
  double intra = b * double(n - 1) / double(cluster_.shared_node_bandwidth ? 1 : n) / (cluster_.nvlink_gbps * 1e9);
  double t = intra, latency = cluster_.nvlink_latency_us;
  if (per_node.size() > 1) {
    int g = per_node.begin()->second;
    for (auto& [node, c] : per_node) g = std::min(g, c);
    double inter = b * (k - 1) / k / (double(g) * cluster_.nic_gbps * 1e9);
    t = std::max(intra, inter);
    latency = cluster_.nic_latency_us;
    *ib += int64_t(b * (k - 1));
    *nvlink += int64_t(b * double(n - 1) - b * (k - 1));
  } else {
    *nvlink += int64_t(b * double(n - 1));
  }
  return t + double(n - 1) * latency * 1e-6 + cluster_.collective_launch_us * 1e-6;
}

double Simulator::gather_root_time(int root, const std::vector<std::pair<int, int64_t>>& pieces, int64_t* nvlink,
                                   int64_t* ib) const {
  std::vector<Flow> f;
  for (auto [gpu, bytes] : pieces)
    if (gpu != root) f.push_back(Flow{gpu, root, bytes});
  if (f.empty()) return 0;
  return phase_time(f, nvlink, ib) + cluster_.collective_launch_us * 1e-6;
}

void Simulator::speed_of_light(SimResult& r, const std::vector<std::vector<Flow>>& f) const {
  // Absolute: the busiest replica's incoming bytes over its GPUs' links at line rate (NIC
  // for bytes from other nodes, NVLink within a node). With PP serialized: each trainer PP
  // stage in turn sends its bytes through its own GPUs' links.
  const int per = inference_.layout().ranks_per_replica();
  std::map<int, std::pair<double, double>> replica_in;  // replica -> (ib, nvlink) bytes
  std::map<int, std::pair<double, double>> stage_out;
  for (size_t t = 0; t < f.size(); ++t) {
    int stage = trainer_.stage_of_param(model_.param(int32_t(t)));
    for (const Flow& x : f[t]) {
      int replica = (x.dst - inference_gpu(0)) / per;
      bool ib = node_of(x.src) != node_of(x.dst);
      (ib ? replica_in[replica].first : replica_in[replica].second) += double(x.bytes);
      (ib ? stage_out[stage].first : stage_out[stage].second) += double(x.bytes);
    }
  }
  const double nic = cluster_.nic_raw_gbps * 1e9, nvl = line_nvlink_gbps_ * 1e9;
  auto time = [&](const std::pair<double, double>& b, int gpus) { return std::max(b.first / (gpus * nic), b.second / (gpus * nvl)); };
  for (auto& [rep, b] : replica_in) r.sol_abs_s = std::max(r.sol_abs_s, time(b, per));
  int stage_gpus = trainer_.tp() * trainer_.dp();
  for (auto& [s, b] : stage_out) r.sol_pp_serial_s += time(b, stage_gpus);
  r.sol_pp_serial_s = std::max(r.sol_pp_serial_s, r.sol_abs_s);
}

SimResult Simulator::run(const EngineSpec& engine, int64_t bucket_bytes) const {
  if (engine.sim == SimModel::kNone)
    throw Error(std::string("simulate: engine ") + engine.name + " has no schedule model in the simulator");
  if (const double ps = cluster_.byte_cost_ps(engine.name); ps > 0) {
    // A per-byte cost: the same schedule on the bandwidths the engine sees; the speed of light
    // at the hardware's own line rate.
    Simulator seen(model_, trainer_, inference_, plans_, cluster_.as_seen_by(engine.name), bytes_);
    seen.line_nvlink_gbps_ = line_nvlink_gbps_;
    SimResult r = seen.run(engine, bucket_bytes);
    r.byte_ps = ps;
    return r;
  }
  SimResult r;
  r.engine = engine.name;
  const ClusterSpec& c = cluster_;
  r.tensor_us = c.tensor_cost_us(engine.name);
  r.stages_overlap = stages_overlap(engine);
  r.pulls_overlap_iterator = pulls_overlap_iterator(engine);
  const double per_tensor = r.tensor_us * 1e-6;
  const SourcePolicy policy = engine.source;
  std::vector<std::vector<Flow>> f = flows(policy == SourcePolicy::kRootOnly ? SourcePolicy::kStageLocal : policy);
  // Dedupe's copies inside a node come after the pulls, as in the engines (a sharer copies
  // once its puller's sync is complete): a phase of their own at the end.
  std::vector<Flow> in_node;
  for (auto& x : f) {
    for (const Flow& y : x)
      if (y.shared) in_node.push_back(y);
    std::erase_if(x, [](const Flow& y) { return y.shared; });
  }
  const int64_t num_tensors = int64_t(model_.params().size());
  r.tensors = num_tensors;
  for (const auto& x : f) r.pulls += int64_t(x.size());
  std::vector<int> all_trainers;
  for (int i = 0; i < trainer_.world_size(); ++i) all_trainers.push_back(trainer_gpu(i));
  int64_t shard_peak = 0;
  {
    auto h = trainer_.holdings();
    shard_peak = *std::max_element(h.bytes.begin(), h.bytes.end());
  }
  int64_t live_peak = 0;
  for (const RankPlan& p : plans_) {
    int64_t b = 0;
    for (const auto& ep : p.params) b += ep.bytes();
    live_peak = std::max(live_peak, b);
  }
  int64_t largest_tensor = 0;
  for (const auto& p : model_.params()) largest_tensor = std::max(largest_tensor, p.bytes());

  // The TP (or ETP) gather of a tensor under V2/V3: within one group of the owning stage;
  // none for direct pulls.
  auto tp_gather = [&](int32_t t) {
    if (policy == SourcePolicy::kDirect) return 0.0;
    const ParamMeta& p = model_.param(t);
    auto pieces = trainer_.pieces(t);
    if (pieces.size() <= 1) return 0.0;  // replicated, or a whole expert on its EP rank
    if (is_expert(p.kind) && trainer_.etp() == 1 && p.kind != TensorKind::kFusedExpertsGateUp &&
        p.kind != TensorKind::kFusedExpertsDown)
      return 0.0;
    std::vector<int> gpus;
    int64_t bytes = 0;
    std::set<int> seen;
    for (const auto& piece : pieces) {
      gpus.push_back(trainer_gpu(piece.ranks.front()));
      bytes += piece.box.numel() * dtype_bytes(p.dtype);
    }
    if (is_expert(p.kind)) bytes /= std::max(1, trainer_.ep());  // each EP owner gathers its own experts
    return allgather_time(gpus, bytes, &r.bytes_nvlink, &r.bytes_ib);
  };

  if (engine.sim == SimModel::kBucketBroadcast) {
    // Per tensor: gather to rank 0 and the per-tensor export/loader cost; per bucket: a
    // broadcast paced by the root's link (NCCL's pipelined broadcast is root-link bound).
    int64_t bucket = 0;
    int receivers_off_node = 0;
    for (int i = 0; i < inference_.world_size(); ++i) receivers_off_node += node_of(inference_gpu(i)) != node_of(0);
    double bw = (receivers_off_node > 0 ? c.nic_gbps : c.nvlink_gbps) * 1e9;
    auto flush = [&] {
      if (bucket == 0) return;
      r.transfer_s += double(bucket) / bw + c.collective_launch_us * 1e-6;
      bucket = 0;
    };
    for (int32_t t = 0; t < int32_t(num_tensors); ++t) {
      const ParamMeta& p = model_.param(t);
      std::vector<std::pair<int, int64_t>> pieces;
      for (const auto& piece : trainer_.pieces(t))
        pieces.emplace_back(trainer_gpu(piece.ranks.front()), piece.box.numel() * dtype_bytes(p.dtype));
      r.gather_s += gather_root_time(0, pieces, &r.bytes_nvlink, &r.bytes_ib);
      r.overhead_s += per_tensor;
      const int64_t sent = wire_bytes(p, p.numel());
      if (bucket > 0 && bucket + sent > bucket_bytes) flush();
      bucket += sent;
    }
    flush();
    int64_t per_rank = 0;
    for (const ParamMeta& p : model_.params()) per_rank += wire_bytes(p, p.numel());
    r.bytes_moved = per_rank * inference_.world_size();
    r.bytes_full = r.bytes_moved;
    (receivers_off_node > 0 ? r.bytes_ib : r.bytes_nvlink) += r.bytes_moved;
    // The root packs each bucket, and every inference rank replays its plan on the full
    // tensors: device copies (read + write) of the model and of the rank's share.
    int64_t share = 0;
    for (int i = 0; i < inference_.layout().ranks_per_replica(); ++i) share = std::max(share, inference_.needed_bytes(i));
    r.process_s = (2.0 * double(model_.total_bytes()) + process_factor() * double(share) * ranks_sharing_hbm()) / (c.hbm_gbps * 1e9);
    r.total_s = r.gather_s + r.overhead_s + r.transfer_s + r.process_s;
    r.stage_s = {r.total_s};  // one stream: rank 0 gathers every tensor in turn
    r.trainer_peak_bytes = shard_peak + std::min(bucket_bytes, model_.total_bytes()) + largest_tensor;
    r.inference_peak_bytes = live_peak + std::min(bucket_bytes, model_.total_bytes());
  } else if (engine.sim == SimModel::kTensorIterator) {
    // The per-parameter iterator: one tensor after another within a stage. A full all-gather
    // (V1) gathers every tensor over every trainer rank (so the stages go one after another); a
    // stage-local one (V2) within the TP group of the owning stage only (experts not at all),
    // each stage's ranks serving their own tensors. Pulls overlap the iterator where the
    // schedule says so (the published stack); otherwise each tensor is gathered, pulled and
    // released before the next.
    // A tensor's gather: over every trainer rank (V1) or within the owning stage's TP group (V2).
    auto iterator_gather = [&](int32_t t) {
      return policy == SourcePolicy::kEverywhere
                 ? allgather_time(all_trainers, model_.param(t).bytes(), &r.bytes_nvlink, &r.bytes_ib)
                 : tp_gather(t);
    };
    if (r.pulls_overlap_iterator) {
      std::vector<int32_t> every;
      std::vector<Flow> all;
      for (int32_t t = 0; t < int32_t(num_tensors); ++t) {
        every.push_back(t);
        r.overhead_s += per_tensor;
        r.gather_s += iterator_gather(t);
        all.insert(all.end(), f[size_t(t)].begin(), f[size_t(t)].end());
      }
      r.detect_s = detect_time(f, every);
      r.overhead_s += r.detect_s;
      r.transfer_s = phase_time(all, &r.bytes_nvlink, &r.bytes_ib);
      r.total_s = std::max(r.overhead_s + r.gather_s, r.transfer_s);
      r.stage_s = {r.total_s};
    } else {
      std::map<int, std::vector<int32_t>> stage_tensors;
      for (int32_t t = 0; t < int32_t(num_tensors); ++t) stage_tensors[trainer_.stage_of_param(model_.param(t))].push_back(t);
      for (auto& [stage, tensors] : stage_tensors) {
        const double detect = detect_time(f, tensors);
        r.detect_s += detect;
        double t_stage = detect;
        for (int32_t t : tensors) {
          const double gather = iterator_gather(t);
          const double pull = phase_time(f[size_t(t)], &r.bytes_nvlink, &r.bytes_ib);
          r.gather_s += gather;
          r.transfer_s += pull;
          t_stage += per_tensor + gather + pull;
        }
        r.overhead_s += detect + per_tensor * double(tensors.size());
        r.stage_s.push_back(t_stage);
      }
      combine_stages(r, f);
    }
    r.trainer_peak_bytes = shard_peak + largest_tensor;
    r.inference_peak_bytes = live_peak + largest_tensor;
  } else if (engine.sim == SimModel::kGroupPipeline) {
    // V3, V4: weight groups; per trainer PP stage (overlapping as stages_overlap says), group
    // N+1 is gathered (V3; V4 gathers nothing) while group N is pulled, and the per-tensor
    // replay of a group overlaps its transfer; each group then pays the release barrier.
    const auto& groups = model_.groups();
    r.groups = int64_t(groups.size());
    std::map<int, std::vector<int32_t>> by_stage;
    for (int32_t g = 0; g < int32_t(groups.size()); ++g) {
      if (groups[size_t(g)].num_params == 0) continue;
      by_stage[trainer_.stage_of_param(model_.param(groups[size_t(g)].first_param))].push_back(g);
    }
    int64_t largest_group = 0;
    for (auto& [stage, gs] : by_stage) {
      // Per group: its gather, pull and replay; group N's pull overlaps group N+1's gather.
      std::vector<std::array<double, 3>> steps;  // gather, pull, replay
      for (int32_t g : gs) {
        const WeightGroup& wg = groups[size_t(g)];
        largest_group = std::max(largest_group, wg.bytes);
        double gather = 0;
        std::vector<Flow> flows_g;
        for (int32_t t = wg.first_param; t < wg.first_param + wg.num_params; ++t) {
          gather += tp_gather(t);
          flows_g.insert(flows_g.end(), f[size_t(t)].begin(), f[size_t(t)].end());
        }
        // Delta: the group's chunks are compared with the kept ones as they are packed.
        std::vector<int32_t> members(size_t(wg.num_params));
        for (int32_t i = 0; i < wg.num_params; ++i) members[size_t(i)] = wg.first_param + i;
        const double detect = detect_time(f, members);
        r.detect_s += detect;
        gather += detect;
        double pull = phase_time(flows_g, &r.bytes_nvlink, &r.bytes_ib);
        double replay = double(wg.num_params) * per_tensor;
        r.gather_s += gather;
        r.transfer_s += pull;
        r.overhead_s += replay + c.group_us * 1e-6;
        steps.push_back({gather, pull, replay});
      }
      // Nothing overlaps the first gather; each group then costs max(pull, replay, the next
      // group's gather) plus the per-group cost.
      double stage_t = steps.empty() ? 0.0 : steps.front()[0];
      for (size_t i = 0; i < steps.size(); ++i) {
        const double next_gather = i + 1 < steps.size() ? steps[i + 1][0] : 0.0;
        stage_t += std::max({steps[i][1], steps[i][2], next_gather}) + c.group_us * 1e-6;
      }
      // The last group's process + copy into live weights (HBM speed) is not overlapped.
      int64_t last = groups[size_t(gs.back())].bytes / std::max(1, inference_.layout().ranks_per_replica());
      double process = process_factor() * double(last) * ranks_sharing_hbm() / (c.hbm_gbps * 1e9);
      r.process_s += process;
      stage_t += process;
      r.stage_s.push_back(stage_t);
    }
    combine_stages(r, f);
    r.trainer_peak_bytes =
        shard_peak + (policy == SourcePolicy::kDirect ? 0 : 2 * largest_group / std::max(1, trainer_.tp() * trainer_.dp()));
    r.inference_peak_bytes = live_peak + 2 * largest_group / std::max(1, inference_.layout().ranks_per_replica());
  } else {
    throw Error(std::string("simulate: engine ") + engine.name + ": unknown schedule model");
  }
  const double quantize = quantize_pass_s();
  r.process_s += quantize;
  r.total_s += quantize;
  if (!in_node.empty()) {
    int64_t nvlink = 0, ib = 0;
    const double share = phase_time(in_node, &nvlink, &ib);
    r.transfer_s += share;
    r.total_s += share;
    r.bytes_nvlink += nvlink;
    for (const Flow& y : in_node) r.bytes_in_node += y.bytes;
  }
  if (engine.delivery == Delivery::kPull) {
    std::map<int, int64_t> node_in;
    for (const auto& x : f)
      for (const Flow& y : x) {
        r.bytes_moved += y.bytes;
        r.bytes_full += y.full;
        if (node_of(y.src) != node_of(y.dst)) node_in[node_of(y.dst)] += y.bytes;
      }
    for (auto& [node, b] : node_in) r.node_ingress_max = std::max(r.node_ingress_max, b);
  } else {
    // Every inference rank takes the whole model from rank 0.
    std::map<int, int64_t> node_in;
    int64_t per_rank = r.bytes_moved / std::max(1, inference_.world_size());
    for (int i = 0; i < inference_.world_size(); ++i)
      if (node_of(inference_gpu(i)) != node_of(0)) node_in[node_of(inference_gpu(i))] += per_rank;
    for (auto& [node, b] : node_in) r.node_ingress_max = std::max(r.node_ingress_max, b);
  }
  r.aggregate_gbps = r.total_s > 0 ? double(r.bytes_moved) / r.total_s / 1e9 : 0;
  speed_of_light(r, f);
  return r;
}

}  // namespace shardsync
