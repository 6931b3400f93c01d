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
  bool shared_experts_tp = false;  // the pre-0.11 vLLM rule
};

void check_case(const Case& c) {
  SCOPED_TRACE(std::string(c.model) + " " + c.inference);
  ModelSpec m = load_model(c.model);
  InferenceLayout l = parse_inference_spec(c.inference);
  l.replicas = 1;
  l.shared_experts_tp = c.shared_experts_tp;
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

// Finds the entries of one HF tensor in a rank's plan.
std::vector<const PlanEntry*> entries_of(const RankPlan& plan, int32_t hf) {
  std::vector<const PlanEntry*> out;
  for (const auto& e : plan.entries)
    if (e.hf_param == hf) out.push_back(&e);
  return out;
}

// vLLM's linear expert map: the rank owns experts [first, first + count) of `total` and
// pulls nothing of the next one. `name(e)` is the HF name of one tensor of expert e.
template <class Name>
void expect_owns_experts(const ModelSpec& m, const RankPlan& plan, int64_t first, int64_t count, int64_t total,
                         Name name) {
  EXPECT_EQ(entries_of(plan, m.find(name(first))).size(), 1u) << name(first);
  EXPECT_EQ(entries_of(plan, m.find(name(first + count - 1))).size(), 1u) << name(first + count - 1);
  EXPECT_TRUE(entries_of(plan, m.find(name((first + count) % total))).empty()) << name((first + count) % total);
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
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "tp2,pp2", "tp2,dp4", "dp8,ep8", "dp2,tp2,ep4",
                        "dp2,tp4,ep8"})
    check_case({"tiny-kimi", l});
  check_case({"tiny-kimi", "dp2,tp2,ep4", true});
}

TEST(Plan, ReplayEqualsReferenceLlama4) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "tp2,ep2", "dp4,ep4", "tp2,dp2", "tp2,pp2", "dp3,ep3"})
    check_case({"tiny-llama4", l});
}

// The new families over TP 1/2/4/8 (KV heads < TP where the model allows), EP on and off,
// DP > 1 and PP > 1.
TEST(Plan, ReplayEqualsReferenceQwen2) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "tp2,pp2", "tp2,dp2", "dp2", "pp4"}) check_case({"tiny-qwen2", l});
}

TEST(Plan, ReplayEqualsReferenceMistralAndLlamaMlpBias) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "tp2,pp3", "tp4,dp2"}) check_case({"tiny-mistral", l});
  for (const char* l : {"tp2,pp2", "tp4,dp2"}) check_case({"tiny-llama", l});
}

TEST(Plan, ReplayEqualsReferenceMixtral) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "dp4,ep4", "dp3,ep3", "tp2,dp2", "tp2,pp3",
                        "dp2,tp2,ep4", "tp8,ep8"})
    check_case({"tiny-mixtral", l});
}

TEST(Plan, ReplayEqualsReferenceDeepseekV2) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "tp2,pp2", "tp2,dp4", "dp8,ep8", "pp3",
                        "dp3,ep3"})
    check_case({"tiny-deepseek-v2", l});
}

TEST(Plan, ReplayEqualsReferenceGlm4Moe) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "dp4,ep4", "tp2,dp2", "tp2,pp3", "dp8,ep8",
                        "dp3,ep3"})
    check_case({"tiny-glm4-moe", l});
}

TEST(Plan, ReplayEqualsReferenceGptOss) {
  for (const char* l : {"tp1", "tp2", "tp4", "tp8", "dp2,ep2", "tp2,ep2", "dp4,ep4", "tp2,dp2", "dp2", "tp2,pp3",
                        "dp8,ep8", "tp2,pp2,ep2"})
    check_case({"tiny-gpt-oss", l});
}

// The source element a plan entry copies into destination element `dst` of its engine
// parameter: the copy's loops decomposed by their destination strides (a dense destination).
int64_t src_at(const PlanEntry& e, int64_t dst) {
  std::vector<CopyDim> dims = e.copy.dims;
  std::sort(dims.begin(), dims.end(), [](const CopyDim& a, const CopyDim& b) { return a.dst_stride > b.dst_stride; });
  int64_t rem = dst - e.copy.dst_offset, src = e.copy.src_offset;
  for (const CopyDim& d : dims) {
    int64_t i = rem / d.dst_stride;
    EXPECT_LT(i, d.size) << "destination element " << dst << " outside the copy";
    rem -= i * d.dst_stride;
    src += i * d.src_stride;
  }
  EXPECT_EQ(rem, 0);
  return src;
}

// Hand-written vLLM facts for gpt-oss-20b (gpt_oss.py _load_weights_other and load_weights;
// docs/research/gpt-oss.md): H 2880, 64 q heads and 8 KV heads of 64, I 2880, 32 experts.
TEST(Plan, GptOss20bTp4Facts) {
  ModelSpec m = load_model("gpt-oss-20b");
  InferenceLayout l = parse_inference_spec("tp4");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  const std::string L = "model.layers.5.";
  for (int t : {0, 1, 3}) {
    SCOPED_TRACE("rank " + std::to_string(t));
    RankPlan plan = record_rank_plan(m, inf, t);
    EngineParams eps(m, inf, t);
    auto param = [&](const std::string& n) -> const EngineParam& {
      int32_t i = eps.find(n);
      EXPECT_GE(i, 0) << n;
      return eps.params()[size_t(std::max(i, 0))];
    };
    auto one = [&](const std::string& hf) -> const PlanEntry& {
      auto e = entries_of(plan, m.find(hf));
      EXPECT_EQ(e.size(), 1u) << hf;
      return *e.at(0);
    };
    // vLLM 0.11.0 names and per-rank shapes.
    EXPECT_EQ(param(L + "attn.qkv.weight").shape, (std::vector<int64_t>{(16 + 2 + 2) * 64, 2880}));
    EXPECT_EQ(param(L + "attn.qkv.bias").shape, (std::vector<int64_t>{(16 + 2 + 2) * 64}));
    EXPECT_EQ(param(L + "attn.o_proj.bias").shape, (std::vector<int64_t>{2880}));
    EXPECT_EQ(param(L + "attn.sinks").shape, (std::vector<int64_t>{16}));
    EXPECT_EQ(param(L + "mlp.experts.w13_weight").shape, (std::vector<int64_t>{32, 1440, 2880}));
    EXPECT_EQ(param(L + "mlp.experts.w13_bias").shape, (std::vector<int64_t>{32, 1440}));
    EXPECT_EQ(param(L + "mlp.experts.w2_weight").shape, (std::vector<int64_t>{32, 2880, 720}));
    EXPECT_EQ(param(L + "mlp.experts.w2_bias").shape, (std::vector<int64_t>{32, 2880}));
    EXPECT_GE(eps.find("model.embedding.weight"), 0);
    // Biases: q heads [16t, 16t+16), KV heads [2t, 2t+2), o_proj's whole on every rank.
    EXPECT_EQ(one(L + "self_attn.q_proj.bias").copy.src_offset, 1024 * t);
    EXPECT_EQ(one(L + "self_attn.k_proj.bias").copy.src_offset, 128 * t);
    EXPECT_EQ(one(L + "self_attn.k_proj.bias").dst_offset, 1024);
    EXPECT_EQ(one(L + "self_attn.v_proj.bias").dst_offset, 1024 + 128);
    EXPECT_EQ(one(L + "self_attn.o_proj.bias").copy.numel, 2880);
    // Sinks: the heads of the rank's q shard.
    EXPECT_EQ(one(L + "self_attn.sinks").copy.src_offset, 16 * t);
    EXPECT_EQ(one(L + "self_attn.sinks").copy.numel, 16);
    // Router and its bias whole (a plain nn.Linear).
    EXPECT_EQ(one(L + "mlp.router.weight").copy.numel, 32 * 2880);
    EXPECT_EQ(one(L + "mlp.router.bias").copy.numel, 32);
    // gate_up [E, H, 2I]: columns [1440t, 1440t + 1440) of the interleaved last dimension, kept
    // interleaved and transposed: w13[e][2k][h] = gate of neuron 720t + k = gate_up[e][h][2(720t + k)],
    // w13[e][2k + 1][h] its up.
    const PlanEntry& gu = one(L + "mlp.experts.gate_up_proj");
    for (auto [e, k, h] : {std::tuple<int64_t, int64_t, int64_t>{0, 0, 0}, {7, 3, 11}, {31, 719, 2879}, {12, 400, 5}}) {
      EXPECT_EQ(src_at(gu, (e * 1440 + 2 * k) * 2880 + h), (e * 2880 + h) * 5760 + 2 * (720 * t + k));
      EXPECT_EQ(src_at(gu, (e * 1440 + 2 * k + 1) * 2880 + h), (e * 2880 + h) * 5760 + 2 * (720 * t + k) + 1);
    }
    const PlanEntry& gub = one(L + "mlp.experts.gate_up_proj_bias");
    EXPECT_EQ(src_at(gub, 5 * 1440 + 9), 5 * 5760 + 1440 * t + 9);
    // down_proj [E, I, H]: rows [720t, 720t + 720) transposed: w2[e][h][i] = down[e][720t + i][h].
    const PlanEntry& dn = one(L + "mlp.experts.down_proj");
    EXPECT_EQ(src_at(dn, (3 * 2880 + 17) * 720 + 700), (3 * 2880 + 720 * t + 700) * 2880 + 17);
    // down_proj's bias: whole on rank 0, zeros elsewhere (added once by the MoE all-reduce).
    auto db = entries_of(plan, m.find(L + "mlp.experts.down_proj_bias"));
    if (t == 0) {
      ASSERT_EQ(db.size(), 1u);
      EXPECT_EQ(db[0]->copy.numel, 32 * 2880);
    } else {
      EXPECT_TRUE(db.empty());
      bool zeroed = false;
      for (const auto& e : plan.entries)
        zeroed = zeroed || (e.is_fill() && e.engine_param == eps.find(L + "mlp.experts.w2_bias") && e.numel() == 32 * 2880);
      EXPECT_TRUE(zeroed) << "w2_bias not zero-filled on rank " << t;
    }
  }
  // EP 4 (tp4,ep4): rank r owns experts [8r, 8r + 8) whole, w2_bias included (not zeroed).
  InferenceLayout le = parse_inference_spec("tp4,ep4");
  le.replicas = 1;
  InferencePlacement ep(m, le);
  for (int r : {0, 2}) {
    RankPlan plan = record_rank_plan(m, ep, r);
    auto gu = entries_of(plan, m.find(L + "mlp.experts.gate_up_proj"));
    ASSERT_EQ(gu.size(), 1u);
    EXPECT_EQ(gu[0]->copy.numel, int64_t(8) * 2880 * 5760);
    EXPECT_EQ(src_at(*gu[0], (1 * 5760 + 2 * 100 + 1) * 2880 + 9), ((8 * r + 1) * 2880 + 9) * 5760 + 201);
    auto db = entries_of(plan, m.find(L + "mlp.experts.down_proj_bias"));
    ASSERT_EQ(db.size(), 1u);
    EXPECT_EQ(db[0]->copy.src_offset, 8 * r * 2880);
    EXPECT_EQ(db[0]->copy.numel, 8 * 2880);
  }
  // vLLM 0.11.0 cannot load these layouts (EP, DP > 1); the plans say whose loader they follow.
  EXPECT_NE(vllm_rules(m.config(), le).find("0.12.0"), std::string::npos);
  EXPECT_EQ(vllm_rules(m.config(), l), "vLLM 0.11.0");
}

// glm4_moe.py: qkv_bias from attention_bias, o_proj without bias, the gate an fp32
// nn.Linear (replicated), e_score_correction_bias fp32, shared experts TP-sharded.
TEST(Plan, Glm45AirTp8Ep8Facts) {
  ModelSpec m = load_model("glm-4.5-air");
  InferenceLayout l = parse_inference_spec("tp8,ep8");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int t : {0, 5}) {
    RankPlan plan = record_rank_plan(m, inf, t);
    EngineParams eps(m, inf, t);
    EXPECT_EQ(eps.params()[size_t(eps.find(2, Slot::kQKVBias))].shape, (std::vector<int64_t>{(12 + 2) * 128}));
    EXPECT_LT(eps.find(2, Slot::kOBias), 0);
    EXPECT_EQ(eps.params()[size_t(eps.find(2, Slot::kRouter))].dtype, DType::kF32);
    EXPECT_EQ(eps.params()[size_t(eps.find(2, Slot::kSharedGateUp))].shape, (std::vector<int64_t>{2 * 1408 / 8, 4096}));
    auto q = entries_of(plan, m.find("model.layers.2.self_attn.q_proj.bias"));
    auto v = entries_of(plan, m.find("model.layers.2.self_attn.v_proj.bias"));
    ASSERT_EQ(q.size(), 1u);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(q[0]->copy.src_offset, 1536 * t);  // 12 heads of 128
    EXPECT_EQ(v[0]->copy.src_offset, 128 * t);   // KV head t
    EXPECT_EQ(v[0]->dst_offset, 1536 + 128);
    auto gate = entries_of(plan, m.find("model.layers.2.mlp.gate.weight"));
    ASSERT_EQ(gate.size(), 1u);
    EXPECT_EQ(gate[0]->copy.numel, 128 * 4096);
    expect_owns_experts(m, plan, 16 * t, 16, 128, [](int64_t e) {  // EP 8 over 128 experts
      return "model.layers.2.mlp.experts." + std::to_string(e) + ".gate_proj.weight";
    });
  }
}

// vLLM 0.11.0 deepseek_v2.py: under sequence-parallel MoE (EP, tp > 1, dp > 1, the default
// all2all backend) DeepseekV2MLP's shared experts get disable_tp, so every rank holds them
// whole; vLLM 0.10 split them over the attention TP group (--shared-experts-tp).
TEST(Plan, SequenceParallelMoeKeepsSharedExpertsWhole) {
  ModelSpec m = load_model("tiny-kimi");  // shared expert width 32, hidden 64
  auto shared_gate = [&](const char* spec, bool older, int rank) {
    InferenceLayout l = parse_inference_spec(spec);
    l.replicas = 1;
    l.shared_experts_tp = older;
    InferencePlacement inf(m, l);
    RankPlan plan = record_rank_plan(m, inf, rank);
    auto e = entries_of(plan, m.find("model.layers.1.mlp.shared_experts.gate_proj.weight"));
    EXPECT_EQ(e.size(), 1u) << spec;
    return e.empty() ? std::pair<int64_t, int64_t>{-1, -1} : std::pair{e[0]->copy.src_offset, e[0]->copy.numel};
  };
  EXPECT_EQ(shared_gate("tp2,dp2,ep4", false, 0), (std::pair<int64_t, int64_t>{0, 32 * 64}));  // rows [0:32]
  EXPECT_EQ(shared_gate("tp2,dp2,ep4", false, 3), (std::pair<int64_t, int64_t>{0, 32 * 64}));
  EXPECT_EQ(shared_gate("tp2,dp2,ep4", true, 0), (std::pair<int64_t, int64_t>{0, 16 * 64}));   // rows [0:16]
  EXPECT_EQ(shared_gate("tp2,dp2,ep4", true, 3), (std::pair<int64_t, int64_t>{16 * 64, 16 * 64}));
  // Not sequence-parallel: no EP, or tp 1, or dp 1.
  EXPECT_EQ(shared_gate("tp2,dp2", false, 1), (std::pair<int64_t, int64_t>{16 * 64, 16 * 64}));
  EXPECT_EQ(shared_gate("tp2,ep2", false, 1), (std::pair<int64_t, int64_t>{16 * 64, 16 * 64}));
  EXPECT_EQ(shared_gate("dp4,ep4", false, 1), (std::pair<int64_t, int64_t>{0, 32 * 64}));
  // Only DeepSeek-class models: GLM-4.5's shared experts stay split (glm4_moe.py has no such path).
  ModelSpec glm = load_model("tiny-glm4-moe");
  InferenceLayout gl = parse_inference_spec("tp2,dp2,ep4");
  gl.replicas = 1;
  EXPECT_FALSE(InferencePlacement(glm, gl).shared_experts_whole());
  // Kimi K2 at tp8,dp4,ep32: each rank takes 7/8 of 60 layers' shared experts more, 4.62 GB.
  ModelSpec kimi = load_model("kimi-k2-instruct");
  InferenceLayout k = parse_inference_spec("tp8,dp4,ep32");
  k.replicas = 1;
  InferencePlacement now(kimi, k);
  k.shared_experts_tp = true;
  InferencePlacement before(kimi, k);
  const int64_t per_layer = int64_t(3) * 2048 * 7168 * 2;  // gate, up, down of one shared expert, bf16
  EXPECT_EQ(now.needed_bytes(0) - before.needed_bytes(0), 60 * per_layer / 8 * 7);
  EXPECT_EQ(record_rank_plan(kimi, now, 5).copy_bytes(kimi), now.needed_bytes(5));
}

// Hand-written vLLM facts (qwen2.py: QKVParallelLinear bias=True, o_proj bias=False).
TEST(Plan, Qwen2At7BTp4BiasFacts) {
  ModelSpec m = load_model("qwen2.5-7b-instruct");
  InferenceLayout l = parse_inference_spec("tp4");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int t : {0, 1, 3}) {
    RankPlan plan = record_rank_plan(m, inf, t);
    EngineParams eps(m, inf, t);
    ASSERT_GE(eps.find(5, Slot::kQKVBias), 0);
    EXPECT_EQ(plan.params[size_t(eps.find(5, Slot::kQKVBias))].shape, (std::vector<int64_t>{(7 + 2) * 128}));
    EXPECT_LT(eps.find(5, Slot::kOBias), 0);
    EXPECT_LT(eps.find("model.layers.5.self_attn.o_proj.bias"), 0);
    // q bias: rows [896t, +896) at 0; k bias: KV head t at 896; v bias: the same head at 1024.
    auto q = entries_of(plan, m.find("model.layers.5.self_attn.q_proj.bias"));
    auto k = entries_of(plan, m.find("model.layers.5.self_attn.k_proj.bias"));
    auto v = entries_of(plan, m.find("model.layers.5.self_attn.v_proj.bias"));
    ASSERT_EQ(q.size(), 1u);
    ASSERT_EQ(k.size(), 1u);
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(q[0]->copy.src_offset, 896 * t);
    EXPECT_EQ(q[0]->copy.numel, 896);
    EXPECT_EQ(q[0]->dst_offset, 0);
    EXPECT_EQ(k[0]->copy.src_offset, 128 * t);
    EXPECT_EQ(k[0]->copy.numel, 128);
    EXPECT_EQ(k[0]->dst_offset, 896);
    EXPECT_EQ(v[0]->copy.src_offset, 128 * t);
    EXPECT_EQ(v[0]->dst_offset, 1024);
  }
}

// KV heads replicated over TP: rank t's k/v biases are those of KV head t // (T / nkv).
TEST(Plan, Qwen2ReplicatedKvHeadBiases) {
  ModelSpec m = load_model("tiny-qwen2");  // 8 heads of 8, 2 KV heads
  InferenceLayout l = parse_inference_spec("tp8");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int t = 0; t < 8; ++t) {
    RankPlan plan = record_rank_plan(m, inf, t);
    auto k = entries_of(plan, m.find("model.layers.1.self_attn.k_proj.bias"));
    ASSERT_EQ(k.size(), 1u);
    EXPECT_EQ(k[0]->copy.src_offset, 8 * (t / 4));
    EXPECT_EQ(k[0]->copy.numel, 8);
    EXPECT_EQ(k[0]->dst_offset, 8);  // after this rank's one q head
  }
}

// llama.py: mlp_bias gives gate_up_proj (merged column) and down_proj (row) biases; the
// merged bias holds [gate rows of rank t ; up rows of rank t], the row-parallel one is whole.
TEST(Plan, LlamaMlpBiasFacts) {
  ModelSpec m = load_model("tiny-llama");  // intermediate 96, hidden 64
  InferenceLayout l = parse_inference_spec("tp2");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int t : {0, 1}) {
    RankPlan plan = record_rank_plan(m, inf, t);
    EngineParams eps(m, inf, t);
    ASSERT_GE(eps.find(2, Slot::kGateUpBias), 0);
    EXPECT_EQ(eps.params()[size_t(eps.find(2, Slot::kGateUpBias))].name, "model.layers.2.mlp.gate_up_proj.bias");
    EXPECT_EQ(eps.params()[size_t(eps.find(2, Slot::kGateUpBias))].shape, (std::vector<int64_t>{96}));
    EXPECT_EQ(eps.params()[size_t(eps.find(2, Slot::kDownBias))].shape, (std::vector<int64_t>{64}));
    auto gate = entries_of(plan, m.find("model.layers.2.mlp.gate_proj.bias"));
    auto up = entries_of(plan, m.find("model.layers.2.mlp.up_proj.bias"));
    auto down = entries_of(plan, m.find("model.layers.2.mlp.down_proj.bias"));
    ASSERT_EQ(gate.size(), 1u);
    ASSERT_EQ(up.size(), 1u);
    ASSERT_EQ(down.size(), 1u);
    EXPECT_EQ(gate[0]->copy.src_offset, 48 * t);
    EXPECT_EQ(gate[0]->copy.numel, 48);
    EXPECT_EQ(gate[0]->dst_offset, 0);
    EXPECT_EQ(up[0]->copy.src_offset, 48 * t);
    EXPECT_EQ(up[0]->dst_offset, 48);
    EXPECT_EQ(down[0]->copy.src_offset, 0);
    EXPECT_EQ(down[0]->copy.numel, 64);
  }
}

// mixtral.py: make_expert_params_mapping(gate "w1", down "w2", up "w3"); linear expert map.
TEST(Plan, MixtralExpertFacts) {
  ModelSpec m = load_model("mixtral-8x7b-v0.1");
  InferenceLayout l = parse_inference_spec("tp4,ep4");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int r : {0, 3}) {
    RankPlan plan = record_rank_plan(m, inf, r);  // owns experts 2r, 2r+1
    EngineParams eps(m, inf, r);
    EXPECT_EQ(eps.params()[size_t(eps.find(4, Slot::kW13))].name, "model.layers.4.block_sparse_moe.experts.w13_weight");
    EXPECT_EQ(eps.params()[size_t(eps.find(4, Slot::kW13))].shape, (std::vector<int64_t>{2, 28672, 4096}));
    EXPECT_EQ(eps.params()[size_t(eps.find(4, Slot::kW2))].shape, (std::vector<int64_t>{2, 4096, 14336}));
    const int64_t expert_bytes = int64_t(28672) * 4096;  // elements of one expert's w13
    auto w1 = entries_of(plan, m.find("model.layers.4.block_sparse_moe.experts." + std::to_string(2 * r + 1) + ".w1.weight"));
    auto w3 = entries_of(plan, m.find("model.layers.4.block_sparse_moe.experts." + std::to_string(2 * r + 1) + ".w3.weight"));
    ASSERT_EQ(w1.size(), 1u);
    ASSERT_EQ(w3.size(), 1u);
    EXPECT_EQ(w1[0]->dst_offset, expert_bytes);                        // local expert 1, gate half
    EXPECT_EQ(w3[0]->dst_offset, expert_bytes + int64_t(14336) * 4096);  // its up half
    EXPECT_EQ(w1[0]->copy.numel, int64_t(14336) * 4096);
    expect_owns_experts(m, plan, 2 * r, 2, 8, [](int64_t e) {
      return "model.layers.4.block_sparse_moe.experts." + std::to_string(e) + ".w2.weight";
    });
    // Router replicated whole.
    auto gate = entries_of(plan, m.find("model.layers.4.block_sparse_moe.gate.weight"));
    ASSERT_EQ(gate.size(), 1u);
    EXPECT_EQ(gate[0]->copy.numel, 8 * 4096);
  }
}

// deepseek_v2.py with q_lora_rank None: q_proj ColumnParallelLinear, kv_a_proj_with_mqa a
// ReplicatedLinear (no fused_qkv_a_proj).
TEST(Plan, DeepseekV2LiteFacts) {
  ModelSpec m = load_model("deepseek-v2-lite");
  InferenceLayout l = parse_inference_spec("tp4,ep4");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  for (int t : {0, 2}) {
    RankPlan plan = record_rank_plan(m, inf, t);
    EngineParams eps(m, inf, t);
    EXPECT_LT(eps.find(3, Slot::kFusedQkvA), 0);
    EXPECT_EQ(eps.params()[size_t(eps.find(3, Slot::kQ))].name, "model.layers.3.self_attn.q_proj.weight");
    EXPECT_EQ(eps.params()[size_t(eps.find(3, Slot::kQ))].shape, (std::vector<int64_t>{768, 2048}));
    EXPECT_EQ(eps.params()[size_t(eps.find(3, Slot::kKvA))].shape, (std::vector<int64_t>{576, 2048}));
    auto q = entries_of(plan, m.find("model.layers.3.self_attn.q_proj.weight"));
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q[0]->copy.src_offset, int64_t(768) * t * 2048);  // heads [4t, 4t+4) of 192 rows
    EXPECT_EQ(q[0]->copy.numel, 768 * 2048);
    auto kva = entries_of(plan, m.find("model.layers.3.self_attn.kv_a_proj_with_mqa.weight"));
    ASSERT_EQ(kva.size(), 1u);
    EXPECT_EQ(kva[0]->copy.src_offset, 0);
    EXPECT_EQ(kva[0]->dst_offset, 0);
    EXPECT_EQ(kva[0]->copy.numel, 576 * 2048);
    expect_owns_experts(m, plan, 16 * t, 16, 64, [](int64_t e) {  // EP 4 over 64 experts
      return "model.layers.3.mlp.experts." + std::to_string(e) + ".up_proj.weight";
    });
  }
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
    expect_owns_experts(m, plan, 12 * t, 12, 384, [](int64_t e) {  // EP 32 over 384 experts
      return "model.layers.5.mlp.experts." + std::to_string(e) + ".down_proj.weight";
    });
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
