// Options shared by subcommands that take a model and layouts: --model, --layout,
// --trainer, --inference, --replicas. Explicit flags override the layout file.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/engine_table.hpp"
#include "engine/update_model.hpp"
#include "layout/inference.hpp"
#include "layout/parse.hpp"
#include "layout/trainer.hpp"
#include "model/catalog.hpp"

namespace shardsync {

struct ModelLayoutOptions {
  std::string model;
  std::string layout;
  std::string trainer;
  std::string inference;
  int replicas = 0;  // 0: from the layout file or 1
  std::string quant;  // "": from the layout file, else none / fp8-block128
  bool shared_experts_tp = false;  // the pre-0.11 vLLM rule for DeepSeek-class shared experts
  int world_size = 0;  // 0: unchecked; else trainer + inference ranks must equal it
};

void add_model_option(CLI::App* app, std::string* model, const std::string& default_model);
// Without --layout, --trainer and --inference, the bundled kDefaultLayout is used.
inline constexpr const char* kDefaultLayout = "tiny-moe-local";
void add_layout_options(CLI::App* app, ModelLayoutOptions* opts);

// --engine/-e: a comma list of engine table rows, parsed into kinds (choices and their
// one-line summaries come from the table).
void add_engine_option(CLI::App* app, std::vector<EngineKind>* engines, const std::vector<EngineKind>& defaults);

// --update-density and --update-pattern: how the synthetic weights change between versions
// (sync and bench run it; simulate models delta sync's records under it).
void add_update_options(CLI::App* app, UpdateModel* updates);

// The model and both placements, resolved and validated.
struct ResolvedSetup {
  std::unique_ptr<ModelSpec> model;
  std::unique_ptr<TrainerPlacement> trainer;
  std::unique_ptr<InferencePlacement> inference;
  std::string layout_name;  // "" when given by flags only
};
ResolvedSetup resolve_setup(const ModelLayoutOptions& opts);

}  // namespace shardsync
