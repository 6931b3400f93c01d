// The inference engine's parameters on one rank (vLLM's modules after create_weights):
// names, shapes and the weight_loader kind that fills each from HF tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/inference.hpp"
#include "model/catalog.hpp"

namespace shardsync {

// Which vLLM weight_loader a parameter uses.
enum class LoaderKind : uint8_t {
  kReplicated,    // default_weight_loader / ReplicatedLinear / norms
  kColumn,        // ColumnParallelLinear
  kRow,           // RowParallelLinear (weight only; its bias is replicated)
  kQKV,           // QKVParallelLinear
  kMergedColumn,  // MergedColumnParallelLinear (gate_up, fused_qkv_a with disable_tp)
  kVocab,         // VocabParallelEmbedding / ParallelLMHead
  kFusedMoE,      // FusedMoE w13 / w2
};
const char* loader_kind_name(LoaderKind k);

// Parameter slots of a layer (or of the model, for layer -1).
enum class Slot : uint8_t {
  kEmbed, kFinalNorm, kLmHead,
  kInputNorm, kPostNorm, kQKV, kQKVBias, kO, kOBias, kQNorm, kKNorm,
  kGateUp, kDown, kRouter, kRouterBias, kW13, kW2, kSharedGateUp, kSharedDown,
  kFusedQkvA, kQANorm, kQB, kKvANorm, kKvB,
  kQ, kKvA,                 // MLA without q_lora: q_proj (column), kv_a_proj_with_mqa (replicated)
  kGateUpBias, kDownBias,   // Llama mlp_bias
  kSinks, kW13Bias, kW2Bias,  // gpt-oss: attention sinks, FusedMoE biases
  kCount
};

struct EngineParam {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  LoaderKind loader = LoaderKind::kReplicated;
  Slot slot = Slot::kEmbed;
  int32_t layer = -1;
  int32_t group = 0;                  // weight group (same numbering as the model's)
  std::vector<int64_t> output_sizes;  // merged column: global sizes of the fused parts
  bool disable_tp = false;            // merged column replicated (DeepSeek fused_qkv_a)
  int64_t numel() const;
  int64_t bytes() const { return numel() * dtype_bytes(dtype); }
};

// One rank's parameters with lookup by (layer, slot).
class EngineParams {
 public:
  EngineParams(const ModelSpec& model, const InferencePlacement& inf, int rank);
  const std::vector<EngineParam>& params() const { return params_; }
  int32_t find(int32_t layer, Slot slot) const;  // -1 when this rank has no such parameter
  int32_t find(const std::string& name) const;
  int64_t total_bytes() const;

 private:
  void add(int32_t layer, Slot slot, std::string name, std::vector<int64_t> shape, LoaderKind loader,
           DType dtype, std::vector<int64_t> output_sizes = {}, bool disable_tp = false);
  std::vector<EngineParam> params_;
  std::vector<int32_t> index_;  // (layer + 1) * kCount + slot
  int32_t num_layers_ = 0;
};

}  // namespace shardsync
