// FP8 targets (plan/quant.hpp): which parameters a block-FP8 target quantizes, their
// weight_scale_inv shapes and the pieces of merged layers, against hand-written facts of vLLM's
// block-FP8 parameters (docs/fp8.md: Fp8LinearMethod / Fp8MoEMethod.create_weights) for one
// real config of each architecture; and the refusals where a TP shard cuts a 128 x 128 block.
#include <gtest/gtest.h>

#include <map>

#include "common/error.hpp"
#include "layout/parse.hpp"
#include "device/device.hpp"
#include "device/fp8.hpp"
#include "device/synth_hash.hpp"
#include "plan/plan.hpp"
#include "plan/quant.hpp"

namespace shardsync {
namespace {

using Shape = std::vector<int64_t>;

struct Fp8Rank {
  ModelSpec model;
  InferencePlacement inf;
  EngineParams params;
  std::map<std::string, QuantParam> quant;  // by the weight's name

  Fp8Rank(const std::string& model_name, const std::string& spec, int rank = 0)
      : model(load_model(model_name)), inf(model, layout(spec)), params(model, inf, rank) {
    for (QuantParam& q : quant_params(model, inf, params.params())) quant[params.params()[size_t(q.param)].name] = q;
  }
  static InferenceLayout layout(const std::string& spec) {
    InferenceLayout l = parse_inference_spec(spec);
    l.replicas = 1;
    l.quant = Quant::kFp8Block128;
    return l;
  }
  const QuantParam& q(const std::string& name) const {
    auto it = quant.find(name);
    if (it == quant.end()) throw std::runtime_error(name + " is not quantized");
    return it->second;
  }
  const EngineParam& p(const std::string& name) const { return params.params()[size_t(params.find(name))]; }
};

// (part, first row, rows, first scale row) of each region of matrix 0.
std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> pieces(const QuantParam& q) {
  std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>> v;
  for (const QuantRegion& r : q.regions)
    if (r.matrix == 0) v.emplace_back(r.part, r.row0, r.rows, r.scale_row0);
  return v;
}

std::string refusal(const std::string& model, const std::string& spec) {
  try {
    Fp8Rank r(model, spec);
    check_quant_target(r.model, r.inf);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Quant, Qwen3DenseAtTp2) {  // Qwen/Qwen3-8B-FP8 served with TP 2
  Fp8Rank r("qwen3-8b", "tp2");
  const std::string l = "model.layers.0.";
  const QuantParam& qkv = r.q(l + "self_attn.qkv_proj.weight");
  EXPECT_EQ(r.p(l + "self_attn.qkv_proj.weight").shape, (Shape{3072, 4096}));  // (16 + 4 + 4) heads x 128
  EXPECT_EQ(qkv.scale_name, l + "self_attn.qkv_proj.weight_scale_inv");
  EXPECT_EQ(qkv.scale_shape, (Shape{24, 32}));
  using P = std::tuple<std::string, int64_t, int64_t, int64_t>;
  EXPECT_EQ(pieces(qkv), (std::vector<P>{{"q_proj", 0, 2048, 0}, {"k_proj", 2048, 512, 16}, {"v_proj", 2560, 512, 20}}));
  EXPECT_EQ(r.q(l + "self_attn.o_proj.weight").scale_shape, (Shape{32, 16}));  // [4096, 2048]
  const QuantParam& gu = r.q(l + "mlp.gate_up_proj.weight");                   // [12288, 4096]
  EXPECT_EQ(gu.scale_shape, (Shape{96, 32}));
  EXPECT_EQ(pieces(gu), (std::vector<P>{{"gate_proj", 0, 6144, 0}, {"up_proj", 6144, 6144, 48}}));
  EXPECT_EQ(r.q(l + "mlp.down_proj.weight").scale_shape, (Shape{32, 48}));  // [4096, 6144]
  // Four per layer, nothing else: not the embedding, lm_head, norms or q/k norms.
  EXPECT_EQ(r.quant.size(), 36u * 4);
  for (const char* kept : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                           "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_norm.weight"})
    EXPECT_EQ(r.quant.count(kept), 0u) << kept;
}

TEST(Quant, Qwen3MoeAtThePublishedDp16Ep16) {  // Qwen/Qwen3-235B-A22B-FP8, vLLM DP16/EP16
  Fp8Rank r("qwen3-235b-a22b", "dp16,ep16", 3);
  const std::string l = "model.layers.5.mlp.";
  EXPECT_EQ(r.p(l + "experts.w13_weight").shape, (Shape{8, 3072, 4096}));
  const QuantParam& w13 = r.q(l + "experts.w13_weight");
  EXPECT_EQ(w13.scale_name, l + "experts.w13_weight_scale_inv");
  EXPECT_EQ(w13.scale_shape, (Shape{8, 24, 32}));  // [E, 2 ceil(I / 128), ceil(H / 128)]
  using P = std::tuple<std::string, int64_t, int64_t, int64_t>;
  EXPECT_EQ(pieces(w13), (std::vector<P>{{"w1", 0, 1536, 0}, {"w3", 1536, 1536, 12}}));
  EXPECT_EQ(w13.regions.size(), 16u);  // two per local expert
  EXPECT_EQ(w13.regions.back().matrix, 7);
  EXPECT_EQ(r.q(l + "experts.w2_weight").scale_shape, (Shape{8, 32, 12}));  // [E, ceil(H / 128), ceil(I / 128)]
  EXPECT_EQ(r.q("model.layers.5.self_attn.qkv_proj.weight").scale_shape, (Shape{72, 32}));  // (64 + 4 + 4) x 128
  EXPECT_EQ(r.q("model.layers.5.self_attn.o_proj.weight").scale_shape, (Shape{32, 64}));
  EXPECT_EQ(r.quant.count(l + "gate.weight"), 0u);  // the router stays bf16
  EXPECT_EQ(r.quant.size(), 94u * 4);
}

TEST(Quant, MlaAndSharedExpertsOfKimiK2AtTp16Ep16) {  // DeepseekV3ForCausalLM
  Fp8Rank r("kimi-k2-instruct", "tp16,ep16");
  const std::string a = "model.layers.3.self_attn.";
  const QuantParam& qkv_a = r.q(a + "fused_qkv_a_proj.weight");  // [1536 + 576, 7168], not split by TP
  EXPECT_EQ(qkv_a.scale_shape, (Shape{17, 56}));
  using P = std::tuple<std::string, int64_t, int64_t, int64_t>;
  EXPECT_EQ(pieces(qkv_a), (std::vector<P>{{"q_a_proj", 0, 1536, 0}, {"kv_a_proj_with_mqa", 1536, 576, 12}}));
  EXPECT_EQ(r.q(a + "q_b_proj.weight").scale_shape, (Shape{6, 12}));    // [4 heads x 192, 1536]
  EXPECT_EQ(r.q(a + "kv_b_proj.weight").scale_shape, (Shape{8, 4}));    // [4 x (128 + 128), 512]
  EXPECT_EQ(r.q(a + "o_proj.weight").scale_shape, (Shape{56, 4}));      // [7168, 4 x 128]
  const std::string m = "model.layers.3.mlp.";
  EXPECT_EQ(r.q(m + "experts.w13_weight").scale_shape, (Shape{24, 32, 56}));  // 384 / 16 experts
  EXPECT_EQ(r.q(m + "experts.w2_weight").scale_shape, (Shape{24, 56, 16}));
  EXPECT_EQ(r.q(m + "shared_experts.gate_up_proj.weight").scale_shape, (Shape{2, 56}));  // 2 x 2048 / 16
  EXPECT_EQ(r.q(m + "shared_experts.down_proj.weight").scale_shape, (Shape{56, 1}));
  EXPECT_EQ(r.q("model.layers.0.mlp.gate_up_proj.weight").scale_shape, (Shape{18, 56}));  // the dense layer: 2 x 1152
  for (const char* kept : {"model.layers.3.mlp.gate.weight", "model.layers.3.mlp.gate.e_score_correction_bias",
                           "model.layers.3.self_attn.q_a_layernorm.weight", "model.layers.3.self_attn.kv_a_layernorm.weight"})
    EXPECT_EQ(r.quant.count(kept), 0u) << kept;
}

TEST(Quant, Llama4FusedExperts) {  // Llama-4-Scout's text part at TP 8, experts by EP 8
  Fp8Rank r("llama-4-scout-17b-16e", "tp8,ep8");
  const std::string m = "language_model.model.layers.0.feed_forward.";
  EXPECT_EQ(r.q(m + "experts.w13_weight").scale_shape, (Shape{2, 128, 40}));  // 2 experts, 2 x 8192, 5120
  EXPECT_EQ(r.q(m + "shared_expert.gate_up_proj.weight").scale_shape, (Shape{16, 40}));
  EXPECT_EQ(r.quant.count(m + "router.weight"), 0u);
}

// The rule on slots (what the receiver quantizes) and on HF tensors (what FP8 on the wire
// sends as codes): for every plan entry of every architecture, the two agree.
TEST(Quant, RulesOnSlotsAndHfTensorsAgree) {
  for (const char* m : {"tiny-qwen3", "tiny-llama", "tiny-qwen3-moe", "tiny-kimi", "tiny-llama4", "tiny-qwen2",
                        "tiny-mistral", "tiny-mixtral", "tiny-deepseek-v2", "tiny-glm4-moe", "tiny-gpt-oss"}) {
    ModelSpec model = load_model(m);
    InferenceLayout l = parse_inference_spec("tp1");
    l.replicas = 1;
    InferencePlacement inf(model, l);
    const RankPlan plan = record_rank_plan(model, inf, 0);
    int quantized = 0;
    for (const PlanEntry& e : plan.entries) {
      if (e.is_fill()) continue;
      const EngineParam& p = plan.params[size_t(e.engine_param)];
      EXPECT_EQ(fp8_quantized(p.slot), fp8_quantized_hf(model.param(e.hf_param)))
          << m << ": " << p.name << " from " << model.param(e.hf_param).name;
      quantized += fp8_quantized(p.slot);
    }
    EXPECT_GT(quantized, 0) << m;
  }
}

// gpt-oss: vLLM serves it in bf16 or MXFP4; a block-FP8 target is refused by name, not guessed.
TEST(Quant, GptOssFp8TargetIsRefused) {
  try {
    Fp8Rank r("tiny-gpt-oss", "tp2");
    FAIL() << "expected the FP8 target to be refused for gpt-oss";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("GptOssForCausalLM"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--quant"), std::string::npos) << e.what();
  }
}

TEST(Quant, NoneQuantizesNothing) {
  ModelSpec m = load_model("qwen3-8b");
  InferenceLayout l = parse_inference_spec("tp2");
  l.replicas = 1;
  InferencePlacement inf(m, l);
  EXPECT_TRUE(quant_params(m, inf, EngineParams(m, inf, 0).params()).empty());
}

TEST(Quant, ShardsThatCutABlockAreRefusedNamingTensorDimensionAndSizes) {
  // Qwen3-235B's experts under MoE-TP 8: 1536 / 8 = 192 rows of gate and of up.
  EXPECT_EQ(refusal("qwen3-235b-a22b", "tp8"),
            "--quant fp8-block128: model.layers.0.mlp.experts.w13_weight: dim 1 (gate_proj and up_proj rows of each "
            "expert) = 192 per rank (moe_intermediate_size 1536 / MoE-TP 8) is not a multiple of the FP8 block, 128: "
            "a 128 x 128 scale block would span two ranks' shards (vLLM refuses it too: \"The output_size of gate's "
            "and up's weight = 192 is not divisible by weight quantization block_n = 128.\"); choose a layout whose "
            "shards are whole blocks, or --quant none");
  // Kimi K2 at the blog's TP32: the dense layer's down_proj reads 18432 / 32 = 576 columns.
  const std::string kimi = refusal("kimi-k2-instruct", "tp32,ep32");
  EXPECT_NE(kimi.find("model.layers.0.mlp.gate_up_proj.weight: dim 0, its gate_proj rows = 576 per rank (split over "
                      "TP 32)"),
            std::string::npos)
      << kimi;
  EXPECT_NE(refusal("kimi-k2-instruct", "tp32,ep32").find("Weight output_partition_size = 576"), std::string::npos);
  // A merged layer split by TP: every shard (tiny-qwen3's 4 heads of 16 per rank).
  EXPECT_NE(refusal("tiny-qwen3", "tp2").find("dim 0, its q_proj rows = 64 per rank (split over TP 2)"),
            std::string::npos);
  // A merged layer TP does not split exempts its last shard (MLA's kv_a: 576 rows) but not the others.
  EXPECT_EQ(refusal("kimi-k2-instruct", "tp16,ep16"), "(accepted)");
  EXPECT_NE(refusal("tiny-qwen3", "tp1").find("its k_proj rows = 32 per rank (a merged layer's shard before the last)"),
            std::string::npos);
}

}  // namespace
}  // namespace shardsync

namespace shardsync {
namespace {

// The rank's pieces, quantized where they lie in its parameters (QuantRegion), give exactly
// the bits of the whole HF tensors quantized and then sliced by the plan: codes element for
// element, and each element's scale that of its block of the HF tensor. So a receiver that
// quantizes its shard and a trainer that quantizes whole tensors agree, whatever the layout.
void expect_rank_pieces_match_whole_tensors(const std::string& model_name, const std::string& spec) {
  Fp8Rank setup(model_name, spec);
  const ModelSpec& m = setup.model;
  for (int rank = 0; rank < setup.inf.layout().ranks_per_replica(); ++rank) {
    const RankPlan plan = record_rank_plan(m, setup.inf, rank);
    const std::vector<QuantParam> quant = quant_params(m, setup.inf, plan.params);
    ASSERT_FALSE(quant.empty());
    for (const QuantParam& q : quant) {
      const EngineParam& p = plan.params[size_t(q.param)];
      const int64_t n = q.matrices * q.rows * q.cols;
      std::vector<uint16_t> bf16(size_t(n), 0);
      std::vector<uint8_t> want_codes(size_t(n), 0);
      std::vector<float> want_scale(size_t(n), -1.0f);  // each element's block scale, from the HF tensor
      int entries = 0;
      for (const PlanEntry& e : plan.entries) {
        if (e.engine_param != q.param) continue;
        ASSERT_FALSE(e.is_fill()) << p.name;
        ++entries;
        const ParamMeta& hf = m.param(e.hf_param);
        ASSERT_EQ(hf.shape.size(), 2u) << hf.name;
        const int64_t rows = hf.shape[0], cols = hf.shape[1], br = (rows + 127) / 128, bc = (cols + 127) / 128;
        std::vector<uint16_t> x(size_t(rows * cols));
        synth_fill(x.data(), synth_seed(e.hf_param, 5), 0, rows * cols, 2);
        std::vector<uint8_t> codes(x.size());
        std::vector<float> scales(size_t(br * bc)), per_elem(x.size());
        cpu_quantize_fp8_blocks(x.data(), rows, cols, codes.data(), scales.data());
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) per_elem[size_t(r * cols + c)] = scales[size_t(r / 128 * bc + c / 128)];
        replay_entry(e, x.data(), bf16.data(), 2);
        replay_entry(e, codes.data(), want_codes.data(), 1);
        replay_entry(e, per_elem.data(), want_scale.data(), 4);
      }
      ASSERT_GT(entries, 0) << p.name;
      std::vector<uint8_t> codes(static_cast<size_t>(n));
      std::vector<float> scales(size_t(q.scale_numel()), -2.0f);
      for (const QuantRegion& r : q.regions) {
        const int64_t first = (r.matrix * q.rows + r.row0) * q.cols;
        cpu_quantize_fp8_blocks(bf16.data() + first, q.cols, r.rows, q.cols, codes.data() + first, q.cols,
                                scales.data() + (r.matrix * q.scale_rows() + r.scale_row0) * q.scale_cols(),
                                q.scale_cols());
      }
      int64_t bad_codes = 0, bad_scales = 0;
      for (const QuantRegion& r : q.regions)
        for (int64_t i = 0; i < r.rows; ++i)
          for (int64_t c = 0; c < q.cols; ++c) {
            const int64_t k = (r.matrix * q.rows + r.row0 + i) * q.cols + c;
            bad_codes += codes[size_t(k)] != want_codes[size_t(k)];
            const float s = scales[size_t((r.matrix * q.scale_rows() + r.scale_row0 + i / 128) * q.scale_cols() + c / 128)];
            bad_scales += s != want_scale[size_t(k)];
          }
      EXPECT_EQ(bad_codes, 0) << model_name << " " << spec << " rank " << rank << " " << p.name;
      EXPECT_EQ(bad_scales, 0) << model_name << " " << spec << " rank " << rank << " " << p.name;
    }
  }
}

TEST(Quant, RankPiecesQuantizeToTheWholeHfTensorsBits) {
  expect_rank_pieces_match_whole_tensors("tiny-qwen3-moe-fp8", "tp2,ep2");
  expect_rank_pieces_match_whole_tensors("tiny-qwen3-moe-fp8", "tp1");
  expect_rank_pieces_match_whole_tensors("tiny-kimi-fp8", "tp2,ep2");
}

}  // namespace
}  // namespace shardsync
