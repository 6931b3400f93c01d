// Inference layout in vLLM's terms: replicas, each a grid of DP x PP x TP ranks, with
// expert parallelism (EP = DP*TP, linear placement) or MoE-TP flattened over DP.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/trainer.hpp"
#include "model/catalog.hpp"

namespace shardsync {

// What the inference engine's linear weights are (issue 20): the checkpoint's dtype, or block
// FP8 (float8_e4m3fn with an fp32 weight_scale_inv per 128 x 128 block, vLLM's block-FP8
// linear and MoE methods; which weights and in what shapes: plan/quant.hpp).
enum class Quant : uint8_t { kNone, kFp8Block128 };
const char* quant_name(Quant q);  // "none", "fp8-block128"
// "none" / "fp8-block128"; false otherwise.
bool parse_quant(const std::string& s, Quant* out);

struct InferenceLayout {
  int replicas = 1;
  int tp = 1, dp = 1, pp = 1;
  bool enable_ep = false;
  Quant quant = Quant::kNone;
  // vLLM >= 0.11.0 gives every rank the whole shared experts of DeepSeek-class models under
  // its sequence-parallel MoE (EP, tp > 1, dp > 1, the default all2all backend); true keeps
  // the older rule (split over the attention TP group), as vLLM 0.10 did.
  bool shared_experts_tp = false;
  std::string source = "--inference";

  int ranks_per_replica() const { return tp * dp * pp; }
  int world_size() const { return replicas * ranks_per_replica(); }
  std::string describe() const;  // "dp16,ep16" style, then " fp8-block128", then replicas
};

// Position of one inference rank.
struct InferenceCoord {
  int replica = 0;
  int local = 0;   // rank within the replica
  int tp_rank = 0, pp_rank = 0, dp_rank = 0;
  int moe_rank = 0;   // tp_rank' = dp*TP + tp (vLLM FusedMoEParallelConfig)
};

class InferencePlacement {
 public:
  InferencePlacement(const ModelSpec& model, InferenceLayout layout);

  const InferenceLayout& layout() const { return layout_; }
  const ModelSpec& model() const { return *model_; }
  int world_size() const { return layout_.world_size(); }
  InferenceCoord coord(int rank) const;  // rank within the inference world
  int moe_size() const { return layout_.dp * layout_.tp; }  // EP size, or MoE-TP size
  bool ep() const { return layout_.enable_ep; }

  // vLLM get_pp_indices: [first, first + count) of a PP stage.
  int64_t stage_first_layer(int stage) const { return stage_first_[size_t(stage)]; }
  int64_t stage_num_layers(int stage) const { return stage_layers_[size_t(stage)]; }
  int stage_of_layer(int64_t layer) const { return stage_of_layer_[size_t(layer)]; }
  bool holds_param(int rank, const ParamMeta& p) const;

  // vLLM determine_expert_map, linear placement: [first, first + count) of an EP rank.
  int64_t local_expert_first(int moe_rank) const;
  int64_t local_expert_count(int moe_rank) const;
  // expert_map[global] for this MoE rank: local index or -1.
  int64_t expert_map(int moe_rank, int64_t expert) const;

  // vLLM QKVParallelLinear: KV heads per TP rank (1 when replicated) and the first KV head
  // a TP rank keeps (t // (T / nkv) when KV heads are fewer than TP ranks).
  int64_t kv_heads_per_rank() const;
  int64_t kv_head_first(int tp_rank) const;

  // vLLM VocabParallelEmbedding: padded vocab (multiple of 64) and a rank's real rows.
  int64_t padded_vocab() const;

  // vLLM ParallelConfig.use_sequence_parallel_moe for a DeepSeek-class model: its shared
  // experts are then whole on every rank (disable_tp), not split over TP.
  bool shared_experts_whole() const;
  int64_t vocab_rows_per_rank() const { return padded_vocab() / layout_.tp; }

  // Bytes of an HF tensor that a rank keeps (layout rules; the recorded plan must agree).
  int64_t needed_bytes(int rank, int32_t param_idx) const;
  int64_t needed_bytes(int rank) const;
  int64_t needed_tensors(int rank) const;

 private:
  void validate();
  const ModelSpec* model_;
  InferenceLayout layout_;
  std::vector<int64_t> stage_first_, stage_layers_;
  std::vector<int> stage_of_layer_;
};

}  // namespace shardsync
