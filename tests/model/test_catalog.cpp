#include <gtest/gtest.h>

#include <set>

#include "common/error.hpp"
#include "model/catalog.hpp"

namespace shardsync {
namespace {

TEST(Catalog, PublishedParameterTotals) {
  EXPECT_EQ(load_model("qwen3-235b-a22b").num_params_total(), 235093634560);
  EXPECT_EQ(load_model("kimi-k2-instruct").num_params_total(), 1026408232448);
  EXPECT_EQ(load_model("qwen3-0.6b").num_params_total(), 596049920);
  EXPECT_EQ(load_model("llama-4-scout-17b-16e").num_params_total(), 107769861120);
  EXPECT_EQ(load_model("qwen3-8b").num_params_total(), 8190735360);
  EXPECT_EQ(load_model("qwen3-30b-a3b").num_params_total(), 30532122624);
  EXPECT_EQ(load_model("qwen2.5-7b-instruct").num_params_total(), 7615616512);
  EXPECT_EQ(load_model("mixtral-8x7b-v0.1").num_params_total(), 46702792704);
  EXPECT_EQ(load_model("deepseek-v2-lite").num_params_total(), 15706484224);
  EXPECT_EQ(load_model("glm-4.5-air").num_params_total(), 106852251264);  // without its MTP layer
  EXPECT_EQ(load_model("gpt-oss-20b").num_params_total(), 20914757184);   // experts as unpacked bf16 values
}

// gpt-oss-20b's HF tensors (transformers' GptOss modeling): attention biases and per-head
// sinks, a router with a bias, experts fused [E, hidden, 2I] / [E, I, hidden] with biases; the
// MXFP4 quantization_config is the checkpoint's storage, the trainer's weights are bf16.
TEST(Catalog, GptOssFusedExpertsSinksAndBiases) {
  ModelSpec m = load_model("gpt-oss-20b");
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.checkpoint_quant, "mxfp4");
  auto shape = [&](const std::string& n) {
    int32_t i = m.find("model.layers.23." + n);
    EXPECT_GE(i, 0) << n;
    return i < 0 ? std::vector<int64_t>{} : m.param(i).shape;
  };
  EXPECT_EQ(shape("self_attn.q_proj.weight"), (std::vector<int64_t>{4096, 2880}));
  EXPECT_EQ(shape("self_attn.q_proj.bias"), (std::vector<int64_t>{4096}));
  EXPECT_EQ(shape("self_attn.k_proj.bias"), (std::vector<int64_t>{512}));
  EXPECT_EQ(shape("self_attn.o_proj.bias"), (std::vector<int64_t>{2880}));
  EXPECT_EQ(shape("self_attn.sinks"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape("mlp.router.weight"), (std::vector<int64_t>{32, 2880}));
  EXPECT_EQ(shape("mlp.router.bias"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shape("mlp.experts.gate_up_proj"), (std::vector<int64_t>{32, 2880, 5760}));
  EXPECT_EQ(shape("mlp.experts.gate_up_proj_bias"), (std::vector<int64_t>{32, 5760}));
  EXPECT_EQ(shape("mlp.experts.down_proj"), (std::vector<int64_t>{32, 2880, 2880}));
  EXPECT_EQ(shape("mlp.experts.down_proj_bias"), (std::vector<int64_t>{32, 2880}));
  for (const auto& p : m.params()) EXPECT_EQ(p.dtype, DType::kBF16) << p.name;
  EXPECT_GE(m.find("lm_head.weight"), 0);
  EXPECT_EQ(m.params().size(), size_t(3 + 24 * 17));
}

TEST(Catalog, Glm45AirMoeAndBiases) {
  ModelSpec m = load_model("glm-4.5-air");
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_LT(m.find("model.layers.46.input_layernorm.weight"), 0);  // the MTP layer is not listed
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(45));
  EXPECT_EQ(m.param(m.find("model.layers.1.self_attn.q_proj.bias")).shape, (std::vector<int64_t>{12288}));
  EXPECT_LT(m.find("model.layers.1.self_attn.o_proj.bias"), 0);
  EXPECT_LT(m.find("model.layers.1.self_attn.q_norm.weight"), 0);  // use_qk_norm false
  EXPECT_EQ(m.param(m.find("model.layers.1.mlp.gate.weight")).dtype, DType::kF32);
  EXPECT_EQ(m.param(m.find("model.layers.1.mlp.gate.e_score_correction_bias")).dtype, DType::kF32);
  EXPECT_EQ(m.param(m.find("model.layers.1.mlp.shared_experts.down_proj.weight")).shape,
            (std::vector<int64_t>{4096, 1408}));
  EXPECT_EQ(m.param(m.find("model.layers.0.mlp.gate_proj.weight")).shape, (std::vector<int64_t>{10944, 4096}));
  EXPECT_TRUE(load_model("tiny-glm4-moe").config().qk_norm);
}

TEST(Catalog, Qwen2BiasesOnQkvOnly) {
  ModelSpec m = load_model("qwen2.5-7b-instruct");
  EXPECT_EQ(m.param(m.find("model.layers.27.self_attn.q_proj.bias")).shape, (std::vector<int64_t>{3584}));
  EXPECT_EQ(m.param(m.find("model.layers.27.self_attn.k_proj.bias")).shape, (std::vector<int64_t>{512}));
  EXPECT_TRUE(m.param(m.find("model.layers.0.self_attn.v_proj.bias")).is_bias);
  EXPECT_LT(m.find("model.layers.0.self_attn.o_proj.bias"), 0);
  EXPECT_LT(m.find("model.layers.0.mlp.gate_proj.bias"), 0);
}

TEST(Catalog, MixtralExpertNames) {
  ModelSpec m = load_model("mixtral-8x7b-v0.1");
  const ParamMeta& w1 = m.param(m.find("model.layers.31.block_sparse_moe.experts.7.w1.weight"));
  EXPECT_EQ(w1.kind, TensorKind::kExpertGate);
  EXPECT_EQ(w1.shape, (std::vector<int64_t>{14336, 4096}));
  EXPECT_EQ(m.param(m.find("model.layers.0.block_sparse_moe.experts.0.w3.weight")).kind, TensorKind::kExpertUp);
  const ParamMeta& w2 = m.param(m.find("model.layers.0.block_sparse_moe.experts.0.w2.weight"));
  EXPECT_EQ(w2.kind, TensorKind::kExpertDown);
  EXPECT_EQ(w2.shape, (std::vector<int64_t>{4096, 14336}));
  EXPECT_EQ(m.param(m.find("model.layers.0.block_sparse_moe.gate.weight")).shape, (std::vector<int64_t>{8, 4096}));
  EXPECT_LT(m.find("model.layers.0.mlp.gate.weight"), 0);
  EXPECT_EQ(m.config().num_shared_experts, 0);
  EXPECT_FALSE(m.config().router_bias);
}

TEST(Catalog, DeepseekV2LiteDirectQProj) {
  ModelSpec m = load_model("deepseek-v2-lite");
  EXPECT_EQ(m.config().q_lora_rank, 0);
  const ParamMeta& q = m.param(m.find("model.layers.3.self_attn.q_proj.weight"));
  EXPECT_EQ(q.kind, TensorKind::kMlaQ);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{16 * 192, 2048}));
  EXPECT_LT(m.find("model.layers.3.self_attn.q_a_proj.weight"), 0);
  EXPECT_LT(m.find("model.layers.3.self_attn.q_a_layernorm.weight"), 0);
  EXPECT_EQ(m.param(m.find("model.layers.3.self_attn.kv_a_proj_with_mqa.weight")).shape,
            (std::vector<int64_t>{576, 2048}));
  EXPECT_LT(m.find("model.layers.3.mlp.gate.e_score_correction_bias"), 0);  // greedy routing
  EXPECT_EQ(m.param(m.find("model.layers.1.mlp.shared_experts.up_proj.weight")).shape,
            (std::vector<int64_t>{2 * 1408, 2048}));
  EXPECT_GE(m.find("model.layers.0.mlp.down_proj.weight"), 0);  // dense first layer
}

TEST(Catalog, AttentionAndMlpBiasesFollowVllmPerArchitecture) {
  auto cfg = [](const char* arch, const char* extra) {
    return std::string(R"({"architectures": [")") + arch + R"("], "hidden_size": 64, "num_hidden_layers": 1,
        "vocab_size": 128, "num_attention_heads": 4, "intermediate_size": 32)" + extra + "}";
  };
  auto has = [](const std::string& json, const char* name) {
    return build_model(parse_model_config(json, "t.json", "t")).find(name) >= 0;
  };
  // Llama: attention_bias puts a bias on o_proj too (bias_o_proj); mlp_bias on gate/up/down.
  std::string llama = cfg("LlamaForCausalLM", R"(, "attention_bias": true, "mlp_bias": true)");
  EXPECT_TRUE(has(llama, "model.layers.0.self_attn.o_proj.bias"));
  EXPECT_TRUE(has(llama, "model.layers.0.mlp.gate_proj.bias"));
  EXPECT_TRUE(has(llama, "model.layers.0.mlp.down_proj.bias"));
  EXPECT_FALSE(has(cfg("LlamaForCausalLM", ""), "model.layers.0.mlp.up_proj.bias"));
  // Qwen3: attention_bias is qkv_bias only; o_proj has none in vLLM.
  std::string qwen3 = cfg("Qwen3ForCausalLM", R"(, "attention_bias": true)");
  EXPECT_TRUE(has(qwen3, "model.layers.0.self_attn.k_proj.bias"));
  EXPECT_FALSE(has(qwen3, "model.layers.0.self_attn.o_proj.bias"));
  // Mistral is vLLM's Llama.
  EXPECT_TRUE(has(cfg("MistralForCausalLM", R"(, "mlp_bias": true, "sliding_window": 4096)"),
                  "model.layers.0.mlp.up_proj.bias"));
  // llama.py: InternLM's `bias` works as attention_bias; a `qkv_bias` field decides q/k/v alone
  // while o_proj keeps attention_bias's value.
  EXPECT_TRUE(has(cfg("LlamaForCausalLM", R"(, "bias": true)"), "model.layers.0.self_attn.o_proj.bias"));
  EXPECT_TRUE(has(cfg("LlamaForCausalLM", R"(, "bias": true)"), "model.layers.0.self_attn.v_proj.bias"));
  std::string internlm3 = cfg("LlamaForCausalLM", R"(, "qkv_bias": true)");
  EXPECT_TRUE(has(internlm3, "model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(has(internlm3, "model.layers.0.self_attn.o_proj.bias"));
  std::string o_only = cfg("LlamaForCausalLM", R"(, "attention_bias": true, "qkv_bias": false)");
  EXPECT_FALSE(has(o_only, "model.layers.0.self_attn.k_proj.bias"));
  EXPECT_TRUE(has(o_only, "model.layers.0.self_attn.o_proj.bias"));
}

TEST(Catalog, Qwen3MoeShapesAndGroups) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  const ParamMeta& q = m.param(m.find("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(q.shape, (std::vector<int64_t>{8192, 4096}));
  const ParamMeta& k = m.param(m.find("model.layers.93.self_attn.k_proj.weight"));
  EXPECT_EQ(k.shape, (std::vector<int64_t>{512, 4096}));
  const ParamMeta& e = m.param(m.find("model.layers.5.mlp.experts.127.down_proj.weight"));
  EXPECT_EQ(e.shape, (std::vector<int64_t>{4096, 1536}));
  EXPECT_EQ(e.expert, 127);
  EXPECT_EQ(e.layer, 5);
  EXPECT_EQ(e.group, 6);
  EXPECT_EQ(m.groups().size(), 96u);
  EXPECT_EQ(m.groups().front().name, "embed");
  EXPECT_EQ(m.groups().back().name, "head");
  // Per-layer parameter counts from the reference: attention 71,303,424 + MoE 2,416,443,392 + 2 norms.
  int64_t n = 0;
  const WeightGroup& g = m.groups()[1];
  for (int32_t i = g.first_param; i < g.first_param + g.num_params; ++i) n += m.param(i).numel();
  EXPECT_EQ(n, 71303424 + 2416443392 + 2 * 4096);
  EXPECT_EQ(m.find("lm_head.weight") >= 0, true);
}

TEST(Catalog, KimiMlaAndRouterBias) {
  ModelSpec m = load_model("kimi-k2-instruct");
  const ModelConfig& c = m.config();
  EXPECT_EQ(c.first_k_dense, 1);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_EQ(m.param(m.find("model.layers.3.self_attn.q_b_proj.weight")).shape,
            (std::vector<int64_t>{64 * 192, 1536}));
  EXPECT_EQ(m.param(m.find("model.layers.3.self_attn.kv_a_proj_with_mqa.weight")).shape,
            (std::vector<int64_t>{576, 7168}));
  const ParamMeta& bias = m.param(m.find("model.layers.3.mlp.gate.e_score_correction_bias"));
  EXPECT_EQ(bias.dtype, DType::kF32);
  EXPECT_EQ(bias.bytes(), 384 * 4);
  EXPECT_LT(m.find("model.layers.0.mlp.gate.weight"), 0);  // dense first layer
  EXPECT_GE(m.find("model.layers.0.mlp.gate_proj.weight"), 0);
  EXPECT_GE(m.find("model.layers.60.mlp.shared_experts.down_proj.weight"), 0);
  // MLA attention per layer, from the reference: 101,124,096.
  int64_t attn = 0;
  for (const auto& p : m.params())
    if (p.layer == 7 && p.name.find("self_attn.") != std::string::npos) attn += p.numel();
  EXPECT_EQ(attn, 101124096);
}

TEST(Catalog, Llama4FusedExperts) {
  ModelSpec m = load_model("llama-4-scout-17b-16e");
  const ParamMeta& gu = m.param(m.find("language_model.model.layers.0.feed_forward.experts.gate_up_proj"));
  EXPECT_EQ(gu.shape, (std::vector<int64_t>{16, 5120, 16384}));
  EXPECT_EQ(gu.kind, TensorKind::kFusedExpertsGateUp);
  const ParamMeta& d = m.param(m.find("language_model.model.layers.47.feed_forward.experts.down_proj"));
  EXPECT_EQ(d.shape, (std::vector<int64_t>{16, 8192, 5120}));
  EXPECT_GE(m.find("language_model.lm_head.weight"), 0);
  EXPECT_GE(m.find("language_model.model.layers.3.feed_forward.shared_expert.gate_proj.weight"), 0);
}

TEST(Catalog, TiedEmbeddingsHaveNoLmHead) {
  ModelSpec m = load_model("qwen3-0.6b");
  EXPECT_LT(m.find("lm_head.weight"), 0);
  EXPECT_EQ(m.groups().back().num_params, 1);  // final norm only
}

TEST(Catalog, TinyModelsCoverEveryTensorKind) {
  std::set<TensorKind> kinds;
  bool bias = false, fp32 = false;
  for (const char* name : {"tiny-qwen3", "tiny-llama", "tiny-qwen3-moe", "tiny-kimi", "tiny-llama4", "tiny-qwen2",
                           "tiny-mistral", "tiny-mixtral", "tiny-deepseek-v2", "tiny-glm4-moe", "tiny-gpt-oss"}) {
    ModelSpec m = load_model(name);
    for (const auto& p : m.params()) {
      kinds.insert(p.kind);
      bias = bias || p.is_bias;
      fp32 = fp32 || p.dtype == DType::kF32;
    }
  }
  EXPECT_EQ(kinds.size(), size_t(TensorKind::kSinks) + 1);
  EXPECT_TRUE(bias);
  EXPECT_TRUE(fp32);
  EXPECT_TRUE(load_model("tiny-qwen3").config().tie_embeddings);
  EXPECT_LT(load_model("tiny-qwen3").config().num_kv_heads, 4);  // fewer KV heads than TP 4
}

void expect_input_error(const std::string& json, const std::string& needle) {
  try {
    build_model(parse_model_config(json, "test.json", "t"));
    FAIL() << "expected an InputError containing: " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
  }
}

TEST(Catalog, BadConfigsAreRejectedWithFieldNames) {
  expect_input_error("{\"architectures\": [\"Qwen3ForCausalLM\"], ", "malformed JSON");
  expect_input_error("{\"architectures\": [\"GPT2LMHeadModel\"]}", "unknown architecture \"GPT2LMHeadModel\"");
  expect_input_error("{}", "architectures");
  expect_input_error("{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 64}", "num_hidden_layers");
  expect_input_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
      "vocab_size": 100, "num_attention_heads": 8, "num_key_value_heads": 3, "intermediate_size": 32})",
                     "num_key_value_heads");
  expect_input_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64", "num_hidden_layers": 2})",
                     "hidden_size");
  expect_input_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4611686018427387904,
      "num_hidden_layers": 2, "vocab_size": 4611686018427387904, "num_attention_heads": 1, "intermediate_size": 32})",
                     "sizes");
  expect_input_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": -2,
      "vocab_size": 100, "num_attention_heads": 8, "intermediate_size": 32})",
                     "num_hidden_layers");
  expect_input_error("{\"architectures\": [\"GPT2LMHeadModel\"]}", "MixtralForCausalLM");
  // DeepSeek: null q_lora_rank is a direct q_proj; a missing one is refused, not guessed.
  expect_input_error(R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
      "vocab_size": 100, "num_attention_heads": 4, "kv_lora_rank": 8, "qk_nope_head_dim": 4,
      "qk_rope_head_dim": 4, "v_head_dim": 4, "intermediate_size": 32})",
                     "q_lora_rank");
  expect_input_error(R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
      "vocab_size": 100, "num_attention_heads": 4, "intermediate_size": 32, "num_experts_per_tok": 2})",
                     "num_local_experts");
  // gpt-oss: the experts and their width are required.
  expect_input_error(R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
      "vocab_size": 100, "num_attention_heads": 4, "intermediate_size": 32, "num_experts_per_tok": 2})",
                     "num_local_experts");
  EXPECT_THROW(load_model("no-such-model"), InputError);
  EXPECT_THROW(load_model("/nonexistent/config.json"), InputError);
}

// A field that changes vLLM's parameter list in a way shardsync does not model is refused by
// name (vLLM 0.11.0 model files), never silently ignored.
TEST(Catalog, FieldsThatChangeVllmsTensorsUnmodelledAreRefused) {
  auto cfg = [](const char* arch, const char* extra) {
    return std::string(R"({"architectures": [")") + arch + R"("], "hidden_size": 64, "num_hidden_layers": 1,
        "vocab_size": 128, "num_attention_heads": 4, "intermediate_size": 32, "num_local_experts": 4,
        "num_experts_per_tok": 2, "n_routed_experts": 4, "moe_intermediate_size": 16, "q_lora_rank": null,
        "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8)" + extra + "}";
  };
  expect_input_error(cfg("GptOssForCausalLM", R"(, "attention_bias": false)"), "attention_bias");
  expect_input_error(cfg("GptOssForCausalLM", R"(, "tie_word_embeddings": true)"), "tie_word_embeddings");
  expect_input_error(cfg("DeepseekV3ForCausalLM", R"(, "tie_word_embeddings": true)"), "tie_word_embeddings");
  expect_input_error(cfg("DeepseekV2ForCausalLM", R"(, "index_topk": 2048)"), "index_topk");
  expect_input_error(cfg("Glm4MoeForCausalLM", R"(, "tie_word_embeddings": true)"), "not modelled for Glm4MoeForCausalLM");
  expect_input_error(cfg("Qwen2ForCausalLM", R"(, "head_dim": 32)"), "head_dim");
  expect_input_error(R"({"architectures": ["Llama4ForConditionalGeneration"], "text_config": {"hidden_size": 64,
      "num_hidden_layers": 1, "vocab_size": 128, "num_attention_heads": 4, "head_dim": 16, "intermediate_size": 32,
      "intermediate_size_mlp": 64, "num_local_experts": 4, "attention_bias": true}})",
                     "attention_bias");
  // The same fields at values vLLM agrees with are accepted.
  EXPECT_NO_THROW(build_model(parse_model_config(cfg("GptOssForCausalLM", R"(, "attention_bias": true)"), "t", "t")));
  EXPECT_NO_THROW(build_model(parse_model_config(cfg("Qwen2ForCausalLM", R"(, "head_dim": 16)"), "t", "t")));
  EXPECT_NO_THROW(build_model(parse_model_config(cfg("DeepseekV2ForCausalLM", R"(, "tie_word_embeddings": false)"), "t", "t")));
}

}  // namespace
}  // namespace shardsync
