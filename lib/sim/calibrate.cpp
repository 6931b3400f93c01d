#include "sim/calibrate.hpp"

#include "common/error.hpp"
#include "common/table.hpp"  // fmt_fixed

namespace shardsync {

ClusterSpec calibrate_cluster(const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inference,
                              const std::vector<RankPlan>& plans, const CalibrationRun& run) {
  if (!(run.link_gbps > 0)) throw InputError("--calibrate", "link_gbps", "the run's measured pull-path bandwidth (--measure-link)");
  if (!(run.copy_gbps > 0)) throw InputError("--calibrate", "copy_gbps", "the run's measured device copy bandwidth (--measure-copy)");
  ClusterSpec c;
  c.name = "calibrated";
  c.source = "simulate --calibrate";
  c.profile = CostProfile::kShardsync;
  c.description = "Calibrated by shardsync simulate --calibrate on " + run.provenance.at("host") + " from one run (" +
                  run.setup + ", " + std::to_string(run.ranks) + " ranks on one host" +
                  (run.shared_device ? ", sharing one device" : "") +
                  "): bandwidths from its microbenchmarks, one per-tensor cost per engine fitted to its time. "
                  "A prediction of another model or layout on this host is out of sample; of this run, a fit.";
  // One host: every rank of any run predicted with this file is on it (however many ranks the
  // calibration itself had), so the model never sends a copy of this host through a "NIC".
  c.gpus_per_node = 1024;
  c.separate_nodes = false;
  c.shared_node_bandwidth = run.shared_device;
  c.nvlink_gbps = run.link_gbps;
  c.nic_gbps = c.nic_raw_gbps = run.link_gbps;
  c.hbm_gbps = run.copy_gbps;
  c.nic_latency_us = c.nvlink_latency_us = 0;
  c.collective_launch_us = 0;
  c.group_us = 0;
  c.sources["nvlink_gbps"] = "measured: the pull path, inference rank 0 reading trainer rank 0 (--measure-link), " +
                             fmt_fixed(run.link_gbps, 2) + " GB/s" +
                             (run.shared_device ? "; every copy inside the host shares it (shared_node_bandwidth)" : "");
  c.sources["nic_gbps"] = "unused: one host (set to the measured link)";
  c.sources["gpus_per_node"] = "one host: 1024 (the most a cluster file allows), so every rank of a run here is on it";
  c.sources["hbm_gbps"] = "measured: a 256 MiB device copy on trainer rank 0, read + written (--measure-copy), " +
                          fmt_fixed(run.copy_gbps, 2) + " GB/s";
  c.sources["latencies, collective_launch_us, group_us"] = "0: a calibration fits one term per engine, the per-tensor cost, "
                                                           "which takes in every fixed cost";
  c.provenance = run.provenance;
  for (const auto& [engine, measured] : run.measured_s) {
    const EngineSpec* spec = find_engine(engine);
    if (!spec) throw InputError("--calibrate", "engines[].engine", "unknown engine \"" + engine + "\"");
    auto predict = [&](double us) {
      ClusterSpec x = c;
      x.tensor_us[engine] = us;
      return Simulator(model, trainer, inference, plans, x).run(*spec).total_s;
    };
    const double floor_s = predict(0);
    double us = 0;
    if (floor_s < measured) {
      // The time grows with the per-tensor cost: bracket, then bisect.
      double lo = 0, hi = 100;
      while (predict(hi) < measured && hi < 1e9) lo = hi, hi *= 4;
      for (int i = 0; i < 100 && hi - lo > 1e-6; ++i) {
        const double mid = 0.5 * (lo + hi);
        (predict(mid) < measured ? lo : hi) = mid;
      }
      us = 0.5 * (lo + hi);
    }
    c.tensor_us[engine] = us;
    c.fitted_on["tensor_us." + engine] = {run.setup + " " + engine};
    c.sources["tensor_us." + engine] =
        "fitted: " + engine + " took " + fmt_fixed(measured, 4) + " s a sync on " + run.setup + " (" +
        std::to_string(model.params().size()) + " tensors); the bandwidth terms alone give " + fmt_fixed(floor_s, 4) + " s" +
        (floor_s >= measured ? ", already more than measured: 0" : "");
  }
  return c;
}

}  // namespace shardsync
