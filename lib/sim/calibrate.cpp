#include "sim/calibrate.hpp"

#include <cmath>

#include "common/error.hpp"
#include "common/table.hpp"  // fmt_fixed

namespace shardsync {

namespace {

// One engine's fitted terms over the setups that measured it.
struct Fitted {
  double tensor_us = 0, byte_ps = 0;
  double floor_s = 0;  // the first setup's time with both terms 0 (bandwidths alone)
};

class EngineFit {
 public:
  EngineFit(const ClusterSpec& base, const EngineSpec& spec, std::vector<const CalibrationSetup*> setups)
      : base_(base), spec_(spec), setups_(std::move(setups)) {}

  double predict(const CalibrationSetup& s, double us, double ps) const {
    ClusterSpec x = base_;
    x.tensor_us[spec_.name] = us;
    if (ps > 0) x.byte_ps[spec_.name] = ps;
    return Simulator(*s.model, *s.trainer, *s.inference, *s.plans, x, s.bytes).run(spec_).total_s;
  }

  Fitted fit() const {
    Fitted f;
    f.floor_s = predict(*setups_.front(), 0, 0);
    f.tensor_us = tensor_only(*setups_.front());
    if (setups_.size() < 2) return f;
    // The schedule's maxima make the errors' surface piecewise: a coarse grid over both terms
    // (0 and 0.1 to 1e5, log-spaced) finds the basin, Gauss-Newton then settles in it.
    double best = squares(residuals(f.tensor_us, 0));
    std::vector<double> axis{0};
    for (int k = 0; k <= 24; ++k) axis.push_back(0.1 * std::pow(10.0, k / 4.0));
    for (double u : axis)
      for (double p : axis) {
        const double x = squares(residuals(u, p));
        if (x < best) best = x, f.tensor_us = u, f.byte_ps = p;
      }
    two_terms(&f.tensor_us, &f.byte_ps);
    return f;
  }

 private:
  double measured(const CalibrationSetup& s) const { return s.measured_s.at(spec_.name); }

  // One setup, no per-byte cost: the per-tensor cost that gives its time (0 when the bandwidths
  // alone already take longer). The time grows with the cost: bracket, then bisect.
  double tensor_only(const CalibrationSetup& s) const {
    const double m = measured(s);
    if (predict(s, 0, 0) >= m) return 0;
    double lo = 0, hi = 100;
    while (predict(s, hi, 0) < m && hi < 1e9) lo = hi, hi *= 4;
    for (int i = 0; i < 100 && hi - lo > 1e-6; ++i) {
      const double mid = 0.5 * (lo + hi);
      (predict(s, mid, 0) < m ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  }

  std::vector<double> residuals(double us, double ps) const {
    std::vector<double> r;
    for (const CalibrationSetup* s : setups_) r.push_back((predict(*s, us, ps) - measured(*s)) / measured(*s));
    return r;
  }
  static double squares(const std::vector<double>& r) {
    double x = 0;
    for (double v : r) x += v * v;
    return x;
  }

  // Gauss-Newton on the relative errors, both terms kept >= 0 (a step that would go below is
  // clipped, and halved until the sum of squares falls).
  void two_terms(double* us, double* ps) const {
    double u = *us, p = *ps;
    std::vector<double> r = residuals(u, p);
    double f = squares(r);
    for (int iter = 0; iter < 60 && f > 1e-12; ++iter) {
      const double hu = std::max(0.01, 0.01 * u), hp = std::max(0.01, 0.01 * p);
      const std::vector<double> ru = residuals(u + hu, p), rp = residuals(u, p + hp);
      double a = 0, b = 0, d = 0, gu = 0, gp = 0;
      for (size_t i = 0; i < r.size(); ++i) {
        const double ju = (ru[i] - r[i]) / hu, jp = (rp[i] - r[i]) / hp;
        a += ju * ju, b += ju * jp, d += jp * jp, gu += ju * r[i], gp += jp * r[i];
      }
      double du = 0, dp = 0;
      const double det = a * d - b * b;
      if (std::abs(det) > 1e-12 * std::max(1e-300, a * d)) {
        du = -(d * gu - b * gp) / det;
        dp = -(a * gp - b * gu) / det;
      } else if (a > 0) {
        du = -gu / a;  // the per-byte term has no effect here: the per-tensor one alone
      } else if (d > 0) {
        dp = -gp / d;
      }
      bool moved = false;
      for (double t = 1; t > 1e-4; t *= 0.5) {
        const double un = std::max(0.0, u + t * du), pn = std::max(0.0, p + t * dp);
        std::vector<double> rn = residuals(un, pn);
        const double fn = squares(rn);
        if (fn < f) {
          moved = std::abs(un - u) > 1e-9 * std::max(1.0, u) || std::abs(pn - p) > 1e-9 * std::max(1.0, p);
          u = un, p = pn, r = std::move(rn), f = fn;
          break;
        }
      }
      if (!moved) break;
    }
    *us = u, *ps = p;
  }

  const ClusterSpec& base_;
  const EngineSpec& spec_;
  std::vector<const CalibrationSetup*> setups_;
};

}  // namespace

ClusterSpec calibrate_cluster(const CalibrationRun& run) {
  if (!(run.link_gbps > 0)) throw InputError("--calibrate", "link_gbps", "the run's measured pull-path bandwidth (--measure-link)");
  if (!(run.copy_gbps > 0)) throw InputError("--calibrate", "copy_gbps", "the run's measured device copy bandwidth (--measure-copy)");
  if (run.setups.empty()) throw InputError("--calibrate", "runs", "at least one measured run");
  const bool several = run.setups.size() > 1;
  std::string names;
  for (const CalibrationSetup& s : run.setups) names += (names.empty() ? "" : "; ") + s.setup;
  ClusterSpec c;
  c.name = "calibrated";
  c.source = "simulate --calibrate";
  c.profile = CostProfile::kShardsync;
  c.description = "Calibrated by shardsync simulate --calibrate on " + run.provenance.at("host") + " from " +
                  (several ? std::to_string(run.setups.size()) + " runs (" : "one run (") + names + ", at most " +
                  std::to_string(run.ranks) + " ranks on one host" + (run.shared_device ? ", sharing one device" : "") +
                  "): bandwidths from its microbenchmarks, " +
                  (several ? "a per-tensor and a per-byte cost per engine fitted to their times together. "
                           : "one per-tensor cost per engine fitted to its time. ") +
                  "A prediction of another model or layout on this host is out of sample; of " +
                  (several ? "these runs" : "this run") + ", a fit.";
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
  c.sources["latencies, collective_launch_us, group_us"] =
      std::string("0: a calibration fits ") + (several ? "a per-tensor and a per-byte cost" : "one per-tensor cost") +
      " per engine, which take in every fixed cost";
  c.provenance = run.provenance;
  std::map<std::string, std::vector<const CalibrationSetup*>> by_engine;
  for (const CalibrationSetup& s : run.setups) {
    if (!s.model || !s.trainer || !s.inference || !s.plans) throw Error("calibrate: setup " + s.setup + " is incomplete");
    for (const auto& [engine, measured] : s.measured_s) {
      if (!find_engine(engine)) throw InputError("--calibrate", "engines[].engine", "unknown engine \"" + engine + "\"");
      if (!(measured > 0)) throw InputError(s.setup, "engines[" + engine + "].time_avg_s", "a measured time > 0");
      by_engine[engine].push_back(&s);
    }
  }
  for (const auto& [engine, setups] : by_engine) {
    const Fitted f = EngineFit(c, *find_engine(engine), setups).fit();
    c.tensor_us[engine] = f.tensor_us;
    std::vector<std::string> rows;
    std::string times;
    for (const CalibrationSetup* s : setups) {
      rows.push_back(s->setup + " " + engine);
      times += (times.empty() ? "" : "; ") + fmt_fixed(s->measured_s.at(engine), 4) + " s on " + s->setup;
    }
    c.fitted_on["tensor_us." + engine] = rows;
    if (setups.size() > 1) {
      c.byte_ps[engine] = f.byte_ps;
      c.fitted_on["byte_ps." + engine] = rows;
      c.sources["tensor_us." + engine + ", byte_ps." + engine] =
          "fitted together (least squares on the relative errors): " + engine + " took " + times;
    } else {
      const CalibrationSetup& s = *setups.front();
      c.sources["tensor_us." + engine] =
          "fitted: " + engine + " took " + times + " (" + std::to_string(s.model->params().size()) +
          " tensors); the bandwidth terms alone give " + fmt_fixed(f.floor_s, 4) + " s" +
          (f.floor_s >= s.measured_s.at(engine) ? ", already more than measured: 0" : "");
    }
  }
  return c;
}

}  // namespace shardsync
