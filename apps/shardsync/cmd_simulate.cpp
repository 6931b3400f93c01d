// shardsync simulate: predicted cluster-scale sync time of each engine, from the real plans
// and routes, for a cluster file; --reproduce compares the published setups.
#include <fstream>
#include <nlohmann/json.hpp>
#include <iostream>

#include "commands.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/table.hpp"
#include "model_layout_options.hpp"
#include "report/result.hpp"
#include "report/result_reader.hpp"
#include "sim/calibrate.hpp"
#include "sim/simulator.hpp"
#include "sync_runner.hpp"

namespace shardsync {

namespace {

struct SimulateOptions {
  ModelLayoutOptions setup;
  std::string cluster = "h100-ib400";
  std::string costs;  // --costs: another cluster file's profile and per-operation costs
  std::vector<EngineKind> engines;  // --engine; default: every row of the engine table
  int64_t bucket_bytes = int64_t(1) << 30;
  bool reproduce = false;
  std::string compare;  // a bench result JSON to predict
  std::string json;
  std::string wire = "bf16";  // with an FP8 target: bf16 (receivers quantize) or fp8 (codes and scales sent)
  bool dedupe_node = false, delta = false;
  UpdateModel updates;
  bool fewer_bytes = false;  // every pull engine full, deduped, delta, and both
  // --calibrate FILE: under mpirun, run the engines on the setup and write a cluster file.
  std::string calibrate;
  // --fit FILE: the same cluster file from measured runs alone (--fit-with, no mpirun); with
  // --calibrate, --fit-with adds runs to the calibration's own.
  std::string fit;
  std::vector<std::string> fit_with;
  std::string memory = "host", transport = "auto", link = "shared";
  int syncs = 3, warmup = 1, measure_iters = 20;
  int64_t send_buffer = 0, recv_buffer = 0, chunk = 0;  // 0: the engines' defaults

  SimBytes bytes() const { return SimBytes{wire == "fp8", dedupe_node, delta, updates}; }
};

struct Published {
  const char* layout;
  const char* engine;
  double time_s;
  const char* row;  // the comparison's name when it is not the engine's
};
// shared/reference/published-numbers.md: the vLLM RDT blog's two setups, and vLLM PR 43375's
// 8xH100 -> 8xH100 run (3.2-3.3 s: the middle; 2.70 s once their pack was fixed, a change of
// cost the published profile's per-tensor costs, fitted before it, do not know).
constexpr Published kPublished[] = {
    {"qwen3-235b-published", "broadcast", 64.72, nullptr}, {"qwen3-235b-published", "v1", 25.02, nullptr},
    {"qwen3-235b-published", "v2", 5.61, nullptr},         {"qwen3-235b-published", "v3", 3.49, nullptr},
    {"kimi-k2-published", "v3", 7.53, nullptr},
    {"qwen3-235b-8xh100-published", "v3", 3.25, nullptr},
    {"qwen3-235b-8xh100-published", "v3", 2.70, "v3 after pack fix"},
};
constexpr const char* kPublishedSetups[] = {"qwen3-235b-published", "kimi-k2-published", "qwen3-235b-8xh100-published"};

nlohmann::json to_json(const SimResult& r) {
  return {{"engine", r.engine},           {"total_s", r.total_s},         {"gather_s", r.gather_s},
          {"transfer_s", r.transfer_s},   {"overhead_s", r.overhead_s},   {"process_s", r.process_s},
          {"bytes_moved", r.bytes_moved}, {"bytes_ib", r.bytes_ib},       {"bytes_nvlink", r.bytes_nvlink},
          {"aggregate_gbps", r.aggregate_gbps}, {"trainer_peak_bytes", r.trainer_peak_bytes},
          {"inference_peak_bytes", r.inference_peak_bytes}, {"sol_abs_s", r.sol_abs_s},
          {"sol_pp_serial_s", r.sol_pp_serial_s}, {"tensors", r.tensors}, {"groups", r.groups}, {"pulls", r.pulls},
          {"bytes_full", r.bytes_full}, {"bytes_in_node", r.bytes_in_node}, {"node_ingress_max", r.node_ingress_max},
          {"detect_s", r.detect_s}, {"stage_s", r.stage_s}, {"stages_overlap", r.stages_overlap},
          {"pulls_overlap_iterator", r.pulls_overlap_iterator}, {"tensor_us", r.tensor_us},
          {"byte_ps", r.byte_ps}};
}

// "fitted (terms)" where a cost of the cluster file was fitted on `row` ("setup engine"), else "predicted".
std::string basis_of(const ClusterSpec& cluster, const std::string& row) {
  const std::string terms = cluster.fitted_terms(row);
  return terms.empty() ? std::string("predicted") : "fitted (" + terms + ")";
}

// The rows the cluster file's profile has costs for (the published profile has no V4).
std::vector<EngineKind> engines_with_costs(const ClusterSpec& c) {
  std::vector<EngineKind> out;
  for (const EngineSpec& e : engine_table())
    if (c.has_tensor_cost(e.name)) out.push_back(e.kind);
  return out;
}

// Engine names of a file (a bench result, the published table) as rows of the table.
EngineKind engine_of(const std::string& name, const std::string& source, const std::string& field) {
  const EngineSpec* e = find_engine(name);
  if (!e) throw InputError(source, field, "unknown engine \"" + name + "\" (engines: " + engine_list() + ")");
  return e->kind;
}

std::vector<SimResult> simulate(const ResolvedSetup& s, const ClusterSpec& cluster, const std::vector<EngineKind>& engines,
                                int64_t bucket, const SimBytes& bytes = {}) {
  std::vector<RankPlan> plans = record_plans(*s.model, *s.inference);
  Simulator sim(*s.model, *s.trainer, *s.inference, plans, cluster, bytes);
  std::vector<SimResult> out;
  for (EngineKind k : engines) out.push_back(sim.run(k, bucket));
  return out;
}

std::string setup_title(const ResolvedSetup& s, const ClusterSpec& cluster) {
  Simulator probe(*s.model, *s.trainer, *s.inference, {}, cluster);
  return "model " + s.model->name() + ", trainer " + s.trainer->layout().describe() + " on " +
         std::to_string(probe.trainer_nodes()) + " nodes, inference " + s.inference->layout().describe() + " on " +
         std::to_string(probe.inference_nodes()) + " nodes, cluster " + cluster.name;
}

void print_results(const ResolvedSetup& s, const ClusterSpec& cluster, const std::vector<SimResult>& rs,
                   const SimBytes& bytes = {}) {
  Table t({{"engine", "", true}, {"time", "s"}, {"gather", "s"}, {"transfer", "s"}, {"overhead", "s"}, {"process", "s"},
           {"moved", "TB"}, {"ib", "TB"}, {"nvlink", "TB"}, {"agg_bw", "GB/s"}, {"tr_peak", "GB"}, {"inf_peak", "GB"},
           {"sol", "s"}, {"sol_pp", "s"}});
  t.add_title("simulated (" + std::string(profile_name(cluster.profile)) + " profile): " + setup_title(s, cluster) +
              (s.inference->layout().quant != Quant::kNone ? std::string(", wire ") + (bytes.fp8_wire ? "fp8" : "bf16") : "") +
              (bytes.dedupe_node || bytes.delta ? ", bytes " + bytes.describe() : ""));
  for (const SimResult& r : rs)
    t.add_row({r.engine, fmt_fixed(r.total_s, 3), fmt_fixed(r.gather_s, 3), fmt_fixed(r.transfer_s, 3),
               fmt_fixed(r.overhead_s, 3), fmt_fixed(r.process_s, 3), fmt_fixed(double(r.bytes_moved) / 1e12, 3),
               fmt_fixed(double(r.bytes_ib) / 1e12, 3), fmt_fixed(double(r.bytes_nvlink) / 1e12, 3),
               fmt_fixed(r.aggregate_gbps, 1), fmt_fixed(double(r.trainer_peak_bytes) / 1e9, 1),
               fmt_fixed(double(r.inference_peak_bytes) / 1e9, 1), fmt_fixed(r.sol_abs_s, 3), fmt_fixed(r.sol_pp_serial_s, 3)});
  t.print(std::cout);
}

// Every engine on the same setup with full syncs, node-level dedupe, delta at --update-density,
// and both: time, bytes over the network, the busiest inference node's ingress, bytes copied
// inside nodes.
nlohmann::json fewer_bytes(const ResolvedSetup& s, const ClusterSpec& cluster, const SimulateOptions& o) {
  const bool fp8 = o.wire == "fp8";
  std::vector<SimBytes> variants = {SimBytes{fp8, false, false, o.updates}, SimBytes{fp8, true, false, o.updates}};
  if (!fp8) {
    variants.push_back(SimBytes{fp8, false, true, o.updates});
    variants.push_back(SimBytes{fp8, true, true, o.updates});
  }
  const std::vector<EngineKind> engines = o.engines.empty() ? engines_with_costs(cluster) : o.engines;
  std::vector<std::vector<SimResult>> rs;
  for (const SimBytes& v : variants) rs.push_back(simulate(s, cluster, engines, o.bucket_bytes, v));
  Table t({{"engine", "", true}, {"bytes", "", true}, {"time", "s"}, {"vs_full", "x"}, {"transfer", "s"}, {"moved", "TB"},
           {"of_full", "%"}, {"node_in", "GB"}, {"in_node", "TB"}, {"detect", "s"}});
  t.add_title("fewer bytes, simulated: " + setup_title(s, cluster) + (fp8 ? ", wire fp8" : "") +
              "; delta: a sync between anchors, " + o.updates.describe() +
              "; transfer: the pulls' own time (overlapped in v2-v4); of_full: moved against the full row; node_in: the busiest inference node's bytes from other nodes");
  nlohmann::json j;
  j["title"] = setup_title(s, cluster);
  j["updates"] = o.updates.describe();
  for (size_t e = 0; e < engines.size(); ++e)
    for (size_t v = 0; v < variants.size(); ++v) {
      const SimResult& r = rs[v][e];
      const bool pull = engine_spec(engines[e]).delivery == Delivery::kPull;
      if (!pull && v > 0) continue;  // the broadcast baseline sends every tensor whole to every rank
      const double full = rs[0][e].total_s;
      t.add_row({r.engine, pull ? variants[v].describe() : "full (not a pull engine)", fmt_fixed(r.total_s, 3),
                 fmt_fixed(r.total_s > 0 ? full / r.total_s : 0, 2), fmt_fixed(r.transfer_s, 3),
                 fmt_fixed(double(r.bytes_moved) / 1e12, 3),
                 fmt_fixed(rs[0][e].bytes_moved > 0 ? 100.0 * double(r.bytes_moved) / double(rs[0][e].bytes_moved) : 0, 1),
                 fmt_fixed(double(r.node_ingress_max) / 1e9, 1), fmt_fixed(double(r.bytes_in_node) / 1e12, 3),
                 fmt_fixed(r.detect_s, 3)});
      nlohmann::json x = to_json(r);
      x["bytes"] = variants[v].describe();
      j["results"].push_back(x);
    }
  t.print(std::cout);
  return j;
}

// A measured run as a "setup" of fitted_on rows: "model trainer -> inference" (calibration and
// --compare name rows alike, so a compared calibration run reads as fitted).
std::string setup_row(const ResultFile& m) { return m.model + " " + m.trainer + " -> " + m.inference; }

// The run's result file next to the cluster file: calibrated.json -> calibrated.run.json.
std::string calibration_run_path(const std::string& out) {
  const std::string stem = out.size() > 5 && out.ends_with(".json") ? out.substr(0, out.size() - 5) : out;
  return stem + ".run.json";
}

// A measured run's setup as --compare and --fit read it: its model, layouts, replicas and target.
ResolvedSetup setup_of_run(const ResultFile& m, const std::string& path) {
  if (m.trainer.empty() || m.inference.empty())
    throw InputError(path, "config.trainer/config.inference", "expected the run's layouts");
  ModelLayoutOptions lo;
  lo.model = m.model;
  lo.trainer = m.trainer;
  lo.inference = m.inference.substr(0, m.inference.find(' '));
  lo.replicas = m.replicas;
  lo.quant = m.quant;
  return resolve_setup(lo);
}

// As the run sent its bytes: bf16 or FP8 on the wire, whole chunks or delta records under its
// update model (its timed syncs between anchors: the model is of a delta sync).
SimBytes bytes_of_run(const ResultFile& m) {
  SimBytes bytes;
  bytes.fp8_wire = m.wire == "fp8";
  bytes.delta = m.delta;
  bytes.updates = UpdateModel{m.update_density, m.update_rows};
  return bytes;
}

// The runs a calibration fits on, each resolved (its setup and recorded plans kept alive).
struct FitRuns {
  struct One {
    std::string path;
    ResultFile m;
    ResolvedSetup s;
    std::vector<RankPlan> plans;
  };
  std::vector<std::unique_ptr<One>> runs;

  void add(const std::string& path) {
    auto one = std::make_unique<One>();
    one->path = path;
    one->m = read_result_file(path);
    one->s = setup_of_run(one->m, path);
    one->plans = record_plans(*one->s.model, *one->s.inference);
    if (!runs.empty() && one->m.host != runs.front()->m.host)
      throw InputError(path, "host", "a fit's runs come from one host: " + runs.front()->path + " ran on \"" +
                                         runs.front()->m.host + "\", this one on \"" + one->m.host + "\"");
    runs.push_back(std::move(one));
  }

  // The first run gives the bandwidths (its --measure-link and --measure-copy).
  CalibrationRun calibration(bool shared_device, const std::string& command) const {
    const One& first = *runs.front();
    if (!(first.m.link_gbps > 0))
      throw InputError(first.path, "link_gbps", "the pull path's bandwidth: run bench with --measure-link (simulate "
                                                "--calibrate does), or give such a run first");
    if (!(first.m.copy_gbps > 0))
      throw InputError(first.path, "copy_gbps", "the device copy's bandwidth: run bench with --measure-copy (simulate "
                                                "--calibrate does), or give such a run first");
    CalibrationRun run;
    run.link_gbps = first.m.link_gbps;
    run.copy_gbps = first.m.copy_gbps;
    run.shared_device = shared_device;
    std::string setups, paths;
    for (const auto& r : runs) {
      CalibrationSetup cs;
      cs.setup = setup_row(r->m);
      cs.model = r->s.model.get();
      cs.trainer = r->s.trainer.get();
      cs.inference = r->s.inference.get();
      cs.plans = &r->plans;
      cs.bytes = bytes_of_run(r->m);
      for (const EngineResult& e : r->m.engines) cs.measured_s[e.engine] = e.time_avg_s;
      run.ranks = std::max(run.ranks, r->m.ranks);
      setups += (setups.empty() ? "" : "; ") + cs.setup;
      paths += (paths.empty() ? "" : ", ") + r->path;
      run.setups.push_back(std::move(cs));
    }
    run.provenance = {{"command", command},          {"host", first.m.host},  {"git_sha", first.m.git_sha},
                      {"date_utc", first.m.date_utc}, {"run", first.path},     {"memory", first.m.memory},
                      {"ranks", std::to_string(run.ranks)}, {"setup", setups}};
    if (runs.size() > 1) {
      run.provenance["runs"] = paths;
      std::string shas;
      for (const auto& r : runs) shas += (shas.empty() ? "" : ", ") + r->m.git_sha;
      run.provenance["runs_git_sha"] = shas;
    }
    return run;
  }
};

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// Writes the fitted cluster file and prints each run's measured and refitted times.
void write_fit(const std::string& out_path, const FitRuns& fr, const CalibrationRun& run) {
  ClusterSpec c = calibrate_cluster(run);
  {
    std::ofstream out(out_path);
    out << cluster_json(c);
    if (!out) throw InputError(out_path, "(output)", "cannot write the cluster file");
  }
  Table t({{"setup", "", true}, {"engine", "", true}, {"measured", "s"}, {"tensor_us", "us"}, {"byte_ps", "ps"}, {"refit", "s"},
           {"error", "%"}});
  t.add_title("calibrated " + out_path + " (profile shardsync) on " + std::to_string(fr.runs.size()) + " run(s), link " +
              fmt_fixed(run.link_gbps, 2) + " GB/s, copy " + fmt_fixed(run.copy_gbps, 2) + " GB/s" +
              (run.shared_device ? ", shared by the host's ranks" : "") +
              (fr.runs.size() > 1 ? "; a per-tensor and a per-byte cost per engine, fitted on every run" : ""));
  for (size_t i = 0; i < fr.runs.size(); ++i) {
    const CalibrationSetup& cs = run.setups[i];
    Simulator sim(*cs.model, *cs.trainer, *cs.inference, *cs.plans, c, cs.bytes);
    for (const auto& [engine, measured] : cs.measured_s) {
      const double refit = sim.run(*find_engine(engine)).total_s;
      t.add_row({cs.setup, engine, fmt_fixed(measured, 4), fmt_fixed(c.tensor_us.at(engine), 2),
                 fmt_fixed(c.byte_cost_ps(engine), 2), fmt_fixed(refit, 4), fmt_fixed(100.0 * (refit - measured) / measured, 1)});
    }
  }
  t.print(std::cout);
}

// simulate --calibrate: every rank runs the engines (bench) with the link and copy
// microbenchmarks; rank 0 then fits the costs on that run (and any --fit-with runs) and writes
// the cluster file.
int run_calibrate(const SimulateOptions& o, int argc, char** argv) {
  SyncRunOptions r;
  r.setup = o.setup;
  r.engines = o.engines;
  if (r.engines.empty())
    for (const EngineSpec& e : engine_table()) r.engines.push_back(e.kind);
  r.syncs = o.syncs;
  r.warmup = o.warmup;
  r.memory = o.memory;
  r.transport = o.transport;
  r.link_iters = o.measure_iters;
  r.copy_iters = o.measure_iters;
  if (o.send_buffer > 0) r.engine.send_buffer_bytes = o.send_buffer;
  if (o.recv_buffer > 0) r.engine.recv_buffer_bytes = o.recv_buffer;
  if (o.chunk > 0) r.engine.chunk_bytes = o.chunk;
  r.json_out = calibration_run_path(o.calibrate);
  for (const std::string& f : o.fit_with) read_result_file(f);  // a bad file stops every rank before the run
  int rank = 0;
  const int status = run_syncs(r, argc, argv, &rank);
  if (status != 0 || rank != 0) return status;
  FitRuns fr;
  fr.add(r.json_out);
  for (const std::string& f : o.fit_with) fr.add(f);
  const CalibrationRun run = fr.calibration(o.link == "shared", joined(fr.runs.front()->m.argv));
  write_fit(o.calibrate, fr, run);
  std::cout << "# wrote " << o.calibrate << " (and the run, " << r.json_out << "); predict with --cluster "
            << o.calibrate << " (another model or layout on this host: out of sample)\n";
  return 0;
}

// simulate --fit: the cluster file from runs already measured (no mpirun).
void run_fit(const SimulateOptions& o, int argc, char** argv) {
  if (o.fit_with.empty())
    throw InputError("--fit", o.fit, "measured runs to fit on: --fit-with RUN.json (a bench --json file; the first "
                                     "with --measure-link and --measure-copy, as simulate --calibrate writes it)");
  FitRuns fr;
  for (const std::string& f : o.fit_with) fr.add(f);
  std::vector<std::string> words(argv, argv + argc);
  const CalibrationRun run = fr.calibration(o.link == "shared", joined(words));
  write_fit(o.fit, fr, run);
  std::cout << "# wrote " << o.fit << "; predict with --cluster " << o.fit
            << " (another model or layout on this host: out of sample)\n";
}

void run_simulate(const SimulateOptions& o) {
  ClusterSpec cluster = load_cluster(o.cluster);
  if (!o.costs.empty()) cluster = with_costs_of(cluster, load_cluster(o.costs));
  nlohmann::json j;
  // Provenance: the commit of the binary, the cluster file (and a costs file) and what made it.
  j["git_sha"] = build_commit();
  j["cluster"] = cluster.name;
  j["cluster_file"] = cluster.source;
  if (!o.costs.empty()) j["costs_file"] = o.costs;
  j["cluster_provenance"] = cluster.provenance;
  j["profile"] = profile_name(cluster.profile);
  if (!o.compare.empty()) {
    // Predict a measured run: same model, layouts and engines as the result file.
    ResultFile m = read_result_file(o.compare);
    ResolvedSetup s = setup_of_run(m, o.compare);
    std::vector<EngineKind> engines;
    for (const EngineResult& e : m.engines) engines.push_back(engine_of(e.engine, o.compare, "engines[].engine"));
    const SimBytes bytes = bytes_of_run(m);
    auto rs = simulate(s, cluster, engines, m.bucket_bytes > 0 ? m.bucket_bytes : o.bucket_bytes, bytes);
    print_results(s, cluster, rs, bytes);
    Table cmp({{"engine", "", true}, {"predicted", "s"}, {"measured", "s"}, {"error", "%"}, {"moved_pred", "MB"},
               {"moved_meas", "MB"}, {"moved_err", "%"}, {"basis", "", true}});
    cmp.add_title("predicted (cluster " + cluster.name + ", profile " + profile_name(cluster.profile) + ") vs measured (" +
                  o.compare + "), bytes " + bytes.describe() +
                  "; basis: fitted = a cost of the cluster file was fitted on this setup and engine (not a test)");
    const std::string row = setup_row(m);
    for (size_t i = 0; i < rs.size(); ++i) {
      double measured = m.engines[i].time_avg_s;
      double err = 100.0 * (rs[i].total_s - measured) / measured;
      const nlohmann::json& sm = m.engines[i].summary;
      const double moved = sm.contains("bytes_moved") && sm["bytes_moved"].is_number() ? sm["bytes_moved"].get<double>() : 0;
      const double moved_err = moved > 0 ? 100.0 * (double(rs[i].bytes_moved) - moved) / moved : 0;
      const std::string basis = basis_of(cluster, row + " " + rs[i].engine);
      cmp.add_row({rs[i].engine, fmt_fixed(rs[i].total_s, 4), fmt_fixed(measured, 4), fmt_fixed(err, 1),
                   fmt_fixed(double(rs[i].bytes_moved) / 1e6, 3), moved > 0 ? fmt_fixed(moved / 1e6, 3) : "-",
                   moved > 0 ? fmt_fixed(moved_err, 1) : "-", basis});
      nlohmann::json x = to_json(rs[i]);
      x["basis"] = basis;
      x["measured_s"] = measured;
      x["error_pct"] = err;
      if (moved > 0) {
        x["measured_bytes_moved"] = moved;
        x["bytes_moved_error_pct"] = moved_err;
      }
      j["results"].push_back(x);
    }
    cmp.print(std::cout);
  } else if (!o.reproduce) {
    ResolvedSetup s = resolve_setup(o.setup);
    if (o.fewer_bytes) {
      j["fewer_bytes"].push_back(fewer_bytes(s, cluster, o));
    } else {
      auto rs = simulate(s, cluster, o.engines.empty() ? engines_with_costs(cluster) : o.engines, o.bucket_bytes, o.bytes());
      print_results(s, cluster, rs, o.bytes());
      j["quant"] = quant_name(s.inference->layout().quant);
      j["wire"] = s.inference->layout().quant == Quant::kNone ? "bf16" : o.wire;
      j["bytes"] = o.bytes().describe();
      for (const auto& r : rs) j["results"].push_back(to_json(r));
    }
  } else {
    Table cmp({{"setup", "", true}, {"engine", "", true}, {"model", "s"}, {"published", "s"}, {"error", "%"},
               {"basis", "", true}});
    cmp.add_title("model vs published (shared/reference/published-numbers.md), cluster " + cluster.name + ", profile " +
                  profile_name(cluster.profile));
    cmp.add_title("basis: fitted = a cost term of the cluster file was fitted on this very number (not a test); "
                  "predicted = out of sample");
    auto basis = [&](const std::string& row) { return basis_of(cluster, row); };
    for (const char* layout : kPublishedSetups) {
      ModelLayoutOptions lo;
      lo.layout = layout;
      ResolvedSetup s = resolve_setup(lo);
      // Every engine the profile has costs for: the published ones are compared, the others
      // predicted alongside.
      std::vector<EngineKind> engines = o.engines.empty() ? engines_with_costs(cluster) : o.engines;
      auto rs = simulate(s, cluster, engines, o.bucket_bytes);
      print_results(s, cluster, rs);
      std::cout << "\n";
      for (const auto& r : rs) {
        nlohmann::json x = to_json(r);
        x["setup"] = layout;
        for (const auto& p : kPublished)
          if (std::string(p.layout) == layout && r.engine == p.engine) {
            const std::string name = p.row ? p.row : r.engine;
            double err = 100.0 * (r.total_s - p.time_s) / p.time_s;
            const std::string b = basis(std::string(layout) + " " + name);
            cmp.add_row({layout, name, fmt_fixed(r.total_s, 2), fmt_fixed(p.time_s, 2), fmt_fixed(err, 1), b});
            if (p.row) {
              x["published_" + name] = {{"published_s", p.time_s}, {"error_pct", err}, {"basis", b}};
              continue;
            }
            x["published_s"] = p.time_s;
            x["error_pct"] = err;
            x["basis"] = b;
          }
        if (std::string(layout) == "kimi-k2-published" && r.engine == "v3") {
          const std::string k = std::string(layout) + " ";
          cmp.add_row({layout, "v3 bytes", fmt_fixed(double(r.bytes_moved) / 1e12, 2), "7.90",
                       fmt_fixed(100.0 * (double(r.bytes_moved) / 1e12 - 7.9) / 7.9, 1), basis(k + "v3 bytes")});
          cmp.add_row({layout, "v3 GB/s", fmt_fixed(r.aggregate_gbps, 0), "1049",
                       fmt_fixed(100.0 * (r.aggregate_gbps - 1049) / 1049, 1), basis(k + "v3 GB/s")});
          cmp.add_row({layout, "SoL abs", fmt_fixed(r.sol_abs_s, 2), "1.25", fmt_fixed(100.0 * (r.sol_abs_s - 1.25) / 1.25, 1),
                       basis(k + "SoL abs")});
          cmp.add_row({layout, "SoL PP serial", fmt_fixed(r.sol_pp_serial_s, 2), "5.00",
                       fmt_fixed(100.0 * (r.sol_pp_serial_s - 5.0) / 5.0, 1), basis(k + "SoL PP serial")});
        }
        j["results"].push_back(x);
      }
    }
    cmp.print(std::cout);
    if (o.fewer_bytes)
      for (const char* layout : kPublishedSetups) {
        ModelLayoutOptions lo;
        lo.layout = layout;
        std::cout << "\n";
        nlohmann::json x = fewer_bytes(resolve_setup(lo), cluster, o);
        x["setup"] = layout;
        j["fewer_bytes"].push_back(x);
      }
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << j.dump(1) << "\n";
    if (!out) throw InputError(o.json, "(output)", "cannot write");
  }
}

}  // namespace

void setup_simulate_command(CLI::App& app, int argc, char** argv) {
  auto o = std::make_shared<SimulateOptions>();
  auto* sim = app.add_subcommand("simulate", "Predict cluster-scale sync time per engine from the real plans and a cluster file");
  add_layout_options(sim, &o->setup);
  sim->add_option("--cluster,-c", o->cluster, "Bundled cluster name (configs/clusters) or path to a cluster JSON")
      ->capture_default_str();
  sim->add_option("--costs", o->costs,
                  "Take the profile and per-operation costs from this cluster file (bundled name or path, e.g. one "
                  "written by --calibrate) and the hardware from --cluster")
      ->check([](const std::string& v) { return v.empty() ? std::string("expected a cluster file") : std::string(); });
  add_engine_option(sim, &o->engines, {});
  sim->add_option("--bucket", o->bucket_bytes, "Broadcast bucket")->transform(CLI::AsSizeValue(false))->capture_default_str();
  sim->add_flag("--reproduce", o->reproduce,
                "Simulate the published setups (the vLLM RDT blog's two, vLLM's 8xH100 -> 8xH100) and compare with "
                "the published numbers");
  sim->add_option("--compare", o->compare, "Predict a measured bench result (its --json file): same model, layouts, engines");
  sim->add_option("--json", o->json, "Write the predictions to this JSON file");
  sim->add_option("--wire", o->wire,
                  "With --quant fp8-block128: bf16 (inference ranks pull bf16 and quantize) or fp8 (trainers send "
                  "e4m3fn codes and fp32 scales, about half the bytes)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  sim->add_flag("--dedupe-node", o->dedupe_node,
                "Pull engines: a piece several inference ranks of a node need crosses the network once and is copied "
                "inside the node to the others");
  sim->add_flag("--delta", o->delta,
                "Pull engines: a sync between anchors, each chunk sent as what changed (the expected size of its "
                "delta record under --update-density and --update-pattern)");
  add_update_options(sim, &o->updates);
  sim->add_flag("--fewer-bytes", o->fewer_bytes,
                "Every engine full, with --dedupe-node, with --delta at --update-density, and with both, side by side "
                "(with --reproduce: for every published setup)");
  sim->add_option("--calibrate", o->calibrate,
                   "Under mpirun: run the engines on the setup (--model/--layout, -t, -i) with the link and copy "
                   "microbenchmarks, fit one per-tensor cost per engine to the measured times (with --fit-with: a "
                   "per-tensor and a per-byte cost over this run and those), and write a cluster file (profile "
                   "shardsync) with its provenance to this path; the run itself goes to PATH.run.json")
      ->group("Calibration");
  sim->add_option("--fit", o->fit,
                  "Without mpirun: fit the costs on measured runs (--fit-with, of one host; the first gives the "
                  "bandwidths) and write the cluster file to this path")
      ->group("Calibration");
  sim->add_option("--fit-with", o->fit_with,
                  "A measured run (bench --json) to fit on, repeatable: two or more runs of other shapes (e.g. a "
                  "dense and a MoE model) fit a per-tensor and a per-byte cost per engine together")
      ->group("Calibration");
  sim->add_option("--memory", o->memory, "--calibrate: where weights live: host or cuda")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str()
      ->group("Calibration");
  sim->add_option("--syncs,-n", o->syncs, "--calibrate: timed syncs per engine")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str()
      ->group("Calibration");
  sim->add_option("--warmup,-w", o->warmup, "--calibrate: warm-up syncs per engine")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str()
      ->group("Calibration");
  sim->add_option("--transport", o->transport, "--calibrate: as bench's --transport")->capture_default_str()->group("Calibration");
  sim->add_option("--measure-iters", o->measure_iters, "--calibrate: reads per round of the link and copy microbenchmarks")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str()
      ->group("Calibration");
  sim->add_option("--send-buffer", o->send_buffer, "--calibrate: as bench's --send-buffer (default: bench's)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Calibration");
  sim->add_option("--recv-buffer", o->recv_buffer, "--calibrate: as bench's --recv-buffer (default: bench's)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Calibration");
  sim->add_option("--chunk", o->chunk, "--calibrate: as bench's --chunk (default: bench's)")
      ->transform(CLI::AsSizeValue(false))
      ->group("Calibration");
  sim->add_option("--link", o->link,
                  "--calibrate, --fit: shared (the host's ranks share one device: one GPU, or CPU processes) or per-rank "
                  "(a device each, e.g. one rank per GPU)")
      ->check(CLI::IsMember({"shared", "per-rank"}))
      ->capture_default_str()
      ->group("Calibration");
  sim->callback([o, argc, argv] {
    if (!o->calibrate.empty() || !o->fit.empty()) {
      const std::string flag = o->calibrate.empty() ? "--fit" : "--calibrate";
      const std::string path = o->calibrate.empty() ? o->fit : o->calibrate;
      if (o->reproduce || !o->compare.empty() || o->fewer_bytes || (!o->calibrate.empty() && !o->fit.empty()))
        throw InputError(flag, path, "a calibration alone (not with --reproduce, --compare, --fewer-bytes, or both "
                                     "--calibrate and --fit)");
      if (!o->calibrate.empty()) throw SubcommandExit{run_calibrate(*o, argc, argv)};
      run_fit(*o, argc, argv);
      return;
    }
    if (!o->fit_with.empty()) throw InputError("--fit-with", o->fit_with.front(), "runs to fit on, with --fit or --calibrate");
    run_simulate(*o);
  });
}

}  // namespace shardsync
