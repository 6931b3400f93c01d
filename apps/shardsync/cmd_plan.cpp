// shardsync plan record|show: sharding plans recorded by a recording-tensor dry run of the
// loaders, stored in HDF5.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "common/error.hpp"
#include "common/table.hpp"
#include "model_layout_options.hpp"
#include "plan/plan.hpp"
#include "plan/loaders.hpp"
#include "plan/store.hpp"

namespace shardsync {

namespace {

struct PlanRecordOptions {
  ModelLayoutOptions setup;
  std::string out;
};

struct PlanShowOptions {
  std::string file;
  std::string model;
  int rank = -1;
  bool json = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Table rank_summary_table(const ModelSpec& m, const std::vector<RankPlan>& plans) {
  Table t({{"rank", ""}, {"tp", ""}, {"pp", ""}, {"dp", ""}, {"moe", ""}, {"params", ""}, {"entries", ""},
           {"fills", ""}, {"copy_bytes", "B"}, {"param_bytes", "B"}});
  for (const RankPlan& p : plans) {
    int64_t param_bytes = 0;
    for (const auto& ep : p.params) param_bytes += ep.bytes();
    t.add_row({fmt_int(p.local_rank), fmt_int(p.coord.tp_rank), fmt_int(p.coord.pp_rank), fmt_int(p.coord.dp_rank),
               fmt_int(p.coord.moe_rank), fmt_int(int64_t(p.params.size())), fmt_int(int64_t(p.entries.size())),
               fmt_int(int64_t(p.entries.size()) - p.num_copies()), fmt_int(p.copy_bytes(m)), fmt_int(param_bytes)});
  }
  return t;
}

void run_plan_record(const PlanRecordOptions& o) {
  ResolvedSetup s = resolve_setup(o.setup);
  const InferencePlacement& inf = *s.inference;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<RankPlan> plans = record_plans(*s.model, inf);
  double record_s = seconds_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  write_plans(o.out, *s.model, inf, plans);
  double write_s = seconds_since(t1);
  int64_t entries = 0;
  for (const auto& p : plans) entries += int64_t(p.entries.size());
  Table t = rank_summary_table(*s.model, plans);
  PlanIdentity id = plan_identity(*s.model, inf);
  t.add_title("plans for model " + s.model->name() + " (hash " + id.model_hash + "), inference " + id.layout + " x " +
              std::to_string(inf.layout().replicas) + " replicas: " + std::to_string(plans.size()) +
              " distinct rank plans (every replica's rank r uses plan r), loaders of " + id.vllm);
  t.print(std::cout);
  std::cout << "# recorded " << entries << " entries in " << fmt_fixed(record_s, 3) << " s, wrote " << o.out << " ("
            << fmt_human_bytes(int64_t(std::filesystem::file_size(o.out))) << ") in " << fmt_fixed(write_s, 3) << " s\n";
}

std::string ops_text(const PlanEntry& e) {
  if (e.is_fill()) return "zero_()";
  if (e.ops.empty()) return "-";
  std::string s;
  for (const auto& op : e.ops) s += (s.empty() ? "" : ".") + format_op(op);
  return s;
}

void run_plan_show(const PlanShowOptions& o) {
  PlanIdentity id = read_plan_identity(o.file);
  ModelSpec m = load_model(o.model.empty() ? id.model_name : o.model);
  InferenceLayout l = parse_inference_spec(id.layout, o.file + " (attribute inference_layout)");
  l.replicas = 1;
  InferenceLayout older = l;
  older.shared_experts_tp = true;
  l.shared_experts_tp = id.vllm == vllm_rules(m.config(), older);  // the rules the file says it followed
  InferencePlacement inf(m, l);
  PlanFile f = read_plans(o.file, m, inf);
  if (o.rank >= int(f.plans.size()))
    throw InputError("--rank", std::to_string(o.rank), "the file holds ranks 0.." + std::to_string(f.plans.size() - 1));
  if (o.json) {
    nlohmann::json j;
    j["file"] = o.file;
    j["format_version"] = f.format_version;
    j["model"] = id.model_name;
    j["model_hash"] = id.model_hash;
    j["vllm"] = id.vllm;
    j["inference_layout"] = id.layout;
    for (const RankPlan& p : f.plans) {
      if (o.rank >= 0 && p.local_rank != o.rank) continue;
      nlohmann::json r;
      r["rank"] = p.local_rank;
      r["entries"] = p.entries.size();
      r["copy_bytes"] = p.copy_bytes(m);
      if (o.rank >= 0) {
        for (const PlanEntry& e : p.entries) {
          const EngineParam& ep = p.params[size_t(e.engine_param)];
          nlohmann::json x;
          x["hf_tensor"] = e.is_fill() ? "" : m.param(e.hf_param).name;
          x["ops"] = ops_text(e);
          x["dst"] = ep.name;
          x["dst_offset"] = e.dst_offset;
          x["dst_shape"] = e.dst_shape;
          x["dst_strides"] = e.dst_strides;
          x["bytes"] = e.numel() * dtype_bytes(ep.dtype);
          r["plan"].push_back(x);
        }
      }
      j["ranks"].push_back(r);
    }
    std::cout << j.dump(1) << "\n";
    return;
  }
  if (o.rank < 0) {
    Table t = rank_summary_table(m, f.plans);
    t.add_title(o.file + ": model " + id.model_name + " (hash " + id.model_hash + "), inference " + id.layout +
                ", loaders of " + id.vllm);
    t.print(std::cout);
    return;
  }
  const RankPlan& p = f.plans[size_t(o.rank)];
  Table t({{"idx", ""}, {"hf_tensor", "", true}, {"ops", "", true}, {"destination", "", true}, {"offset", ""},
           {"shape", "", true}, {"strides", "", true}, {"bytes", "B"}});
  t.add_title(o.file + ": rank " + std::to_string(o.rank) + " of inference " + id.layout + ", model " + id.model_name);
  int64_t total = 0;
  for (size_t i = 0; i < p.entries.size(); ++i) {
    const PlanEntry& e = p.entries[i];
    const EngineParam& ep = p.params[size_t(e.engine_param)];
    int64_t bytes = e.numel() * dtype_bytes(ep.dtype);
    if (!e.is_fill()) total += bytes;
    t.add_row({fmt_int(int64_t(i)), e.is_fill() ? "(padding)" : m.param(e.hf_param).name, ops_text(e), ep.name,
               fmt_int(e.dst_offset), fmt_shape(e.dst_shape), fmt_shape(e.dst_strides), fmt_int(bytes)});
  }
  t.print(std::cout);
  std::cout << "# rank " << o.rank << ": " << p.entries.size() << " entries, " << p.num_copies() << " copies, " << total
            << " bytes pulled (" << fmt_human_bytes(total) << ")\n";
}

}  // namespace

void setup_plan_command(CLI::App& app) {
  auto* plan = app.add_subcommand("plan", "Record and inspect sharding plans (HDF5)");
  plan->require_subcommand(1);

  auto rec = std::make_shared<PlanRecordOptions>();
  auto* record = plan->add_subcommand(
      "record", "Run the inference loaders on recording tensors for every rank of a replica and write the plans");
  add_layout_options(record, &rec->setup);
  record->add_option("--out,-o", rec->out, "Output HDF5 file")->required();
  record->callback([rec] { run_plan_record(*rec); });

  auto show_opts = std::make_shared<PlanShowOptions>();
  auto* show = plan->add_subcommand("show", "Print a plan file's ranks, or one rank's entries (--rank)");
  show->add_option("file", show_opts->file, "Plan file written by `plan record`")->required();
  show->add_option("--model,-m", show_opts->model, "Model (default: the bundled model named in the file)");
  show->add_option("--rank", show_opts->rank, "Print this rank's entries (rank within a replica)")->check(CLI::NonNegativeNumber);
  show->add_flag("--json", show_opts->json, "JSON instead of a table");
  show->callback([show_opts] { run_plan_show(*show_opts); });
}

}  // namespace shardsync
