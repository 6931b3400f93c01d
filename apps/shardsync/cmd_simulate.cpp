// shardsync simulate: predicted cluster-scale sync time of each engine, from the real plans
// and routes, for a cluster file; --reproduce compares the two published setups.
#include <fstream>
#include <nlohmann/json.hpp>
#include <iostream>

#include "commands.hpp"
#include "common/error.hpp"
#include "common/json_input.hpp"
#include "common/table.hpp"
#include "model_layout_options.hpp"
#include "report/result_reader.hpp"
#include "sim/simulator.hpp"

namespace shardsync {

namespace {

struct SimulateOptions {
  ModelLayoutOptions setup;
  std::string cluster = "h100-ib400";
  std::vector<EngineKind> engines;  // --engine; default: every row of the engine table
  int64_t bucket_bytes = int64_t(1) << 30;
  bool reproduce = false;
  std::string compare;  // a bench result JSON to predict
  std::string json;
  std::string wire = "bf16";  // with an FP8 target: bf16 (receivers quantize) or fp8 (codes and scales sent)
};

struct Published {
  const char* layout;
  const char* engine;
  double time_s;
};
// shared/reference/published-numbers.md (vLLM RDT blog).
constexpr Published kPublished[] = {
    {"qwen3-235b-published", "broadcast", 64.72}, {"qwen3-235b-published", "v1", 25.02},
    {"qwen3-235b-published", "v2", 5.61},         {"qwen3-235b-published", "v3", 3.49},
    {"kimi-k2-published", "v3", 7.53},
};

nlohmann::json to_json(const SimResult& r) {
  return {{"engine", r.engine},           {"total_s", r.total_s},         {"gather_s", r.gather_s},
          {"transfer_s", r.transfer_s},   {"overhead_s", r.overhead_s},   {"process_s", r.process_s},
          {"bytes_moved", r.bytes_moved}, {"bytes_ib", r.bytes_ib},       {"bytes_nvlink", r.bytes_nvlink},
          {"aggregate_gbps", r.aggregate_gbps}, {"trainer_peak_bytes", r.trainer_peak_bytes},
          {"inference_peak_bytes", r.inference_peak_bytes}, {"sol_abs_s", r.sol_abs_s},
          {"sol_pp_serial_s", r.sol_pp_serial_s}, {"tensors", r.tensors}, {"groups", r.groups}, {"pulls", r.pulls}};
}

std::vector<EngineKind> every_engine() {
  std::vector<EngineKind> out;
  for (const EngineSpec& e : engine_table()) out.push_back(e.kind);
  return out;
}

// Engine names of a file (a bench result, the published table) as rows of the table.
EngineKind engine_of(const std::string& name, const std::string& source, const std::string& field) {
  const EngineSpec* e = find_engine(name);
  if (!e) throw InputError(source, field, "unknown engine \"" + name + "\" (engines: " + engine_list() + ")");
  return e->kind;
}

std::vector<SimResult> simulate(const ResolvedSetup& s, const ClusterSpec& cluster, const std::vector<EngineKind>& engines,
                                int64_t bucket, bool fp8_wire = false) {
  std::vector<RankPlan> plans = record_plans(*s.model, *s.inference);
  Simulator sim(*s.model, *s.trainer, *s.inference, plans, cluster, fp8_wire);
  std::vector<SimResult> out;
  for (EngineKind k : engines) out.push_back(sim.run(k, bucket));
  return out;
}

void print_results(const ResolvedSetup& s, const ClusterSpec& cluster, const std::vector<SimResult>& rs,
                   const std::string& wire = "bf16") {
  Table t({{"engine", "", true}, {"time", "s"}, {"gather", "s"}, {"transfer", "s"}, {"overhead", "s"}, {"process", "s"},
           {"moved", "TB"}, {"ib", "TB"}, {"nvlink", "TB"}, {"agg_bw", "GB/s"}, {"tr_peak", "GB"}, {"inf_peak", "GB"},
           {"sol", "s"}, {"sol_pp", "s"}});
  Simulator probe(*s.model, *s.trainer, *s.inference, {}, cluster);
  t.add_title("simulated: model " + s.model->name() + ", trainer " + s.trainer->layout().describe() + " on " +
              std::to_string(probe.trainer_nodes()) + " nodes, inference " + s.inference->layout().describe() + " on " +
              std::to_string(probe.inference_nodes()) + " nodes, cluster " + cluster.name +
              (s.inference->layout().quant != Quant::kNone ? ", wire " + wire : ""));
  for (const SimResult& r : rs)
    t.add_row({r.engine, fmt_fixed(r.total_s, 3), fmt_fixed(r.gather_s, 3), fmt_fixed(r.transfer_s, 3),
               fmt_fixed(r.overhead_s, 3), fmt_fixed(r.process_s, 3), fmt_fixed(double(r.bytes_moved) / 1e12, 3),
               fmt_fixed(double(r.bytes_ib) / 1e12, 3), fmt_fixed(double(r.bytes_nvlink) / 1e12, 3),
               fmt_fixed(r.aggregate_gbps, 1), fmt_fixed(double(r.trainer_peak_bytes) / 1e9, 1),
               fmt_fixed(double(r.inference_peak_bytes) / 1e9, 1), fmt_fixed(r.sol_abs_s, 3), fmt_fixed(r.sol_pp_serial_s, 3)});
  t.print(std::cout);
}

void run_simulate(const SimulateOptions& o) {
  ClusterSpec cluster = load_cluster(o.cluster);
  nlohmann::json j;
  j["cluster"] = cluster.name;
  if (!o.compare.empty()) {
    // Predict a measured run: same model, layouts and engines as the result file.
    ResultFile m = read_result_file(o.compare);
    if (m.trainer.empty() || m.inference.empty())
      throw InputError(o.compare, "config.trainer/config.inference", "expected the run's layouts");
    ModelLayoutOptions lo;
    lo.model = m.model;
    lo.trainer = m.trainer;
    lo.inference = m.inference.substr(0, m.inference.find(' '));
    lo.replicas = m.replicas;
    lo.quant = m.quant;  // an FP8 target measured with receivers quantizing (bf16 on the wire)
    ResolvedSetup s = resolve_setup(lo);
    std::vector<EngineKind> engines;
    for (const EngineResult& e : m.engines) engines.push_back(engine_of(e.engine, o.compare, "engines[].engine"));
    auto rs = simulate(s, cluster, engines, m.bucket_bytes > 0 ? m.bucket_bytes : o.bucket_bytes);
    print_results(s, cluster, rs);
    Table cmp({{"engine", "", true}, {"predicted", "s"}, {"measured", "s"}, {"error", "%"}});
    cmp.add_title("predicted (cluster " + cluster.name + ") vs measured (" + o.compare + ")");
    for (size_t i = 0; i < rs.size(); ++i) {
      double measured = m.engines[i].time_avg_s;
      double err = 100.0 * (rs[i].total_s - measured) / measured;
      cmp.add_row({rs[i].engine, fmt_fixed(rs[i].total_s, 4), fmt_fixed(measured, 4), fmt_fixed(err, 1)});
      nlohmann::json x = to_json(rs[i]);
      x["measured_s"] = measured;
      x["error_pct"] = err;
      j["results"].push_back(x);
    }
    cmp.print(std::cout);
  } else if (!o.reproduce) {
    ResolvedSetup s = resolve_setup(o.setup);
    auto rs = simulate(s, cluster, o.engines.empty() ? every_engine() : o.engines, o.bucket_bytes, o.wire == "fp8");
    print_results(s, cluster, rs, o.wire);
    j["quant"] = quant_name(s.inference->layout().quant);
    j["wire"] = s.inference->layout().quant == Quant::kNone ? "bf16" : o.wire;
    for (const auto& r : rs) j["results"].push_back(to_json(r));
  } else {
    Table cmp({{"setup", "", true}, {"engine", "", true}, {"predicted", "s"}, {"published", "s"}, {"error", "%"}});
    cmp.add_title("predicted vs published (shared/reference/published-numbers.md), cluster " + cluster.name);
    for (const char* layout : {"qwen3-235b-published", "kimi-k2-published"}) {
      ModelLayoutOptions lo;
      lo.layout = layout;
      ResolvedSetup s = resolve_setup(lo);
      // Every engine: the published ones are compared, the others predicted alongside.
      std::vector<EngineKind> engines = every_engine();
      auto rs = simulate(s, cluster, engines, o.bucket_bytes);
      print_results(s, cluster, rs);
      std::cout << "\n";
      for (const auto& r : rs) {
        nlohmann::json x = to_json(r);
        x["setup"] = layout;
        for (const auto& p : kPublished)
          if (std::string(p.layout) == layout && r.engine == p.engine) {
            double err = 100.0 * (r.total_s - p.time_s) / p.time_s;
            cmp.add_row({layout, r.engine, fmt_fixed(r.total_s, 2), fmt_fixed(p.time_s, 2), fmt_fixed(err, 1)});
            x["published_s"] = p.time_s;
            x["error_pct"] = err;
          }
        if (std::string(layout) == "kimi-k2-published" && r.engine == "v3") {
          cmp.add_row({layout, "v3 bytes", fmt_fixed(double(r.bytes_moved) / 1e12, 2), "7.90",
                       fmt_fixed(100.0 * (double(r.bytes_moved) / 1e12 - 7.9) / 7.9, 1)});
          cmp.add_row({layout, "v3 GB/s", fmt_fixed(r.aggregate_gbps, 0), "1049",
                       fmt_fixed(100.0 * (r.aggregate_gbps - 1049) / 1049, 1)});
          cmp.add_row({layout, "SoL abs", fmt_fixed(r.sol_abs_s, 2), "1.25", fmt_fixed(100.0 * (r.sol_abs_s - 1.25) / 1.25, 1)});
          cmp.add_row({layout, "SoL PP serial", fmt_fixed(r.sol_pp_serial_s, 2), "5.00",
                       fmt_fixed(100.0 * (r.sol_pp_serial_s - 5.0) / 5.0, 1)});
        }
        j["results"].push_back(x);
      }
    }
    cmp.print(std::cout);
  }
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    out << j.dump(1) << "\n";
    if (!out) throw InputError(o.json, "(output)", "cannot write");
  }
}

}  // namespace

void setup_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  auto* sim = app.add_subcommand("simulate", "Predict cluster-scale sync time per engine from the real plans and a cluster file");
  add_layout_options(sim, &o->setup);
  sim->add_option("--cluster,-c", o->cluster, "Bundled cluster name (configs/clusters) or path to a cluster JSON")
      ->capture_default_str();
  add_engine_option(sim, &o->engines, every_engine());
  sim->add_option("--bucket", o->bucket_bytes, "Broadcast bucket")->transform(CLI::AsSizeValue(false))->capture_default_str();
  sim->add_flag("--reproduce", o->reproduce, "Simulate the two published setups and compare with the published numbers");
  sim->add_option("--compare", o->compare, "Predict a measured bench result (its --json file): same model, layouts, engines");
  sim->add_option("--json", o->json, "Write the predictions to this JSON file");
  sim->add_option("--wire", o->wire,
                  "With --quant fp8-block128: bf16 (inference ranks pull bf16 and quantize) or fp8 (trainers send "
                  "e4m3fn codes and fp32 scales, about half the bytes)")
      ->check(CLI::IsMember({"bf16", "fp8"}))
      ->capture_default_str();
  sim->callback([o] { run_simulate(*o); });
}

}  // namespace shardsync
