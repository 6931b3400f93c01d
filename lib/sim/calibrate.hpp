// simulate --calibrate: a cluster file of profile shardsync from one measured run on the
// machine itself. Bandwidths are the run's own microbenchmarks (the pull path's link, the
// device copy); each engine's per-tensor cost is the one term fitted, so that the schedule
// model gives that engine's measured time on the calibration's model and layout. Nothing
// else is estimated: latencies, launch and per-group costs are 0 (inside the per-tensor term).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/cluster.hpp"
#include "sim/simulator.hpp"

namespace shardsync {

struct CalibrationRun {
  std::string setup;         // "model trainer -> inference" (the row name of fitted_on)
  int ranks = 0;             // processes of the run, all on this host
  double link_gbps = 0;      // the pull path between two ranks (bench --measure-link)
  double copy_gbps = 0;      // a device copy, bytes read plus written (bench --measure-copy)
  bool shared_device = true; // the ranks share one device (one GPU, or a CPU host)
  std::map<std::string, double> measured_s;  // engine -> its measured time per sync
  std::map<std::string, std::string> provenance;
};

// Throws InputError when a bandwidth is missing.
ClusterSpec calibrate_cluster(const ModelSpec& model, const TrainerPlacement& trainer, const InferencePlacement& inference,
                              const std::vector<RankPlan>& plans, const CalibrationRun& run);

}  // namespace shardsync
