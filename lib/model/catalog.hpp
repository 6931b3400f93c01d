// The model catalog: the HuggingFace parameter list of a model (what a trainer's
// WeightSource.metadata() reports), generated from its config.json.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/config.hpp"
#include "model/dtype.hpp"

namespace shardsync {

// What a tensor is. Trainer layouts and loaders decide placement from this, never from
// string matching on names at sync time.
enum class TensorKind : uint8_t {
  kEmbedding,
  kLmHead,
  kNorm,          // any RMSNorm weight (layer norms, final norm, q/k norm, MLA norms)
  kQProj, kKProj, kVProj,  // (bias tensors carry is_bias)
  kOProj,
  kGateProj, kUpProj, kDownProj,  // dense MLP
  kRouter, kRouterBias,
  kExpertGate, kExpertUp, kExpertDown,  // per-expert (Qwen3-MoE, DeepSeek)
  kSharedGate, kSharedUp, kSharedDown,
  kMlaQA, kMlaQB, kMlaKvA, kMlaKvB,
  kMlaQ,  // MLA q_proj straight from the hidden state (q_lora_rank null): column-parallel
  kFusedExpertsGateUp, kFusedExpertsDown,  // Llama-4, gpt-oss [E, in, out] (gpt-oss: and [E, out] biases)
  kSinks,  // gpt-oss attention sinks, one per head: split over TP with the q heads
};
const char* tensor_kind_name(TensorKind k);

struct ParamMeta {
  std::string name;  // HF name
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  TensorKind kind = TensorKind::kNorm;
  bool is_bias = false;
  int32_t layer = -1;   // -1 for embedding / final norm / lm_head
  int32_t expert = -1;  // global expert id for per-expert tensors
  int32_t group = 0;    // weight group index

  int64_t numel() const;
  int64_t bytes() const { return numel() * dtype_bytes(dtype); }
};

// The unit of gather / transfer / release: one transformer block; the embedding and the
// head (final norm + lm_head) are groups of their own.
struct WeightGroup {
  std::string name;  // "embed", "layer.17", "head"
  int32_t layer = -1;
  int32_t first_param = 0;
  int32_t num_params = 0;
  int64_t bytes = 0;
};

class ModelSpec {
 public:
  ModelSpec(ModelConfig config, std::vector<ParamMeta> params);

  const ModelConfig& config() const { return config_; }
  const std::string& name() const { return config_.name; }
  const std::vector<ParamMeta>& params() const { return params_; }
  const std::vector<WeightGroup>& groups() const { return groups_; }
  const ParamMeta& param(int32_t idx) const { return params_[size_t(idx)]; }
  // Index of an HF tensor name, or -1.
  int32_t find(const std::string& hf_name) const;
  int64_t num_params_total() const { return num_elements_; }
  int64_t total_bytes() const { return total_bytes_; }
  int32_t group_of_layer(int64_t layer) const { return int32_t(layer) + 1; }
  int32_t embed_group() const { return 0; }
  int32_t head_group() const { return int32_t(groups_.size()) - 1; }

 private:
  ModelConfig config_;
  std::vector<ParamMeta> params_;
  std::vector<WeightGroup> groups_;
  std::unordered_map<std::string, int32_t> index_;
  int64_t num_elements_ = 0;
  int64_t total_bytes_ = 0;
};

// Builds the parameter list for a parsed config. Throws InputError (naming the config
// file) on sizes that overflow or make no sense.
ModelSpec build_model(const ModelConfig& config);

// Loads a model by bundled name ("qwen3-235b-a22b") or by path to a config.json.
ModelSpec load_model(const std::string& name_or_path);
// Bundled models (embedded at build time): model/bundled.hpp, kind "models".

}  // namespace shardsync
