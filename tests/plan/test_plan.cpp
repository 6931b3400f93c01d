// Recorded plans against the reference: the same loaders run on real tensors.
#include <gtest/gtest.h>

#include <cstring>

#include "layout/parse.hpp"
#include "plan/loaders.hpp"
#include "plan/plan.hpp"
#include "tensor/real_tensor.hpp"

namespace shardsync {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

// Distinct, non-zero bytes for every element of every HF tensor.
std::vector<RealTensor> make_hf_tensors(const ModelSpec& m) {
  std::vector<RealTensor> out;
  for (int32_t i = 0; i < int32_t(m.params().size()); ++i) {
    const ParamMeta& p = m.param(i);
    out.push_back(RealTensor::generate(p.dtype, p.shape,
                                       [i](int64_t e) { return mix(uint64_t(i) << 40 ^ uint64_t(e)) | 0x0101; }));
  }
  return out;
}

constexpr uint8_t kSentinel = 0xA5;

std::vector<RealTensor> make_params(const std::vector<EngineParam>& params) {
  std::vector<RealTensor> out;
  for (const auto& p : params) {
    RealTensor t = RealTensor::zeros(p.dtype, p.shape);
    std::memset(t.storage(), kSentinel, size_t(t.storage_bytes()));
    out.push_back(t);
  }
  return out;
}

struct Case {
  const char* model;
  const char* inference;
};

void check_case(const Case& c) {
  SCOPED_TRACE(std::string(c.model) + " " + c.inference);
  ModelSpec m = load_model(c.model);
  InferenceLayout l = parse_inference_spec(c.inference);
  l.replicas = 1;
  InferencePlacement inf(m, l);
  std::vector<RealTensor> hf = make_hf_tensors(m);
  for (int rank = 0; rank < inf.world_size(); ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    RankPlan plan = record_rank_plan(m, inf, rank);
    // Reference: the loaders on real tensors.
    EngineParams eps(m, inf, rank);
    ParamStore<RealTensor> ref;
    ref.params = &eps;
    ref.tensors = make_params(eps.params());
    LoaderRank r(m, inf, rank);
    for (int32_t i = 0; i < int32_t(m.params().size()); ++i) load_weight(r, i, hf[size_t(i)], ref);
    // Replay: the plan's compiled copies from the full HF tensors.
    std::vector<RealTensor> out = make_params(plan.params);
    std::vector<std::vector<int>> writes(plan.params.size());
    for (size_t p = 0; p < plan.params.size(); ++p) writes[p].assign(size_t(plan.params[p].numel()), 0);
    for (const PlanEntry& e : plan.entries) {
      const EngineParam& ep = plan.params[size_t(e.engine_param)];
      replay_entry(e, e.is_fill() ? nullptr : hf[size_t(e.hf_param)].storage(), out[size_t(e.engine_param)].storage(),
                   dtype_bytes(ep.dtype));
      for_each_index(e.copy, [&](int64_t, int64_t t) { writes[size_t(e.engine_param)][size_t(t)]++; });
      // A stored plan must compile back to the same copy.
      EXPECT_EQ(compile_entry(e, e.is_fill() ? std::vector<int64_t>{} : m.param(e.hf_param).shape, ep.shape), e.copy);
    }
    for (size_t p = 0; p < plan.params.size(); ++p) {
      const EngineParam& ep = plan.params[p];
      ASSERT_EQ(ref.tensors[p].storage_bytes(), out[p].storage_bytes());
      EXPECT_EQ(std::memcmp(ref.tensors[p].storage(), out[p].storage(), size_t(out[p].storage_bytes())), 0)
          << "replay differs from the reference loader in " << ep.name;
      for (size_t e = 0; e < writes[p].size(); ++e)
        ASSERT_EQ(writes[p][e], 1) << ep.name << " element " << e << " written " << writes[p][e] << " times";
    }
    // The rule-based layout count and the recorded plan agree on the bytes this rank pulls.
    EXPECT_EQ(plan.copy_bytes(m), inf.needed_bytes(rank));
  }
}

TEST(Plan, ReplayEqualsReferenceDense) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "tp2,pp2", "tp2,dp2"}) check_case({"tiny-qwen3", l});
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "pp3"}) check_case({"tiny-llama", l});
}

TEST(Plan, ReplayEqualsReferenceQwen3Moe) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "dp4,ep4", "dp3,ep3", "tp2,dp2", "tp2,pp2",
                        "dp2,tp2,ep4"})
    check_case({"tiny-qwen3-moe", l});
}

TEST(Plan, ReplayEqualsReferenceMlaMoe) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "tp2,pp2", "tp2,dp4", "dp8,ep8"})
    check_case({"tiny-kimi", l});
}

TEST(Plan, ReplayEqualsReferenceLlama4) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "tp2,ep2", "dp4,ep4", "tp2,dp2", "tp2,pp2", "dp3,ep3"})
    check_case({"tiny-llama4", l});
}

TEST(Plan, Qwen3At235BTp8Facts) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  InferenceLayout l = parse_inference_spec("tp8");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int t : {0, 3, 6}) {
    RankPlan plan = record_rank_plan(m, inf, t);
    int32_t q = m.find("model.layers.0.self_attn.q_proj.weight");
    int32_t k = m.find("model.layers.0.self_attn.k_proj.weight");
    int32_t v = m.find("model.layers.0.self_attn.v_proj.weight");
    int found = 0;
    for (const PlanEntry& e : plan.entries) {
      if (e.hf_param == q) {  // q rows [1024t, +1024) at row 0
        EXPECT_EQ(e.copy.src_offset, 1024 * t * 4096);
        EXPECT_EQ(e.copy.numel, 1024 * 4096);
        EXPECT_EQ(e.dst_offset, 0);
        ++found;
      } else if (e.hf_param == k) {  // KV head t // 2 placed at row 1024
        EXPECT_EQ(e.copy.src_offset, 128 * (t / 2) * 4096);
        EXPECT_EQ(e.copy.numel, 128 * 4096);
        EXPECT_EQ(e.dst_offset, 1024 * 4096);
        ++found;
      } else if (e.hf_param == v) {  // same head at row 1152
        EXPECT_EQ(e.copy.src_offset, 128 * (t / 2) * 4096);
        EXPECT_EQ(e.dst_offset, 1152 * 4096);
        ++found;
      }
    }
    EXPECT_EQ(found, 3);
    EXPECT_EQ(plan.params[size_t(EngineParams(m, inf, t).find(0, Slot::kQKV))].shape, (std::vector<int64_t>{1280, 4096}));
    int32_t w13 = EngineParams(m, inf, t).find(0, Slot::kW13);
    EXPECT_EQ(plan.params[size_t(w13)].shape, (std::vector<int64_t>{128, 384, 4096}));
  }
}

// Finds the entries of one HF tensor in a rank's plan.
std::vector<const PlanEntry*> entries_of(const RankPlan& plan, int32_t hf) {
  std::vector<const PlanEntry*> out;
  for (const auto& e : plan.entries)
    if (e.hf_param == hf) out.push_back(&e);
  return out;
}

TEST(Plan, VocabPaddingIsZeroFilled) {
  ModelSpec m = load_model("tiny-qwen3");  // vocab 1000 -> padded 1024, 128 rows per rank at tp8
  InferenceLayout l = parse_inference_spec("tp8");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  RankPlan plan = record_rank_plan(m, inf, 7);
  auto e = entries_of(plan, m.find("model.embed_tokens.weight"));
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]->copy.src_offset, 896 * 64);
  EXPECT_EQ(e[0]->copy.numel, 104 * 64);
  int fills = 0;
  for (const auto& x : plan.entries)
    if (x.is_fill()) {
      EXPECT_EQ(x.dst_offset, 104 * 64);
      EXPECT_EQ(x.numel(), 24 * 64);
      ++fills;
    }
  EXPECT_EQ(fills, 1);
}

TEST(Plan, KimiMlaFacts) {
  ModelSpec m = load_model("kimi-k2-instruct");
  LayoutFile f = load_layout("kimi-k2-published");
  f.inference.replicas = 1;
  InferencePlacement inf(m, f.inference);
  for (int t : {0, 17, 31}) {
    RankPlan plan = record_rank_plan(m, inf, t);
    // q_b_proj column-parallel: 2 heads of 192 rows per rank.
    auto qb = entries_of(plan, m.find("model.layers.5.self_attn.q_b_proj.weight"));
    ASSERT_EQ(qb.size(), 1u);
    EXPECT_EQ(qb[0]->copy.src_offset, int64_t(t) * 384 * 1536);
    EXPECT_EQ(qb[0]->copy.numel, 384 * 1536);
    // q_a and kv_a fused into one replicated parameter: rows [0,1536) and [1536,2112).
    auto qa = entries_of(plan, m.find("model.layers.5.self_attn.q_a_proj.weight"));
    auto kva = entries_of(plan, m.find("model.layers.5.self_attn.kv_a_proj_with_mqa.weight"));
    ASSERT_EQ(qa.size(), 1u);
    ASSERT_EQ(kva.size(), 1u);
    EXPECT_EQ(qa[0]->copy.src_offset, 0);
    EXPECT_EQ(qa[0]->copy.numel, 1536 * 7168);
    EXPECT_EQ(kva[0]->dst_offset, 1536 * 7168);
    EXPECT_EQ(kva[0]->copy.numel, 576 * 7168);
    // o_proj row-parallel: columns [128*2*t, +256) of every row.
    auto o = entries_of(plan, m.find("model.layers.5.self_attn.o_proj.weight"));
    ASSERT_EQ(o.size(), 1u);
    EXPECT_EQ(o[0]->copy.src_offset, int64_t(t) * 256);
    EXPECT_EQ(o[0]->copy.dims.front(), (CopyDim{7168, 64 * 128, 256}));
    // fp32 router bias, replicated.
    auto bias = entries_of(plan, m.find("model.layers.5.mlp.gate.e_score_correction_bias"));
    ASSERT_EQ(bias.size(), 1u);
    EXPECT_EQ(plan.params[size_t(bias[0]->engine_param)].dtype, DType::kF32);
    // EP 32: experts [12t, 12t+12).
    auto expert = entries_of(plan, m.find("model.layers.5.mlp.experts." + std::to_string(12 * t + 11) + ".down_proj.weight"));
    EXPECT_EQ(expert.size(), 1u);
    EXPECT_TRUE(entries_of(plan, m.find("model.layers.5.mlp.experts." + std::to_string((12 * t + 12) % 384) +
                                        ".down_proj.weight")).empty());
  }
}

TEST(Plan, Llama4FusedExpertsAndRopePermutation) {
  ModelSpec m = load_model("llama-4-scout-17b-16e");
  InferenceLayout l = parse_inference_spec("tp8,ep8");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  RankPlan plan = record_rank_plan(m, inf, 3);  // experts 6 and 7
  auto gu = entries_of(plan, m.find("language_model.model.layers.0.feed_forward.experts.gate_up_proj"));
  ASSERT_EQ(gu.size(), 2u);  // gate half into w13[:, :8192], up half into w13[:, 8192:]
  EXPECT_EQ(gu[0]->ops.size(), 4u);  // chunk, transpose, index_select, narrow
  EXPECT_EQ(format_op(gu[0]->ops[0]), "chunk(2, -1, 0)");
  EXPECT_EQ(format_op(gu[0]->ops[2]), "index_select(0, 6, 2)");
  EXPECT_EQ(gu[0]->copy.src_offset, int64_t(6) * 5120 * 16384);
  EXPECT_EQ(gu[1]->copy.src_offset, int64_t(6) * 5120 * 16384 + 8192);
  EXPECT_EQ(gu[1]->dst_offset, int64_t(8192) * 5120);
  EXPECT_EQ(gu[0]->numel(), int64_t(2) * 8192 * 5120);
  // q_proj: TP rank 3 keeps heads 15..19; new row j of a head is old row 2j (j < 64), 2(j-64)+1 after.
  auto q = entries_of(plan, m.find("language_model.model.layers.0.self_attn.q_proj.weight"));
  ASSERT_EQ(q.size(), 1u);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for_each_index(q[0]->copy, [&](int64_t s, int64_t t) {
    if (t % 5120 == 0 && t / 5120 < 128) pairs.emplace_back(t / 5120, s / 5120);
  });
  ASSERT_EQ(pairs.size(), 128u);
  int64_t head0 = 15 * 128;
  EXPECT_EQ(pairs[1].second, head0 + 2);
  EXPECT_EQ(pairs[63].second, head0 + 126);
  EXPECT_EQ(pairs[64].second, head0 + 1);
  EXPECT_EQ(pairs[127].second, head0 + 127);
}

TEST(Plan, WideEpPullsOnlyLocalExperts) {
  ModelSpec m = load_model("qwen3-235b-a22b");
  InferenceLayout l = parse_inference_spec("dp16,ep16");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  RankPlan plan = record_rank_plan(m, inf, 5);
  for (const PlanEntry& e : plan.entries) {
    const ParamMeta& p = m.param(e.hf_param);
    if (p.expert >= 0) {
      EXPECT_GE(p.expert, 40);
      EXPECT_LT(p.expert, 48);
    }
  }
  int32_t w13 = EngineParams(m, inf, 5).find(3, Slot::kW13);
  EXPECT_EQ(plan.params[size_t(w13)].shape, (std::vector<int64_t>{8, 3072, 4096}));
}

}  // namespace
}  // namespace shardsync
