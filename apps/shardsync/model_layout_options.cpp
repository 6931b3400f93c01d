#include "model_layout_options.hpp"

#include <map>

#include "common/error.hpp"
#include "model/bundled.hpp"
#include "plan/loaders.hpp"
#include "plan/quant.hpp"

namespace shardsync {

void add_model_option(CLI::App* app, std::string* model, const std::string& default_model) {
  *model = default_model;
  app->add_option("--model,-m", *model,
                  "Bundled model name or path to a HuggingFace config.json (architectures: " +
                      supported_architectures() + "). Bundled: " + bundled_names_list("models"))
      ->capture_default_str();
}

void add_layout_options(CLI::App* app, ModelLayoutOptions* opts) {
  app->add_option("--model,-m", opts->model,
                  "Bundled model name or path to a HuggingFace config.json (default: the layout's "
                  "model; architectures: " + supported_architectures() + "). Bundled: " + bundled_names_list("models"));
  app->add_option("--layout,-l", opts->layout,
                  "Bundled layout name or path to a layout JSON (model, trainer, inference); "
                  "explicit flags override it. Bundled: " + bundled_names_list("layouts"));
  app->add_option("--trainer,-t", opts->trainer,
                  "Trainer layout: Megatron, e.g. tp4,pp2,ep8,etp1 (dp is derived when omitted; "
                  "layers=a/b/.. gives an uneven PP split), or FSDP2, e.g. fsdp8 (every parameter chunked on "
                  "dim 0 over 8 ranks, fused experts whole per rank; dp<N>: HSDP replicas)");
  app->add_option("--inference,-i", opts->inference,
                  "vLLM inference layout per replica, e.g. dp16,ep16 or tp32,ep32 or tp2 "
                  "(ep<N> enables expert parallelism with N = dp*tp)");
  app->add_option("--replicas,-r", opts->replicas, "Number of inference replicas")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--quant", opts->quant,
                  "Inference weights: none (the checkpoint's dtype) or fp8-block128 (float8_e4m3fn linear "
                  "weights with an fp32 weight_scale_inv per 128 x 128 block, as vLLM's block-FP8 methods; "
                  "docs/fp8.md says which weights)")
      ->check(CLI::IsMember({"none", "fp8-block128"}));
  app->add_flag("--shared-experts-tp", opts->shared_experts_tp,
               "Split DeepSeek-class shared experts over TP even under sequence-parallel MoE (EP with tp > 1 and "
               "dp > 1), as vLLM before 0.11.0 did; by default plans follow vLLM " + std::string(kVllmVersion) +
                   ", which keeps them whole on every rank there (also \"shared_experts_tp\": true in a layout)");
  app->add_option("--world-size", opts->world_size,
                  "Check that trainer + inference ranks add up to this many (e.g. a Slurm allocation)")
      ->check(CLI::Range(1, 1 << 24));
}

ResolvedSetup resolve_setup(const ModelLayoutOptions& opts) {
  ResolvedSetup s;
  TrainerLayout trainer;
  InferenceLayout inference;
  int file_world = 0;
  std::string file_source;
  std::string model = opts.model;
  std::string layout = opts.layout;
  if (layout.empty() && opts.trainer.empty() && opts.inference.empty()) layout = kDefaultLayout;
  if (!layout.empty()) {
    LayoutFile f = load_layout(layout);
    s.layout_name = f.name;
    file_world = f.world_size;
    file_source = f.source;
    trainer = f.trainer;
    inference = f.inference;
    if (!f.model.empty() && opts.model.empty()) model = f.model;
  }
  if (model.empty()) throw InputError("--model", "(missing)", "give --model NAME|PATH or a --layout naming a model");
  if (!opts.trainer.empty()) trainer = parse_trainer_spec(opts.trainer);
  if (!opts.inference.empty()) {
    int file_replicas = inference.replicas;
    Quant file_quant = inference.quant;
    bool file_shared_tp = inference.shared_experts_tp;
    inference = parse_inference_spec(opts.inference);
    if (inference.replicas == 0) inference.replicas = file_replicas;  // not given in the spec
    inference.quant = file_quant;  // the spec has no quant; --quant below overrides the file's
    inference.shared_experts_tp = file_shared_tp;
  }
  if (opts.replicas > 0) inference.replicas = opts.replicas;
  if (opts.shared_experts_tp) inference.shared_experts_tp = true;
  if (!opts.quant.empty() && !parse_quant(opts.quant, &inference.quant))
    throw InputError("--quant", opts.quant, "expected none or fp8-block128");
  s.model = std::make_unique<ModelSpec>(load_model(model));
  s.trainer = std::make_unique<TrainerPlacement>(*s.model, trainer);
  s.inference = std::make_unique<InferencePlacement>(*s.model, inference);
  check_quant_target(*s.model, *s.inference);
  int need = s.trainer->world_size() + s.inference->world_size();
  auto check_world = [&](int world, const std::string& source, const std::string& field) {
    if (world > 0 && world != need)
      throw InputError(source, field,
                       std::to_string(world) + " ranks given, but the layouts need " + std::to_string(need) +
                           " ranks (trainer " + trainer.describe() + " = " + std::to_string(s.trainer->world_size()) +
                           ", inference " + inference.describe() + " = " + std::to_string(s.inference->world_size()) + ")");
  };
  if (opts.world_size == 0) check_world(file_world, file_source, "field 'world_size'");
  check_world(opts.world_size, "--world-size", std::to_string(opts.world_size));
  return s;
}

void add_update_options(CLI::App* app, UpdateModel* updates) {
  app->add_option("--update-density", updates->density,
                  "Fraction of each tensor's elements (or rows, --update-pattern rows) whose synthetic "
                  "value changes from one weights version to the next (each once every 1/D versions, at "
                  "its own random phase); the rest keep the value of the version at which they last "
                  "changed, and verification checks every element against that. 1: every element "
                  "changes every version")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app->add_option("--update-pattern", updates->clustered,
                  "How --update-density picks what changes: uniform (elements, independently) or rows "
                  "(every element of a tensor's row together; a 1-D tensor is one row)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"uniform", false}, {"rows", true}}))
      ->option_text("uniform|rows (default: uniform)");
}

void add_engine_option(CLI::App* app, std::vector<EngineKind>* engines, const std::vector<EngineKind>& defaults) {
  *engines = defaults;
  std::string help = "Engines to run, in order (comma list):";
  for (const EngineSpec& e : engine_table()) help += std::string("\n  ") + e.name + ": " + e.summary;
  if (defaults.empty()) help += "\n(default: every row the cluster file's profile has costs for)";
  std::string def;
  for (EngineKind k : defaults) def += (def.empty() ? "" : ",") + std::string(engine_name(k));
  // A checked transform by name (CLI11's CheckedTransformer would also take the rows'
  // numbers, and its message lists them): a name becomes its kind, anything else is refused.
  CLI::Validator by_name(
      [](std::string& s) -> std::string {
        const EngineSpec* e = find_engine(s);
        if (!e) return "unknown engine '" + s + "': expected one of " + engine_list();
        s = std::to_string(int(e->kind));
        return "";
      },
      "ENGINE");
  app->add_option("--engine,-e", *engines, help)->delimiter(',')->transform(by_name)->default_str(def);
}

}  // namespace shardsync
