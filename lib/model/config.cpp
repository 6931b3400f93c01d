#include "model/config.hpp"

#include <algorithm>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace shardsync {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen3: return "qwen3";
    case Arch::kQwen3Moe: return "qwen3_moe";
    case Arch::kDeepseekV3: return "deepseek_v3";
    case Arch::kLlama4: return "llama4";
    case Arch::kQwen2: return "qwen2";
    case Arch::kMistral: return "mistral";
    case Arch::kMixtral: return "mixtral";
    case Arch::kDeepseekV2: return "deepseek_v2";
    case Arch::kGlm4Moe: return "glm4_moe";
    case Arch::kGptOss: return "gpt_oss";
  }
  return "?";
}

namespace {

struct ArchName {
  const char* hf;
  Arch arch;
};
constexpr ArchName kArchNames[] = {
    {"LlamaForCausalLM", Arch::kLlama},
    {"Qwen3ForCausalLM", Arch::kQwen3},
    {"Qwen3MoeForCausalLM", Arch::kQwen3Moe},
    {"DeepseekV3ForCausalLM", Arch::kDeepseekV3},
    {"Llama4ForConditionalGeneration", Arch::kLlama4},
    {"Llama4ForCausalLM", Arch::kLlama4},
    {"Qwen2ForCausalLM", Arch::kQwen2},
    {"MistralForCausalLM", Arch::kMistral},
    {"MixtralForCausalLM", Arch::kMixtral},
    {"DeepseekV2ForCausalLM", Arch::kDeepseekV2},
    {"Glm4MoeForCausalLM", Arch::kGlm4Moe},
    {"GptOssForCausalLM", Arch::kGptOss},
};

void parse_attention(const JsonFields& f, ModelConfig& c) {
  c.num_heads = f.get_int("num_attention_heads");
  c.num_kv_heads = f.get_int_or("num_key_value_heads", c.num_heads, 1);
  if (c.num_heads % c.num_kv_heads != 0)
    f.fail("num_key_value_heads", "must divide num_attention_heads (" + std::to_string(c.num_heads) +
                                      "), got " + std::to_string(c.num_kv_heads));
  if (f.has("head_dim")) {
    c.head_dim = f.get_int("head_dim");
  } else {
    if (c.hidden % c.num_heads != 0)
      f.fail("head_dim", "missing, and hidden_size (" + std::to_string(c.hidden) +
                             ") is not a multiple of num_attention_heads (" +
                             std::to_string(c.num_heads) + ") to derive it");
    c.head_dim = c.hidden / c.num_heads;
  }
}

void parse_common(const JsonFields& f, ModelConfig& c) {
  c.hidden = f.get_int("hidden_size");
  c.num_layers = f.get_int("num_hidden_layers");
  c.vocab = f.get_int("vocab_size");
  c.tie_embeddings = f.get_bool_or("tie_word_embeddings", false);
  std::string dt = f.get_string_or("torch_dtype", f.get_string_or("dtype", "bfloat16"));
  if (!parse_dtype(dt, &c.dtype))
    f.fail("torch_dtype", "expected bfloat16, float16 or float32, got \"" + dt + "\"");
  if (c.dtype == DType::kF8E4M3) c.dtype = DType::kBF16;  // trainers produce bf16
  if (f.has("quantization_config")) {
    JsonFields q = f.get_object("quantization_config");
    c.checkpoint_quant = q.get_string_or("quant_method", "unnamed");
  }
}

// The routed experts: how many (`count`), each of width `width`, top-k of them per token.
void parse_experts(const JsonFields& f, ModelConfig& c, const char* count, const char* width) {
  c.num_experts = f.get_int(count);
  c.moe_intermediate = f.get_int(width);
  int64_t topk = f.get_int("num_experts_per_tok");
  if (topk > c.num_experts)
    f.fail("num_experts_per_tok", "must be <= " + std::string(count) + " (" + std::to_string(c.num_experts) + ")");
}

void parse_qwen3_moe(const JsonFields& f, ModelConfig& c) {
  parse_experts(f, c, "num_experts", "moe_intermediate_size");
  c.sparse_step = f.get_int_or("decoder_sparse_step", 1, 1);
  c.mlp_only_layers = f.get_int_list_or("mlp_only_layers", {});
  for (int64_t l : c.mlp_only_layers)
    if (l < 0 || l >= c.num_layers)
      f.fail("mlp_only_layers", "layer index " + std::to_string(l) + " outside [0, " +
                                    std::to_string(c.num_layers) + ")");
  c.intermediate = f.get_int_or("intermediate_size", 0, 0);
  bool any_dense = !c.mlp_only_layers.empty() || c.sparse_step > 1;
  if (any_dense && c.intermediate <= 0)
    f.fail("intermediate_size", "required (> 0) because some layers are dense MLP layers");
}

// DeepSeek's field names for n_routed_experts (already read) routed experts of width
// moe_intermediate_size, n_shared_experts shared ones, first_k_dense_replace dense layers
// and the MTP layers vLLM's main model skips.
void parse_routed_and_shared_experts(const JsonFields& f, ModelConfig& c) {
  c.moe_intermediate = f.get_int("moe_intermediate_size");
  c.num_shared_experts = f.get_int_or("n_shared_experts", 0, 0);
  c.shared_intermediate = c.moe_intermediate * c.num_shared_experts;
  c.first_k_dense = f.get_int_or("first_k_dense_replace", 0, 0);
  if (c.first_k_dense > c.num_layers)
    f.fail("first_k_dense_replace", "must be <= num_hidden_layers (" + std::to_string(c.num_layers) + ")");
  c.num_mtp_layers = f.get_int_or("num_nextn_predict_layers", 0, 0);
  int64_t topk = f.get_int("num_experts_per_tok");
  if (topk > c.num_experts)
    f.fail("num_experts_per_tok", "must be <= n_routed_experts (" + std::to_string(c.num_experts) + ")");
}

void parse_deepseek(const JsonFields& f, ModelConfig& c) {
  // null: q_proj straight from the hidden state (DeepSeek-V2-Lite). Missing is refused
  // rather than guessed: HF's config classes would fill in a default of their own.
  if (!f.raw().contains("q_lora_rank"))
    f.fail("q_lora_rank", "missing; expected an integer rank, or null for a direct q_proj");
  c.q_lora_rank = f.has("q_lora_rank") ? f.get_int("q_lora_rank") : 0;
  c.kv_lora_rank = f.get_int("kv_lora_rank");
  c.qk_nope_head_dim = f.get_int("qk_nope_head_dim");
  c.qk_rope_head_dim = f.get_int("qk_rope_head_dim");
  c.v_head_dim = f.get_int("v_head_dim");
  c.num_heads = f.get_int("num_attention_heads");
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  c.intermediate = f.get_int("intermediate_size");
  c.num_experts = f.get_int_or("n_routed_experts", 0, 0);
  if (c.num_experts > 0) {
    parse_routed_and_shared_experts(f, c);
    c.sparse_step = f.get_int_or("moe_layer_freq", 1, 1);
    c.router_bias = f.get_string_or("topk_method", "") == "noaux_tc";
  }
}

// GLM-4.5: DeepSeek-style routed + shared experts; every layer from first_k_dense_replace
// on is MoE, with an fp32 e_score_correction_bias whatever the topk_method.
void parse_glm4_moe(const JsonFields& f, ModelConfig& c) {
  c.intermediate = f.get_int("intermediate_size");
  c.num_experts = f.get_int("n_routed_experts");
  parse_routed_and_shared_experts(f, c);
  c.router_bias = true;
  c.router_fp32 = true;
}

void parse_mixtral(const JsonFields& f, ModelConfig& c) {
  parse_experts(f, c, "num_local_experts", "intermediate_size");
  c.moe_block = "block_sparse_moe.";
  c.expert_names[0] = "w1";  // gate
  c.expert_names[1] = "w3";  // up
  c.expert_names[2] = "w2";  // down
}

// gpt-oss: every layer MoE, experts stored fused ([E, hidden, 2I] with gate and up columns
// interleaved) with biases; attention biases and sinks. vLLM builds the biases whatever the
// config says (QKVParallelLinear and RowParallelLinear default to bias=True there).
void parse_gpt_oss(const JsonFields& f, ModelConfig& c) {
  parse_experts(f, c, "num_local_experts", "intermediate_size");
  c.qkv_bias = c.o_bias = true;
  c.router_bias = true;
  c.attn_sinks = true;
}

void parse_llama4_text(const JsonFields& f, ModelConfig& c) {
  parse_attention(f, c);
  c.num_experts = f.get_int("num_local_experts");
  c.moe_intermediate = f.get_int("intermediate_size");
  c.intermediate = f.get_int("intermediate_size_mlp");
  c.num_shared_experts = 1;
  c.shared_intermediate = c.moe_intermediate;
  c.sparse_step = f.get_int_or("interleave_moe_layer_step", 1, 1);
  c.layer_prefix = "language_model.model.layers.";
  c.model_prefix = "language_model.model.";
  c.lm_head_name = "language_model.lm_head.weight";
}

// Config fields that change vLLM 0.11.0's parameter list in a way shardsync does not model
// (read from the model files: which attributes add, drop or reshape parameters). Each is
// refused by name rather than silently ignored. Fields vLLM reads and we model are parsed
// above; fields that change no parameter (rope, sliding window, routing math) are ignored.
struct Unmodelled {
  std::initializer_list<Arch> archs;
  const char* field;
  bool (*applies)(const JsonFields& f, const ModelConfig& c);
  const char* why;
};

bool is_true(const JsonFields& f, const char* k) { return f.has(k) && f.raw()[k].is_boolean() && f.raw()[k].get<bool>(); }

const Unmodelled kUnmodelled[] = {
    {{Arch::kLlama4}, "attention_bias",
     [](const JsonFields& f, const ModelConfig&) { return is_true(f, "attention_bias"); },
     "true, but vLLM's Llama-4 builds q/k/v/o without biases and does not read this field; the checkpoint's "
     "biases would load nowhere"},
    {{Arch::kGptOss}, "attention_bias",
     [](const JsonFields& f, const ModelConfig&) { return f.has("attention_bias") && !is_true(f, "attention_bias"); },
     "false, but vLLM's gpt-oss always has q/k/v and o_proj biases (its layers' default bias=True) and does not "
     "read this field; they would stay unloaded"},
    {{Arch::kGptOss}, "tie_word_embeddings",
     [](const JsonFields& f, const ModelConfig&) { return is_true(f, "tie_word_embeddings"); },
     "true, but vLLM's gpt-oss keeps an untied lm_head and skips loading it then, so it would stay unloaded"},
    {{Arch::kDeepseekV3, Arch::kDeepseekV2, Arch::kGlm4Moe}, "tie_word_embeddings",
     [](const JsonFields& f, const ModelConfig&) { return is_true(f, "tie_word_embeddings"); },
     "true, but vLLM's model keeps a separate lm_head and does not read this field; the checkpoint has none to load"},
    {{Arch::kDeepseekV3, Arch::kDeepseekV2}, "index_topk",
     [](const JsonFields& f, const ModelConfig&) { return f.has("index_topk"); },
     "present: DeepSeek-V3.2's sparse-attention indexer (wq_b, wk, k_norm, weights_proj) is not modelled"},
    {{Arch::kQwen2}, "head_dim",
     [](const JsonFields& f, const ModelConfig& c) { return f.has("head_dim") && c.head_dim * c.num_heads != c.hidden; },
     "differs from hidden_size / num_attention_heads, which is what vLLM's Qwen2 uses (it does not read head_dim)"},
};

void refuse_unmodelled(const JsonFields& f, const ModelConfig& c) {
  for (const Unmodelled& u : kUnmodelled)
    for (Arch a : u.archs)
      if (a == c.arch && u.applies(f, c))
        f.fail(u.field, std::string("not modelled for ") + c.architecture + ": " + u.why);
}

// Counts that set how many tensors the catalog lists are bounded, so that an absurd
// config is refused at once instead of exhausting memory.
void check_plausible(const JsonFields& f, const ModelConfig& c) {
  auto limit = [&](const char* field, int64_t v, int64_t max) {
    if (v > max) f.fail(field, "implausibly large: " + std::to_string(v) + " (limit " + std::to_string(max) + ")");
  };
  limit("num_hidden_layers", c.num_layers, 100000);
  limit("num_attention_heads", c.num_heads, 1 << 20);
  limit(c.is_mla() || c.arch == Arch::kGlm4Moe ? "n_routed_experts"
        : c.arch == Arch::kLlama4 || c.arch == Arch::kMixtral || c.arch == Arch::kGptOss ? "num_local_experts"
                                                                                           : "num_experts",
        c.num_experts, 1 << 20);
  int64_t tensors = c.num_layers * (3 * c.num_experts + 32);
  if (tensors > 50'000'000) f.fail("num_hidden_layers", "with the experts, " + std::to_string(tensors) + " tensors: implausibly many (limit 50,000,000)");
}

}  // namespace

std::string supported_architectures() {
  std::string s;
  for (const auto& a : kArchNames) s += (s.empty() ? "" : ", ") + std::string(a.hf);
  return s;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (num_experts == 0) return false;
  switch (arch) {
    case Arch::kQwen3Moe:
      if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end())
        return false;
      return (layer + 1) % sparse_step == 0;
    case Arch::kDeepseekV3:
    case Arch::kDeepseekV2:
      return layer >= first_k_dense && layer % sparse_step == 0;
    case Arch::kGlm4Moe:
      return layer >= first_k_dense;
    case Arch::kMixtral:
      return true;
    case Arch::kLlama4:
      return (layer + 1) % sparse_step == 0;
    case Arch::kGptOss:
      return true;
    default:
      return false;
  }
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source,
                               const std::string& name) {
  nlohmann::json doc = parse_json_text(json_text, source);
  JsonFields top(doc, source);
  ModelConfig c;
  c.name = name;
  c.source = source;

  if (!top.raw().contains("architectures") || !top.raw()["architectures"].is_array() ||
      top.raw()["architectures"].empty() || !top.raw()["architectures"][0].is_string())
    top.fail("architectures", "expected a non-empty list of strings naming one of: " +
                                  supported_architectures());
  c.architecture = top.raw()["architectures"][0].get<std::string>();
  bool known = false;
  for (const auto& a : kArchNames)
    if (c.architecture == a.hf) {
      c.arch = a.arch;
      known = true;
    }
  if (!known)
    top.fail("architectures", "unknown architecture \"" + c.architecture +
                                  "\"; supported: " + supported_architectures());
  c.model_type = top.get_string_or("model_type", "");

  switch (c.arch) {
    case Arch::kLlama:
    case Arch::kMistral:  // vLLM's Mistral is its Llama; sliding_window changes no tensor
      parse_common(top, c);
      parse_attention(top, c);
      c.intermediate = top.get_int("intermediate_size");
      // llama.py: attention_bias or (InternLM's) bias puts biases on q/k/v and o_proj; a
      // qkv_bias field, where present, decides q/k/v alone.
      c.o_bias = top.get_bool_or("attention_bias", false) || top.get_bool_or("bias", false);
      c.qkv_bias = top.has("qkv_bias") ? top.get_bool("qkv_bias") : c.o_bias;
      c.mlp_bias = top.get_bool_or("mlp_bias", false);
      break;
    case Arch::kQwen2:
      parse_common(top, c);
      parse_attention(top, c);
      c.intermediate = top.get_int("intermediate_size");
      c.qkv_bias = true;
      break;
    case Arch::kQwen3:
      parse_common(top, c);
      parse_attention(top, c);
      c.intermediate = top.get_int("intermediate_size");
      c.qkv_bias = top.get_bool_or("attention_bias", false);
      c.qk_norm = true;
      break;
    case Arch::kQwen3Moe:
      parse_common(top, c);
      parse_attention(top, c);
      parse_qwen3_moe(top, c);
      c.qkv_bias = top.get_bool_or("attention_bias", false);
      c.qk_norm = true;
      break;
    case Arch::kMixtral:
      parse_common(top, c);
      parse_attention(top, c);
      parse_mixtral(top, c);
      break;
    case Arch::kDeepseekV3:
    case Arch::kDeepseekV2:
      parse_common(top, c);
      parse_deepseek(top, c);
      break;
    case Arch::kGlm4Moe:
      parse_common(top, c);
      parse_attention(top, c);
      parse_glm4_moe(top, c);
      c.qkv_bias = top.get_bool_or("attention_bias", false);
      c.qk_norm = top.get_bool_or("use_qk_norm", false);
      break;
    case Arch::kGptOss:
      parse_common(top, c);
      parse_attention(top, c);
      parse_gpt_oss(top, c);
      break;
    case Arch::kLlama4: {
      JsonFields text = top.get_object("text_config");
      parse_common(text, c);
      parse_llama4_text(text, c);
      refuse_unmodelled(text, c);
      check_plausible(text, c);
      return c;
    }
  }
  refuse_unmodelled(top, c);
  check_plausible(top, c);
  return c;
}

}  // namespace shardsync
