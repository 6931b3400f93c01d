// Cluster files: the hardware numbers (and per-operation costs) the simulator uses, each
// with its source. configs/clusters/<name>.json.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace shardsync {

// Whose implementation a cluster file's costs describe (docs/simulator.md, "Two profiles").
enum class CostProfile {
  // shardsync's engines: their costs measured by shardsync (simulate --calibrate) and their
  // schedules as the engine table gives them (stages_concurrent, depth).
  kShardsync,
  // The published Python stack of the vLLM RDT blog: costs fitted on its Qwen3-235B table, and
  // its schedules as the blog describes them (transfers serialized over trainer PP groups; the
  // per-parameter iterator hands each pull to an asynchronous RDMA thread).
  kVllmPublished,
};
const char* profile_name(CostProfile p);

struct ClusterSpec {
  std::string name, source, description;
  CostProfile profile = CostProfile::kShardsync;
  int gpus_per_node = 8;
  double nic_gbps = 45;        // per GPU, per direction, effective payload
  double nic_raw_gbps = 50;    // per GPU line rate (speed-of-light estimates use it, as the seed does)
  double nvlink_gbps = 450;    // per GPU, per direction
  double hbm_gbps = 3350;      // device memory bandwidth (a copy of B bytes moves 2B)
  double nic_latency_us = 5, nvlink_latency_us = 3;
  double collective_launch_us = 30;  // per collective call (launch + completion)
  double group_us = 0;               // per weight group of the grouped engines (release barrier, hand-off)
  // Per HF tensor, by engine row name: the work the bandwidths do not explain (broadcast: export,
  // per-tensor sync and loader; V1/V2: the iterator step with its request; V3/V4: replay and pack
  // inside a group, overlapping its pulls). An engine without a cost here is refused by name.
  std::map<std::string, double> tensor_us;
  // Per byte, by engine row name (picoseconds; 0 when absent): what every byte the engine moves
  // or copies costs beyond the measured bandwidths (copies under load: all ranks of a host
  // copying at once, against microbenchmarks of one idle pair). The engine's pulls, gathers and
  // copies run at 1 / (1 / bandwidth + byte_ps); the speed of light keeps the bandwidths.
  // Fitted by simulate --calibrate / --fit over two or more runs of other shapes.
  std::map<std::string, double> byte_ps;
  bool separate_nodes = true;  // inference ranks start on a fresh node (else right after the trainers' GPUs)
  // Ranks of a node share one device and its copy bandwidth (several ranks on one GPU, or
  // processes on a CPU host): copies within a node (pulls, gathers, the process step) share
  // nvlink_gbps and hbm_gbps among them instead of each rank having its own.
  bool shared_node_bandwidth = false;
  std::map<std::string, std::string> sources;  // field -> where the number comes from
  // Cost terms fitted to measured or published times: term ("tensor_us.v3") -> the "setup
  // engine" rows it was fitted on (e.g. "qwen3-235b-published v3"). A prediction of such a row
  // is a fit, not a test.
  std::map<std::string, std::vector<std::string>> fitted_on;
  // simulate --calibrate: what produced the file (command, machine, commit, date, the run).
  std::map<std::string, std::string> provenance;

  // The cost terms fitted on `row` ("setup engine"), joined by ", "; empty: the row is predicted.
  std::string fitted_terms(const std::string& row) const;
  // Throws InputError naming the file and costs.tensor_us.<engine> when the profile lacks it.
  double tensor_cost_us(const std::string& engine) const;
  bool has_tensor_cost(const std::string& engine) const { return tensor_us.count(engine) > 0; }
  double byte_cost_ps(const std::string& engine) const {
    auto it = byte_ps.find(engine);
    return it == byte_ps.end() ? 0.0 : it->second;
  }
  // This hardware as `engine` sees it: the copy and link bandwidths slowed by its per-byte cost,
  // which the result no longer holds (nic_raw_gbps, the speed of light's line rate, unchanged).
  ClusterSpec as_seen_by(const std::string& engine) const;
};

ClusterSpec load_cluster(const std::string& name_or_path);
ClusterSpec parse_cluster_json(const std::string& text, const std::string& source, const std::string& name);
// The costs of `costs` (profile, per-operation costs, their sources, fitted_on, provenance) on
// the hardware of `hardware`: e.g. the H200 host's measured per-tensor costs on a DGX H100
// cluster's links (simulate --costs).
ClusterSpec with_costs_of(const ClusterSpec& hardware, const ClusterSpec& costs);
// The file parse_cluster_json reads back (simulate --calibrate writes it).
std::string cluster_json(const ClusterSpec& c);

}  // namespace shardsync
