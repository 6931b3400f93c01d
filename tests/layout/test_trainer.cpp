#include <gtest/gtest.h>

#include "common/error.hpp"
#include "layout/parse.hpp"
#include "layout/trainer.hpp"

namespace shardsync {
namespace {

TEST(TrainerLayout, Qwen3PublishedSetup) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  TrainerPlacement t(m, parse_trainer_spec("tp4,pp2,ep8,etp1"));
  EXPECT_EQ(t.dp(), 2);   // smallest DP with tp*dp divisible by ep*etp
  EXPECT_EQ(t.edp(), 1);
  EXPECT_EQ(t.world_size(), 16);
  EXPECT_EQ(t.stage_num_layers(0), 47);
  EXPECT_EQ(t.stage_of_layer(46), 0);
  EXPECT_EQ(t.stage_of_layer(47), 1);
  EXPECT_EQ(t.experts_per_ep_rank(), 16);
  EXPECT_EQ(t.ep_owner_of_expert(50), 3);

  // q_proj of layer 0: four row slices of 2048, each held by both DP replicas of stage 0.
  auto q = t.pieces(m.find("model.layers.0.self_attn.q_proj.weight"));
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[1].box.start, (std::vector<int64_t>{2048, 0}));
  EXPECT_EQ(q[1].box.length, (std::vector<int64_t>{2048, 4096}));
  EXPECT_EQ(q[1].ranks, (std::vector<int>{1, 5}));
  // o_proj is row-parallel: split on dim 1.
  auto o = t.pieces(m.find("model.layers.50.self_attn.o_proj.weight"));
  EXPECT_EQ(o[2].box.start, (std::vector<int64_t>{0, 4096}));
  EXPECT_EQ(o[2].ranks, (std::vector<int>{10, 14}));
  // Expert 50 of layer 47 (stage 1) is whole on EP rank 3 of stage 1: rank 8 + 3.
  auto e = t.pieces(m.find("model.layers.47.mlp.experts.50.up_proj.weight"));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].ranks, (std::vector<int>{11}));
  EXPECT_EQ(e[0].box, Box::full({1536, 4096}));
  // Norms are replicated over the stage.
  auto n = t.pieces(m.find("model.layers.3.input_layernorm.weight"));
  ASSERT_EQ(n.size(), 1u);
  EXPECT_EQ(n[0].ranks.size(), 8u);
  // Megatron vocab padding to a multiple of 128*tp: 152064 rows, 38016 per rank, last one clipped.
  auto emb = t.pieces(m.find("model.embed_tokens.weight"));
  ASSERT_EQ(emb.size(), 4u);
  EXPECT_EQ(emb[3].box.start[0], 3 * 38016);
  EXPECT_EQ(emb[3].box.length[0], 151936 - 3 * 38016);
  auto head = t.pieces(m.find("lm_head.weight"));
  EXPECT_EQ(head[0].ranks, (std::vector<int>{8, 12}));  // last stage
}

TEST(TrainerLayout, PiecesCoverEveryTensorExactlyOnce) {
  for (auto [model, spec] : {std::pair{"tiny-qwen3-moe", "tp2,pp2,ep4,etp1"}, {"tiny-kimi", "tp4,ep8,etp1"},
                             {"tiny-llama4", "tp2,pp2,ep2,etp2"}, {"tiny-qwen3", "tp4,pp2"},
                             {"tiny-llama", "tp2,pp3"}, {"tiny-qwen2", "tp2,pp2"}, {"tiny-mistral", "tp4,pp3"},
                             {"tiny-mixtral", "tp2,ep4,etp1"}, {"tiny-mixtral", "tp4,ep2,etp2"},
                             {"tiny-deepseek-v2", "tp2,pp3,ep2,etp1"}, {"tiny-glm4-moe", "tp2,pp3,ep4,etp1"},
                             {"tiny-gpt-oss", "tp2,pp3,ep4,etp1"}, {"tiny-gpt-oss", "tp4,ep2,etp2"},
                             {"tiny-qwen3-moe", "fsdp4,pp2,dp2"}, {"tiny-qwen3", "fsdp5"}, {"tiny-qwen3", "fsdp7,pp2"},
                             {"tiny-gpt-oss", "fsdp2,dp2"}, {"tiny-kimi", "fsdp8"}, {"tiny-llama4", "fsdp4"}}) {
    ModelSpec m = load_model(model);
    TrainerPlacement t(m, parse_trainer_spec(spec));
    for (int32_t i = 0; i < int32_t(m.params().size()); ++i) {
      int64_t covered = 0;
      for (const auto& piece : t.pieces(i)) {
        covered += piece.box.numel();
        EXPECT_FALSE(piece.ranks.empty());
        for (int r : piece.ranks) EXPECT_LT(r, t.world_size());
      }
      EXPECT_EQ(covered, m.param(i).numel()) << model << " " << m.param(i).name;
    }
  }
}

TEST(TrainerLayout, KimiPublishedSetup) {
  ModelSpec m = load_model("kimi-k2-instruct");
  LayoutFile f = load_layout("kimi-k2-published");
  TrainerPlacement t(m, f.trainer);
  EXPECT_EQ(t.world_size(), 256);
  EXPECT_EQ(t.dp(), 4);
  EXPECT_EQ(t.edp(), 1);
  EXPECT_EQ(t.stage_num_layers(0), 7);
  EXPECT_EQ(t.stage_first_layer(7), 55);
  EXPECT_EQ(t.experts_per_ep_rank(), 12);
  // Expert 383 of the last layer: EP rank 31 on stage 7 -> 31 + 32*7.
  auto e = t.pieces(m.find("model.layers.60.mlp.experts.383.gate_proj.weight"));
  EXPECT_EQ(e[0].ranks, (std::vector<int>{31 + 32 * 7}));
  auto h = t.holdings();
  int64_t total = 0;
  for (int64_t b : h.bytes) total += b;
  EXPECT_GE(total, m.total_bytes());
}

void expect_layout_error(const char* model, const char* spec, const std::string& needle) {
  ModelSpec m = load_model(model);
  try {
    TrainerPlacement t(m, parse_trainer_spec(spec));
    FAIL() << spec << ": expected an InputError containing " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--trainer"), std::string::npos) << e.what();
  }
}

// FSDP2 as vLLM's FSDP examples train (torch fully_shard over the shard group): every dense
// parameter chunked on dim 0 with torch.chunk's ceil-sized chunks; Transformers' fused experts
// [E, ...] sharded on dim 0, so per-expert checkpoint tensors are whole on one rank.
TEST(TrainerLayout, FsdpChunksEveryParameterOnDim0) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  TrainerPlacement t(m, parse_trainer_spec("fsdp8"));
  EXPECT_EQ(t.world_size(), 8);
  EXPECT_EQ(t.layout().describe(), "fsdp8,pp1,dp1");
  EXPECT_EQ(t.ep(), 8);
  EXPECT_EQ(t.etp(), 1);
  // q_proj [8192, 4096]: 1024 rows a rank; rank 3 holds rows 3072..4095.
  auto q = t.pieces(m.find("model.layers.0.self_attn.q_proj.weight"));
  ASSERT_EQ(q.size(), 8u);
  EXPECT_EQ(q[3].box.start, (std::vector<int64_t>{3072, 0}));
  EXPECT_EQ(q[3].box.length, (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(q[3].ranks, (std::vector<int>{3}));
  // o_proj [4096, 8192] is chunked on dim 0 too (FSDP knows no row/column parallelism).
  auto o = t.pieces(m.find("model.layers.5.self_attn.o_proj.weight"));
  EXPECT_EQ(o[1].box.start, (std::vector<int64_t>{512, 0}));
  EXPECT_EQ(o[1].box.length, (std::vector<int64_t>{512, 8192}));
  // Norms are chunked, not replicated: q_norm [128] in 16s.
  auto qn = t.pieces(m.find("model.layers.7.self_attn.q_norm.weight"));
  ASSERT_EQ(qn.size(), 8u);
  EXPECT_EQ(qn[7].box.start[0], 112);
  EXPECT_EQ(qn[7].box.length[0], 16);
  // The embedding, 151936 rows: 18992 a rank, no vocab padding.
  auto emb = t.pieces(m.find("model.embed_tokens.weight"));
  EXPECT_EQ(emb[7].box.start[0], 7 * 18992);
  EXPECT_EQ(emb[7].box.length[0], 18992);
  // 128 experts over 8 ranks: expert 37 is whole on rank 2 (experts 32..47).
  auto e = t.pieces(m.find("model.layers.93.mlp.experts.37.down_proj.weight"));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].ranks, (std::vector<int>{2}));
  EXPECT_EQ(e[0].box, Box::full({4096, 1536}));

  // torch.chunk(16 rows, 7): chunks of 3, the sixth of 1, the seventh empty (still a holding:
  // the rank takes part in the group's all-gather). HSDP: dp2 replicates the group.
  ModelSpec tiny = load_model("tiny-qwen3");
  TrainerPlacement h(tiny, parse_trainer_spec("fsdp7,dp2"));
  EXPECT_EQ(h.world_size(), 14);
  const int32_t kn = tiny.find("model.layers.0.self_attn.k_norm.weight");
  ASSERT_EQ(tiny.param(kn).shape, (std::vector<int64_t>{16}));
  auto k = h.pieces(kn);
  ASSERT_EQ(k.size(), 7u);
  EXPECT_EQ(k[5].box.start[0], 15);
  EXPECT_EQ(k[5].box.length[0], 1);
  EXPECT_EQ(k[6].box.length[0], 0);
  EXPECT_EQ(k[6].ranks, (std::vector<int>{6, 13}));
}

TEST(TrainerLayout, FsdpRefusesWhatItDoesNotModel) {
  expect_layout_error("qwen3-235b-a22b", "fsdp8,tp2", "with Megatron tensor parallelism is not modelled");
  expect_layout_error("qwen3-235b-a22b", "fsdp8,etp1", "drop etp");
  expect_layout_error("qwen3-235b-a22b", "fsdp8,ep4", "ep is 8");
  expect_layout_error("qwen3-235b-a22b", "fsdp3", "num_experts");
  EXPECT_EQ(TrainerPlacement(load_model("qwen3-235b-a22b"), parse_trainer_spec("fsdp8,ep8")).ep(), 8);
  EXPECT_EQ(TrainerPlacement(load_model("qwen3-8b"), parse_trainer_spec("fsdp8")).ep(), 1);
}

TEST(TrainerLayout, NonDividingLayoutsSayWhich) {
  expect_layout_error("qwen3-235b-a22b", "tp3", "q_proj rows");
  expect_layout_error("qwen3-235b-a22b", "tp4,ep3", "num_experts");
  expect_layout_error("qwen3-235b-a22b", "tp4,pp3", "num_hidden_layers = 94");
  expect_layout_error("qwen3-235b-a22b", "tp4,pp2,layers=40/40", "sum to 80");
  expect_layout_error("qwen3-8b", "tp2,ep2", "no experts");
  expect_layout_error("qwen3-235b-a22b", "tp4,ep8,etp1,dp1", "must divide tp*dp");
  expect_layout_error("qwen3-235b-a22b", "tp4,ep8,etp5", "moe_intermediate_size");
  EXPECT_THROW(parse_trainer_spec("tp4,xx2"), InputError);
  EXPECT_THROW(parse_trainer_spec("tp0"), InputError);
  EXPECT_THROW(parse_trainer_spec("tp4,layers=a/b"), InputError);
}

}  // namespace
}  // namespace shardsync
