// Our own loaders reproducing vLLM's weight loading for every catalog architecture,
// written once against the tensor interface shared by RealTensor (reference: real bytes)
// and RecordingTensor (dry run: the plan). Facts: shared/reference/models-and-loaders.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/inference.hpp"
#include "model/catalog.hpp"
#include "plan/engine_params.hpp"

namespace shardsync {

// The vLLM release whose loaders the plans follow; recorded in plan files, printed by `plan
// show`. Its one rule that older releases lack: DeepSeek-class shared experts whole on every
// rank under sequence-parallel MoE (InferencePlacement::shared_experts_whole).
inline constexpr const char* kVllmVersion = "0.11.0";
// What a plan of this model and layout follows: "vLLM 0.11.0", or with the older shared-expert
// rule when the layout asks for it. One deviation, named in the text: bf16 gpt-oss under EP or
// DP > 1, which 0.11.0's loader cannot load (expert bounds swapped, MoE-TP rank not flattened
// over DP), follows 0.12.0's loader, where both are fixed.
std::string vllm_rules(const ModelConfig& c, const InferenceLayout& l);

// Where a loader runs: one inference rank.
struct LoaderRank {
  const ModelSpec* model = nullptr;
  const InferencePlacement* inference = nullptr;
  int rank = 0;
  InferenceCoord coord;
  int64_t tp_size = 1;    // attention / dense TP
  int64_t moe_tp_size = 1, moe_tp_rank = 0;  // FusedMoE tensor parallel (1 under EP)
  LoaderRank(const ModelSpec& m, const InferencePlacement& inf, int r);
  const char* loader_name() const;  // "qwen3_moe", ... for error messages
};

// Destinations of one rank: one tensor (view of an engine parameter) per EngineParam.
template <class T>
struct ParamStore {
  const EngineParams* params = nullptr;
  std::vector<T> tensors;
  T* find(int32_t layer, Slot slot) {
    int32_t i = params->find(layer, slot);
    return i < 0 ? nullptr : &tensors[size_t(i)];
  }
};

// Loads one HF tensor (full, as the trainer's gather yields it) into this rank's params.
// Tensors of layers this rank does not hold (PP) and non-local experts load nothing.
template <class T>
void load_weight(const LoaderRank& r, int32_t hf_idx, const T& w, ParamStore<T>& store);

// Whether load_weight can copy anything for this HF tensor on this rank: a cheap test the
// recorder uses to skip, e.g., the 370 non-local experts of each Kimi-K2 layer.
bool may_load(const LoaderRank& r, const ParamMeta& p);

}  // namespace shardsync
