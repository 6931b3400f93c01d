// Layouts from flags ("tp4,pp2,ep8,etp1") and from configs/layouts/*.json.
#pragma once

#include <string>
#include <vector>

#include "layout/inference.hpp"
#include "layout/trainer.hpp"

namespace shardsync {

// "tp4,pp2,ep8,etp1[,dp2][,layers=24/24/23/23]", or FSDP2: "fsdp8[,dp2][,pp2]"
TrainerLayout parse_trainer_spec(const std::string& spec, const std::string& source = "--trainer");
// "dp16,ep16" / "tp32,ep32" / "tp2,dp2" [,pp2][,replicas4]; ep<N> enables expert parallelism
// and N must equal dp*tp. replicas is 0 when the spec does not give it.
InferenceLayout parse_inference_spec(const std::string& spec, const std::string& source = "--inference");

struct LayoutFile {
  std::string name;
  std::string source;
  std::string model;        // default model for this layout ("" if none)
  std::string description;
  int world_size = 0;       // optional: total ranks the layouts must add up to (0: unchecked)
  TrainerLayout trainer;
  InferenceLayout inference;
};

// By bundled name ("qwen3-235b-published") or path to a layout JSON.
LayoutFile load_layout(const std::string& name_or_path);
LayoutFile parse_layout_json(const std::string& text, const std::string& source, const std::string& name);
// Bundled layouts: model/bundled.hpp, kind "layouts".

}  // namespace shardsync
