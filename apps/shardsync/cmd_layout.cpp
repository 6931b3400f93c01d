// shardsync layout show|list: which trainer rank holds which bytes, which inference rank
// needs which bytes.
#include <algorithm>
#include <iostream>

#include "commands.hpp"
#include "common/table.hpp"
#include "model/bundled.hpp"
#include "model_layout_options.hpp"

namespace shardsync {

namespace {

struct LayoutShowOptions {
  ModelLayoutOptions setup;
  std::string role = "all";
};

std::string stage_split(const std::vector<int64_t>& counts) {
  std::string s;
  for (size_t i = 0; i < counts.size(); ++i) s += (i ? "/" : "") + std::to_string(counts[i]);
  return s;
}

void run_layout_show(const LayoutShowOptions& o) {
  ResolvedSetup s = resolve_setup(o.setup);
  const ModelSpec& m = *s.model;
  const TrainerPlacement& tr = *s.trainer;
  const InferencePlacement& inf = *s.inference;
  std::vector<int64_t> tr_split, inf_split;
  for (int p = 0; p < tr.pp(); ++p) tr_split.push_back(tr.stage_num_layers(p));
  for (int p = 0; p < inf.layout().pp; ++p) inf_split.push_back(inf.stage_num_layers(p));

  Table t({{"rank", ""}, {"role", "", true}, {"replica", ""}, {"tp", ""}, {"pp", ""}, {"dp", ""},
           {"ep", ""}, {"experts", "", true}, {"tensors", ""}, {"bytes", "B"}, {"size", "MB"}});
  t.add_title("model " + m.name() + ": " + fmt_int(int64_t(m.params().size())) + " tensors, " +
              fmt_int(m.total_bytes()) + " bytes" + (s.layout_name.empty() ? "" : ", layout " + s.layout_name));
  t.add_title("trainer   " + tr.layout().describe() + ": " + std::to_string(tr.world_size()) +
              " ranks (edp " + std::to_string(tr.edp()) + "), PP layers " + stage_split(tr_split));
  t.add_title("inference " + inf.layout().describe() + ": " + std::to_string(inf.world_size()) +
              " ranks, " + std::to_string(inf.layout().ranks_per_replica()) + " per replica, PP layers " +
              stage_split(inf_split) + (inf.ep() ? ", EP " : ", MoE-TP ") + std::to_string(inf.moe_size()));
  t.add_title("trainer rows: bytes held (TP/ETP slices, DP replicas included); inference rows: bytes needed");

  int64_t tr_min = INT64_MAX, tr_max = 0, inf_min = INT64_MAX, inf_max = 0, inf_total = 0;
  if (o.role != "inference") {
    auto h = tr.holdings();
    for (int r = 0; r < tr.world_size(); ++r) {
      std::string experts = "-";
      if (m.config().is_moe()) {
        int per = tr.experts_per_ep_rank(), e = tr.ep_rank_of(r);
        experts = std::to_string(e * per) + ".." + std::to_string(e * per + per - 1);
      }
      t.add_row({fmt_int(r), "trainer", "-", fmt_int(tr.tp_rank_of(r)), fmt_int(tr.pp_rank_of(r)),
                 fmt_int(tr.dp_rank_of(r)), fmt_int(tr.ep_rank_of(r)), experts, fmt_int(h.tensors[size_t(r)]),
                 fmt_int(h.bytes[size_t(r)]), fmt_fixed(double(h.bytes[size_t(r)]) / 1e6, 3)});
      tr_min = std::min(tr_min, h.bytes[size_t(r)]);
      tr_max = std::max(tr_max, h.bytes[size_t(r)]);
    }
  }
  if (o.role != "trainer") {
    for (int r = 0; r < inf.world_size(); ++r) {
      InferenceCoord c = inf.coord(r);
      std::string experts = "-";
      if (m.config().is_moe()) {
        if (inf.ep()) {
          int64_t first = inf.local_expert_first(c.moe_rank), n = inf.local_expert_count(c.moe_rank);
          experts = std::to_string(first) + ".." + std::to_string(first + n - 1);
        } else {
          experts = "all/" + std::to_string(inf.moe_size());
        }
      }
      int64_t bytes = inf.needed_bytes(r);
      t.add_row({fmt_int(tr.world_size() + r), "inference", fmt_int(c.replica), fmt_int(c.tp_rank),
                 fmt_int(c.pp_rank), fmt_int(c.dp_rank), inf.ep() ? fmt_int(c.moe_rank) : "-", experts,
                 fmt_int(inf.needed_tensors(r)), fmt_int(bytes), fmt_fixed(double(bytes) / 1e6, 3)});
      inf_min = std::min(inf_min, bytes);
      inf_max = std::max(inf_max, bytes);
      inf_total += bytes;
    }
  }
  t.print(std::cout);
  if (o.role != "inference")
    std::cout << "# trainer held per rank: min " << fmt_human_bytes(tr_min) << ", max " << fmt_human_bytes(tr_max) << "\n";
  if (o.role != "trainer")
    std::cout << "# inference needed per rank: min " << fmt_human_bytes(inf_min) << ", max " << fmt_human_bytes(inf_max)
              << "; all replicas " << fmt_human_bytes(inf_total) << " (model " << fmt_human_bytes(m.total_bytes())
              << " x " << inf.layout().replicas << " replicas, plus tensors replicated within a replica)\n";
}

}  // namespace

void setup_layout_command(CLI::App& app) {
  auto* layout = app.add_subcommand("layout", "Inspect trainer and inference layouts");
  layout->require_subcommand(1);
  auto opts = std::make_shared<LayoutShowOptions>();
  auto* show = layout->add_subcommand(
      "show", "Per-rank held (trainer) and needed (inference) tensors and bytes for a model and layouts");
  add_layout_options(show, &opts->setup);
  show->add_option("--role", opts->role, "Which ranks to list")
      ->check(CLI::IsMember({"all", "trainer", "inference"}))
      ->capture_default_str();
  show->callback([opts] { run_layout_show(*opts); });

  auto* list = layout->add_subcommand("list", "List the bundled layouts");
  list->callback([] {
    Table t({{"layout", "", true}, {"model", "", true}, {"trainer", "", true}, {"inference", "", true}});
    for (const auto& n : bundled_names("layouts")) {
      LayoutFile f = load_layout(n);
      t.add_row({n, f.model, f.trainer.describe(), f.inference.describe()});
    }
    t.print(std::cout);
  });
}

}  // namespace shardsync
