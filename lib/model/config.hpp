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
  kQwen2,       // Qwen2ForCausalLM: dense, GQA, biases on q/k/v (none on o_proj)
  kMistral,     // MistralForCausalLM: Llama's tensors (sliding-window fields change none)
  kMixtral,     // MixtralForCausalLM: per-expert w1/w2/w3 in block_sparse_moe, no shared expert
  kDeepseekV2,  // DeepseekV2ForCausalLM: MLA (q_proj direct when q_lora_rank is null) + MoE
  kGlm4Moe,     // Glm4MoeForCausalLM: GQA with q/k/v biases + DeepSeek-style MoE
  kGptOss,      // GptOssForCausalLM: GQA with biases and sinks, fused interleaved experts with biases
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
  bool qkv_bias = false;  // q/k/v_proj.bias (vLLM: QKVParallelLinear bias)
  bool o_bias = false;    // o_proj.bias (RowParallelLinear bias: replicated)
  bool mlp_bias = false;  // Llama mlp_bias: gate/up/down_proj.bias of the dense MLP
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
  bool router_fp32 = false;            // GLM-4.5: vLLM's gate is an fp32 nn.Linear (see catalog)
  int64_t num_mtp_layers = 0;          // num_nextn_predict_layers: not in vLLM's main model
  bool attn_sinks = false;             // gpt-oss: self_attn.sinks, one value per attention head
  // quantization_config.quant_method of the checkpoint ("mxfp4", "fp8"), empty if none. The
  // trainer's weights are bf16 whatever the checkpoint stores; `model show` says so.
  std::string checkpoint_quant;

  // Per-expert checkpoint names: "<layer>.<moe_block>experts.<e>.<expert_names[i]>.weight"
  // for gate, up, down (Mixtral: block_sparse_moe. and w1, w3, w2).
  std::string moe_block = "mlp.";
  std::string expert_names[3] = {"gate_proj", "up_proj", "down_proj"};

  // MLA (DeepSeek-V2/V3 / Kimi). q_lora_rank 0: q_proj directly (config null).
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
  bool is_mla() const { return arch == Arch::kDeepseekV3 || arch == Arch::kDeepseekV2; }
  bool is_moe_layer(int64_t layer) const;
  int64_t kv_proj_rows() const { return num_kv_heads * head_dim; }
  int64_t q_proj_rows() const { return num_heads * head_dim; }
};

// Parses a config.json document (already loaded); `source` names the file in errors.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source,
                               const std::string& name);

}  // namespace shardsync
