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
  for (const char* name : {"tiny-qwen3", "tiny-llama", "tiny-qwen3-moe", "tiny-kimi", "tiny-llama4"}) {
    ModelSpec m = load_model(name);
    for (const auto& p : m.params()) {
      kinds.insert(p.kind);
      bias = bias || p.is_bias;
      fp32 = fp32 || p.dtype == DType::kF32;
    }
  }
  EXPECT_EQ(kinds.size(), size_t(TensorKind::kFusedExpertsDown) + 1);
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
  EXPECT_THROW(load_model("no-such-model"), InputError);
  EXPECT_THROW(load_model("/nonexistent/config.json"), InputError);
}

}  // namespace
}  // namespace shardsync
