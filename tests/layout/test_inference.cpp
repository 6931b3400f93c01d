#include <gtest/gtest.h>

#include "common/error.hpp"
#include "layout/inference.hpp"
#include "layout/parse.hpp"

namespace shardsync {
namespace {

InferenceLayout spec(const char* s, int replicas = 1) {
  InferenceLayout l = parse_inference_spec(s);
  l.replicas = replicas;
  return l;
}

TEST(InferenceLayout, Qwen3Tp8KvHeadReplication) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  InferencePlacement p(m, spec("tp8"));
  // 4 KV heads over TP 8: every rank keeps one whole KV head (128 rows), q keeps 1024 rows.
  int32_t k = m.find("model.layers.0.self_attn.k_proj.weight");
  int32_t q = m.find("model.layers.0.self_attn.q_proj.weight");
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(p.kv_head_first(r), r / 2);  // rank t keeps KV head t // 2
    EXPECT_EQ(p.needed_bytes(r, k), 128 * 4096 * 2);
    EXPECT_EQ(p.needed_bytes(r, q), 1024 * 4096 * 2);
  }
  // No EP: MoE-TP over all 8 ranks, every expert sliced 1536/8.
  int32_t e = m.find("model.layers.0.mlp.experts.7.gate_proj.weight");
  EXPECT_EQ(p.needed_bytes(3, e), 192 * 4096 * 2);
}

TEST(InferenceLayout, KvHeadsSplitWhenMoreHeadsThanRanks) {
  ModelSpec m = load_model("qwen3-8b");  // 8 KV heads
  InferencePlacement p(m, spec("tp2"));
  EXPECT_EQ(p.kv_heads_per_rank(), 4);
  EXPECT_EQ(p.kv_head_first(1), 4);
}

TEST(InferenceLayout, WideEpLinearPlacement) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  InferencePlacement p(m, spec("dp16,ep16"));
  EXPECT_EQ(p.world_size(), 16);
  EXPECT_EQ(p.local_expert_first(5), 40);
  EXPECT_EQ(p.local_expert_count(5), 8);
  EXPECT_EQ(p.expert_map(5, 47), 7);
  EXPECT_EQ(p.expert_map(5, 48), -1);
  int32_t e = m.find("model.layers.9.mlp.experts.41.down_proj.weight");
  EXPECT_EQ(p.needed_bytes(5, e), 4096 * 1536 * 2);
  EXPECT_EQ(p.needed_bytes(4, e), 0);
  // Attention is replicated per DP rank (TP1): whole q_proj everywhere.
  EXPECT_EQ(p.needed_bytes(11, m.find("model.layers.9.self_attn.q_proj.weight")), 8192 * 4096 * 2);
}

TEST(InferenceLayout, LinearPlacementGivesRemainderToFirstRanks) {
  ModelSpec m = load_model("tiny-qwen3-moe");  // 8 experts
  InferencePlacement p(m, spec("dp3,ep3"));
  EXPECT_EQ(p.local_expert_count(0), 3);
  EXPECT_EQ(p.local_expert_count(1), 3);
  EXPECT_EQ(p.local_expert_count(2), 2);
  EXPECT_EQ(p.local_expert_first(1), 3);
  EXPECT_EQ(p.local_expert_first(2), 6);
}

TEST(InferenceLayout, VllmPpSplitAndRankGrid) {
  ModelSpec q = load_model("qwen3-235b-a22b");
  InferencePlacement p(q, spec("tp2,pp4"));
  EXPECT_EQ(p.stage_num_layers(0), 23);
  EXPECT_EQ(p.stage_num_layers(1), 24);
  EXPECT_EQ(p.stage_num_layers(2), 24);
  EXPECT_EQ(p.stage_num_layers(3), 23);
  ModelSpec k = load_model("kimi-k2-instruct");
  InferencePlacement pk(k, spec("tp2,pp4"));
  EXPECT_EQ(pk.stage_num_layers(0), 15);
  EXPECT_EQ(pk.stage_num_layers(2), 16);
  EXPECT_EQ(pk.stage_num_layers(3), 15);
  // TP fastest, then PP, then DP; the MoE rank flattens DP x TP.
  InferencePlacement g(q, spec("tp2,pp2,dp2", 2));
  InferenceCoord c = g.coord(8 + 7);
  EXPECT_EQ(c.replica, 1);
  EXPECT_EQ(c.tp_rank, 1);
  EXPECT_EQ(c.pp_rank, 1);
  EXPECT_EQ(c.dp_rank, 1);
  EXPECT_EQ(c.moe_rank, 3);
}

TEST(InferenceLayout, EveryReplicaNeedsEveryByteAtLeastOnce) {
  for (auto [model, s] : {std::pair{"qwen3-235b-a22b", "dp16,ep16"}, {"kimi-k2-instruct", "tp32,ep32"},
                          {"tiny-qwen3", "tp4"}, {"tiny-llama4", "tp2,dp2"}, {"tiny-kimi", "tp2,pp2"},
                          {"mixtral-8x7b-v0.1", "tp8,ep8"}, {"deepseek-v2-lite", "tp2,dp4,ep8"},
                          {"qwen2.5-7b-instruct", "tp4"}, {"tiny-mistral", "tp8"}, {"glm-4.5-air", "dp8,ep8"}}) {
    ModelSpec m = load_model(model);
    InferencePlacement p(m, spec(s, 2));
    int64_t replica0 = 0;
    for (int r = 0; r < p.layout().ranks_per_replica(); ++r) replica0 += p.needed_bytes(r);
    EXPECT_GE(replica0, m.total_bytes()) << model;
  }
}

TEST(InferenceLayout, BadLayoutsAreRejected) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  EXPECT_THROW(InferencePlacement(m, spec("tp3")), InputError);
  EXPECT_THROW(InferencePlacement(m, spec("tp128")), InputError);  // exceeds heads
  EXPECT_THROW(parse_inference_spec("dp16,ep8"), InputError);
  EXPECT_THROW(parse_inference_spec("tp2,zz3"), InputError);
  ModelSpec d = load_model("qwen3-8b");
  EXPECT_THROW(InferencePlacement(d, spec("tp2,ep2")), InputError);
  try {
    InferencePlacement(m, spec("tp3"));
    FAIL() << "tp3 was accepted for 64 heads";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace shardsync
