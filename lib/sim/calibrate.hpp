// simulate --calibrate and --fit: a cluster file of profile shardsync from measured runs on the
// machine itself. Bandwidths are the runs' own microbenchmarks (the pull path's link, the device
// copy). Per engine, from one run: one per-tensor cost, fitted so that the schedule model gives
// the engine's measured time on that run's model and layout. From two or more runs of other
// shapes (tensors against bytes, e.g. a dense and a MoE model): a per-tensor and a per-byte cost
// (ClusterSpec::byte_ps) together, by least squares on the relative errors. Nothing else is
// estimated: latencies, launch and per-group costs are 0 (inside the fitted terms).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "sim/cluster.hpp"
#include "sim/simulator.hpp"

namespace shardsync {

// One measured run: its setup (model and layouts) and each engine's time per sync.
struct CalibrationSetup {
  std::string setup;  // "model trainer -> inference" (the row name of fitted_on)
  const ModelSpec* model = nullptr;
  const TrainerPlacement* trainer = nullptr;
  const InferencePlacement* inference = nullptr;
  const std::vector<RankPlan>* plans = nullptr;
  SimBytes bytes;                            // as the run sent them
  std::map<std::string, double> measured_s;  // engine -> its measured time per sync
};

struct CalibrationRun {
  int ranks = 0;             // the most processes of a run, all on this host
  double link_gbps = 0;      // the pull path between two ranks (bench --measure-link)
  double copy_gbps = 0;      // a device copy, bytes read plus written (bench --measure-copy)
  bool shared_device = true; // the ranks share one device (one GPU, or a CPU host)
  std::vector<CalibrationSetup> setups;  // the first is the calibration's own run
  std::map<std::string, std::string> provenance;
};

// Throws InputError when a bandwidth or a setup is missing.
ClusterSpec calibrate_cluster(const CalibrationRun& run);

}  // namespace shardsync
