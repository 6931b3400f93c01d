// Cluster files: the hardware numbers (and per-operation costs) the simulator uses, each
// with its source. configs/clusters/<name>.json.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace shardsync {

struct ClusterSpec {
  std::string name, source, description;
  int gpus_per_node = 8;
  double nic_gbps = 45;        // per GPU, per direction, effective payload
  double nic_raw_gbps = 50;    // per GPU line rate (speed-of-light estimates use it, as the seed does)
  double nvlink_gbps = 450;    // per GPU, per direction
  double hbm_gbps = 3350;      // device memory bandwidth (a copy of B bytes moves 2B)
  double nic_latency_us = 5, nvlink_latency_us = 3;
  double collective_launch_us = 30;   // per collective call (launch + completion)
  double broadcast_tensor_us = 1400;  // broadcast baseline: per HF tensor (export, per-tensor sync, inference loader)
  double iterator_tensor_us = 130;    // V1, V2: per HF tensor (iterator step, request, descriptor)
  double v3_tensor_us = 90;           // V3: per HF tensor replayed and packed inside a group (overlaps transfers)
  double v3_group_us = 1000;          // V3: per weight group (release barrier, buffer hand-off)
  bool pp_serial = true;              // V3 transfers serialized over trainer PP groups (the seed's limit)
  bool v2_overlap = true;             // V2's pulls overlap its iterator (published system); false: one tensor at a time (shardsync's V2)
  bool separate_nodes = true;         // inference ranks start on a fresh node (else right after the trainers' GPUs)
  std::map<std::string, std::string> sources;  // field -> where the number comes from
  // Cost terms fitted to measured or published times: term -> the "setup engine" rows it was
  // fitted on (e.g. "qwen3-235b-published v3"). A prediction of such a row is a fit, not a test.
  std::map<std::string, std::vector<std::string>> fitted_on;
  // The cost terms fitted on `row` ("setup engine"), joined by ", "; empty: the row is predicted.
  std::string fitted_terms(const std::string& row) const;
};

ClusterSpec load_cluster(const std::string& name_or_path);
ClusterSpec parse_cluster_json(const std::string& text, const std::string& source, const std::string& name);

}  // namespace shardsync
