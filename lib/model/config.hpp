// A model's architecture facts, read from a HuggingFace config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/dtype.hpp"

namespace shardsync {

enum class Arch : uint8_t {
  kLlama,       // LlamaForCausalLM: dense, GQA
  kQwen3,       // Qwen3ForCausalLM: dense, GQA, per-head q/k norm
  kQwen3Moe,    // Qwen3MoeForCausalLM: Qwen3 attention + per-expert MoE
  kDeepseekV3,  // DeepseekV3ForCausalLM (DeepSeek-V3, Kimi-K2): MLA + MoE with shared experts
  kLlama4,      // Llama4ForConditionalGeneration (text part): fused experts + shared expert
};

const char* arch_name(Arch a);
// The HF "architectures" strings we accept, for error messages.
std::string supported_architectures();

struct ModelConfig {
  std::string name;    // catalog name, e.g. "qwen3-235b-a22b"
  std::string source;  // file the config came from (or "bundled:<name>")
  std::string architecture;  // verbatim HF architectures[0]
  std::string model_type;
  Arch arch = Arch::kLlama;
  DType dtype = DType::kBF16;

  int64_t hidden = 0;
  int64_t num_layers = 0;
  int64_t vocab = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;  // dense MLP width
  bool tie_embeddings = false;
  bool attention_bias = false;
  bool qk_norm = false;

  // MoE
  int64_t num_experts = 0;
  int64_t moe_intermediate = 0;
  int64_t num_shared_experts = 0;      // DeepSeek: n_shared_experts; Llama-4: 1
  int64_t shared_intermediate = 0;     // width of the shared expert MLP
  int64_t first_k_dense = 0;           // DeepSeek: first_k_dense_replace
  int64_t sparse_step = 1;             // Qwen3-MoE decoder_sparse_step / Llama-4 interleave step
  std::vector<int64_t> mlp_only_layers;  // Qwen3-MoE
  bool router_bias = false;            // DeepSeek noaux_tc e_score_correction_bias (fp32)

  // MLA (DeepSeek-V3 / Kimi)
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;

  // Name prefixes: "model." or "language_model.model." (Llama-4 checkpoints).
  std::string layer_prefix = "model.layers.";
  std::string model_prefix = "model.";
  std::string lm_head_name = "lm_head.weight";

  bool is_moe() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const;
  int64_t kv_proj_rows() const { return num_kv_heads * head_dim; }
  int64_t q_proj_rows() const { return num_heads * head_dim; }
};

// Parses a config.json document (already loaded); `source` names the file in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source,
                               const std::string& name);

}  // namespace shardsync
