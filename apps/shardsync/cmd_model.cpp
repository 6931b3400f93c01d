// shardsync model show|list: the HF parameter catalog of a model.
#include <algorithm>
#include <iostream>

#include "commands.hpp"
#include "common/table.hpp"
#include "model/bundled.hpp"
#include "model/catalog.hpp"
#include "model_layout_options.hpp"

namespace shardsync {

namespace {

struct ModelShowOptions {
  std::string model;
  bool groups = false;
  bool tensors = false;
};

void run_model_show(const ModelShowOptions& o) {
  ModelSpec m = load_model(o.model);
  const ModelConfig& c = m.config();
  const auto& groups = m.groups();
  const ParamMeta* largest = &m.params()[0];
  for (const auto& p : m.params())
    if (p.bytes() > largest->bytes()) largest = &p;
  const WeightGroup* big = &groups[0];
  int64_t min_layer = INT64_MAX, max_layer = 0, sum_layer = 0;
  for (const auto& g : groups) {
    if (g.bytes > big->bytes) big = &g;
    if (g.layer >= 0) {
      min_layer = std::min(min_layer, g.bytes);
      max_layer = std::max(max_layer, g.bytes);
      sum_layer += g.bytes;
    }
  }
  int64_t num_moe = 0;
  for (int64_t l = 0; l < c.num_layers; ++l) num_moe += c.is_moe_layer(l);

  Table t({{"quantity", "", true}, {"value", ""}, {"unit", "", true}, {"detail", "", true}});
  t.add_title("model " + m.name() + " (" + c.architecture + ", " + arch_name(c.arch) + ") from " + c.source);
  t.add_title("hidden " + std::to_string(c.hidden) + ", heads " + std::to_string(c.num_heads) + "/" +
              std::to_string(c.num_kv_heads) + " x " + std::to_string(c.head_dim) + ", vocab " +
              std::to_string(c.vocab) + (c.tie_embeddings ? " (tied)" : "") +
              (c.is_moe() ? ", experts " + std::to_string(c.num_experts) + " x " +
                                std::to_string(c.moe_intermediate) +
                                (c.num_shared_experts ? " + " + std::to_string(c.num_shared_experts) + " shared" : "")
                          : ""));
  if (c.num_mtp_layers > 0)
    t.add_title("num_nextn_predict_layers " + std::to_string(c.num_mtp_layers) +
                ": the MTP layers are not listed (vLLM's main model skips them)");
  if (!c.checkpoint_quant.empty())
    t.add_title("quantization_config " + c.checkpoint_quant +
                ": the checkpoint's storage only; weights are listed, counted and moved as " + dtype_name(c.dtype) +
                ", the trainer's values (experts as unpacked values)");
  if (c.router_fp32) t.add_title("router gate.weight held in fp32, as vLLM's " + c.architecture + " holds it");
  t.add_row({"layers", fmt_int(c.num_layers), "", std::to_string(num_moe) + " MoE"});
  t.add_row({"tensors", fmt_int(int64_t(m.params().size())), "", "HF tensors"});
  t.add_row({"parameters", fmt_int(m.num_params_total()), "", fmt_grouped(m.num_params_total())});
  t.add_row({"bytes", fmt_int(m.total_bytes()), "B", fmt_human_bytes(m.total_bytes())});
  t.add_row({"weight_groups", fmt_int(int64_t(groups.size())), "", "embed + layers + head"});
  t.add_row({"group_bytes_min", fmt_int(min_layer), "B", "smallest transformer block"});
  t.add_row({"group_bytes_avg", fmt_int(sum_layer / std::max<int64_t>(1, c.num_layers)), "B", "mean transformer block"});
  t.add_row({"group_bytes_max", fmt_int(max_layer), "B", "largest transformer block"});
  t.add_row({"largest_tensor", fmt_int(largest->bytes()), "B", largest->name + " " + fmt_shape(largest->shape)});
  t.add_row({"largest_group", fmt_int(big->bytes), "B", big->name + " (" + fmt_human_bytes(big->bytes) + ")"});
  t.print(std::cout);

  if (o.groups) {
    std::cout << "\n";
    Table g({{"group", "", true}, {"tensors", ""}, {"params", ""}, {"bytes", "B"}});
    for (const auto& grp : groups) {
      int64_t n = 0;
      for (int32_t i = grp.first_param; i < grp.first_param + grp.num_params; ++i) n += m.param(i).numel();
      g.add_row({grp.name, fmt_int(grp.num_params), fmt_int(n), fmt_int(grp.bytes)});
    }
    g.print(std::cout);
  }
  if (o.tensors) {
    std::cout << "\n";
    Table g({{"tensor", "", true}, {"dtype", "", true}, {"shape", "", true}, {"kind", "", true},
             {"group", ""}, {"expert", ""}, {"bytes", "B"}});
    for (const auto& p : m.params())
      g.add_row({p.name, dtype_name(p.dtype), fmt_shape(p.shape), tensor_kind_name(p.kind), fmt_int(p.group),
                 fmt_int(p.expert), fmt_int(p.bytes())});
    g.print(std::cout);
  }
}

}  // namespace

void setup_model_command(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Inspect the model catalog (HF parameter lists)");
  model->require_subcommand(1);

  auto opts = std::make_shared<ModelShowOptions>();
  auto* show = model->add_subcommand("show", "Print a model's layers, tensors, parameters, bytes and weight groups");
  add_model_option(show, &opts->model, "tiny-qwen3-moe");
  show->add_flag("--groups", opts->groups, "Also print one row per weight group");
  show->add_flag("--tensors", opts->tensors, "Also print one row per HF tensor");
  show->callback([opts] { run_model_show(*opts); });

  auto* list = model->add_subcommand("list", "List the bundled models");
  list->callback([] {
    Table t({{"model", "", true}, {"architecture", "", true}, {"layers", ""}, {"parameters", ""}, {"bytes", "B"}});
    for (const auto& n : bundled_names("models")) {
      ModelSpec m = load_model(n);
      t.add_row({n, m.config().architecture, fmt_int(m.config().num_layers), fmt_int(m.num_params_total()),
                 fmt_int(m.total_bytes())});
    }
    t.print(std::cout);
  });
}

}  // namespace shardsync
