// Hand-written vLLM loader facts for the per-expert MoE families: Qwen3-MoE, Mixtral, GLM-4.5
// (issue 41; the checker: loader_facts.hpp). Each number is derived in a comment from the
// published config.json in configs/models. vLLM's rules: shared/reference/models-and-loaders.md
// part B (FusedMoE B.5: w13 = [w1 (gate) ; w3 (up)] per expert, w2 split by columns; linear
// expert placement, the remainder to the first EP ranks) and glm4_moe.py (fp32 gate, attention
// biases from attention_bias, no o_proj bias).
#include "loader_facts.hpp"

namespace shardsync::facts {
namespace {

// Qwen3-30B-A3B (configs/models/qwen3-30b-a3b.json) at TP8, no EP. hidden 2048; 32 q heads x
// 128 -> 4 heads = 512 q rows per rank; 4 KV heads < TP 8, so each rank has 1 KV head (128
// rows), replicated T / nkv = 2 times: rank t keeps KV head t // 2. qkv_proj [512 + 128 + 128 =
// 768, 2048]; o_proj [2048, 4096] row-parallel -> [2048, 512]. Experts: 128 experts of
// moe_intermediate 768, MoE-TP 8 -> 96 rows each: w13 [128, 192, 2048] with expert e's gate rows
// [96t, +96) at [0, 96) and its up rows at [96, 192); w2 [128, 2048, 96] from down_proj's columns
// [96t, +96). The router mlp.gate [128, 2048] is replicated. vocab 151936 -> 18992 per rank.
TEST(LoaderFacts, Qwen3MoeAt30BTp8) {
  ModelSpec m = load_model("qwen3-30b-a3b");
  const std::string L = "model.layers.3.";
  const std::string w13 = L + "mlp.experts.w13_weight", w2 = L + "mlp.experts.w2_weight";
  // (rank, its KV head) written out: 0 -> 0, 4 and 5 -> 2, 7 -> 3
  for (auto [t, kv] : {std::pair<int, int64_t>{0, 0}, {4, 2}, {5, 2}, {7, 3}}) {
    RankFacts f;
    f.rank = t;
    f.params = {{L + "self_attn.qkv_proj.weight", {768, 2048}},
                {L + "self_attn.o_proj.weight", {2048, 512}},
                {L + "mlp.gate.weight", {128, 2048}},
                {w13, {128, 192, 2048}},
                {w2, {128, 2048, 96}},
                {"model.embed_tokens.weight", {18992, 2048}}};
    f.no_params = {L + "mlp.gate_up_proj.weight"};  // every layer is MoE (decoder_sparse_step 1)
    const std::string qkv = L + "self_attn.qkv_proj.weight";
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(512 * t, 512), all(2048)},
         qkv,
         {at(0, 512), all(2048)}},
        {L + "self_attn.k_proj.weight",
         {at(128 * kv, 128), all(2048)},
         qkv,
         {at(512, 128), all(2048)}},
        {L + "self_attn.v_proj.weight",
         {at(128 * kv, 128), all(2048)},
         qkv,
         {at(640, 128), all(2048)}},
        {L + "self_attn.o_proj.weight",
         {all(2048), at(512 * t, 512)},
         L + "self_attn.o_proj.weight",
         {all(2048), all(512)}},
        whole(L + "mlp.gate.weight", L + "mlp.gate.weight", {128, 2048}),
        {"model.embed_tokens.weight",
         {at(18992 * t, 18992), all(2048)},
         "model.embed_tokens.weight",
         {all(18992), all(2048)}},
    };
    for (int64_t e : {0, 77, 127}) {
      f.copies.push_back({expert(L, e, "gate_proj"),
                          {at(96 * t, 96), all(2048)},
                          w13,
                          {at(e, 1), at(0, 96), all(2048)}});
      f.copies.push_back({expert(L, e, "up_proj"),
                          {at(96 * t, 96), all(2048)},
                          w13,
                          {at(e, 1), at(96, 96), all(2048)}});
      f.copies.push_back({expert(L, e, "down_proj"),
                          {all(2048), at(96 * t, 96)},
                          w2,
                          {at(e, 1), all(2048), all(96)}});
    }
    check_rank(m, "tp8", f);
  }
}

// Qwen3-30B-A3B at TP2 x DP2 with EP 4 (local rank = dp * 2 + tp; EP rank = dp * TP + tp, so
// here EP rank = local rank). Attention at TP2: 16 heads = 2048 q rows, 2 KV heads = 256 rows
// per rank; qkv_proj [2560, 2048]. Experts under EP: 128 / 4 = 32 whole experts per rank, EP
// rank r owning [32r, 32r + 32) (linear placement); w13 [32, 1536, 2048] = per local expert
// [gate 768 ; up 768], w2 [32, 2048, 768].
TEST(LoaderFacts, Qwen3MoeAt30BExpertParallel) {
  ModelSpec m = load_model("qwen3-30b-a3b");
  const std::string L = "model.layers.3.";
  const std::string w13 = L + "mlp.experts.w13_weight", w2 = L + "mlp.experts.w2_weight";
  // (rank, its tp rank, first owned expert): rank 1 = (tp1, dp0) owns 32..63, rank 3 = (tp1,
  // dp1) 96..127
  for (auto [r, t, first] : {std::tuple<int, int64_t, int64_t>{1, 1, 32}, {3, 1, 96}}) {
    RankFacts f;
    f.rank = r;
    f.params = {{L + "self_attn.qkv_proj.weight", {2560, 2048}},
                {w13, {32, 1536, 2048}},
                {w2, {32, 2048, 768}}};
    const std::string qkv = L + "self_attn.qkv_proj.weight";
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(2048 * t, 2048), all(2048)},
         qkv,
         {at(0, 2048), all(2048)}},
        {L + "self_attn.k_proj.weight",
         {at(256 * t, 256), all(2048)},
         qkv,
         {at(2048, 256), all(2048)}},
        {L + "self_attn.v_proj.weight",
         {at(256 * t, 256), all(2048)},
         qkv,
         {at(2304, 256), all(2048)}},
    };
    for (int64_t local : {0, 5, 31}) {
      const int64_t e = first + local;
      f.copies.push_back({expert(L, e, "gate_proj"),
                          {all(768), all(2048)},
                          w13,
                          {at(local, 1), at(0, 768), all(2048)}});
      f.copies.push_back({expert(L, e, "up_proj"),
                          {all(768), all(2048)},
                          w13,
                          {at(local, 1), at(768, 768), all(2048)}});
      f.copies.push_back({expert(L, e, "down_proj"),
                          {all(2048), all(768)},
                          w2,
                          {at(local, 1), all(2048), all(768)}});
    }
    f.absent = {expert(L, first - 1, "gate_proj"), expert(L, first - 1, "down_proj")};
    if (first + 32 < 128) f.absent.push_back(expert(L, first + 32, "up_proj"));
    check_rank(m, "tp2,dp2,ep4", f);
  }
}

// Mixtral-8x7B-v0.1 (configs/models/mixtral-8x7b-v0.1.json): experts in block_sparse_moe with
// checkpoint names w1 (gate), w3 (up), w2 (down); vLLM's expert mapping sends w1 to w13's first
// half and w3 to its second. At TP2 (no EP): 8 experts of 14336 -> 7168 rows per rank, w13
// [8, 14336, 4096]: rank 1 takes w1 rows [7168, 14336) into [0, 7168) and w3 rows [7168, 14336)
// into [7168, 14336); w2 [8, 4096, 7168] from w2's columns [7168t, +7168). Attention: 32 heads
// -> 2048 q rows, 8 KV heads -> 4 = 512 rows per rank. vocab 32000 = 500 x 64 -> 16000 per rank.
TEST(LoaderFacts, MixtralAt8x7BTp2) {
  ModelSpec m = load_model("mixtral-8x7b-v0.1");
  const std::string L = "model.layers.4.", B = L + "block_sparse_moe.";
  const std::string w13 = B + "experts.w13_weight", w2 = B + "experts.w2_weight";
  auto ex = [&](int64_t e, const char* w) {
    return B + "experts." + std::to_string(e) + "." + w + ".weight";
  };
  for (int t : {0, 1}) {
    RankFacts f;
    f.rank = t;
    f.params = {{w13, {8, 14336, 4096}},
                {w2, {8, 4096, 7168}},
                {B + "gate.weight", {8, 4096}},
                {L + "self_attn.qkv_proj.weight", {3072, 4096}},
                {"model.embed_tokens.weight", {16000, 4096}}};
    const std::string qkv = L + "self_attn.qkv_proj.weight";
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(2048 * t, 2048), all(4096)},
         qkv,
         {at(0, 2048), all(4096)}},
        {L + "self_attn.k_proj.weight",
         {at(512 * t, 512), all(4096)},
         qkv,
         {at(2048, 512), all(4096)}},
        {L + "self_attn.v_proj.weight",
         {at(512 * t, 512), all(4096)},
         qkv,
         {at(2560, 512), all(4096)}},
        whole(B + "gate.weight", B + "gate.weight", {8, 4096}),
        {"model.embed_tokens.weight",
         {at(16000 * t, 16000), all(4096)},
         "model.embed_tokens.weight",
         {all(16000), all(4096)}},
    };
    for (int64_t e : {0, 5, 7}) {
      f.copies.push_back(
          {ex(e, "w1"), {at(7168 * t, 7168), all(4096)}, w13, {at(e, 1), at(0, 7168), all(4096)}});
      f.copies.push_back({ex(e, "w3"),
                          {at(7168 * t, 7168), all(4096)},
                          w13,
                          {at(e, 1), at(7168, 7168), all(4096)}});
      f.copies.push_back(
          {ex(e, "w2"), {all(4096), at(7168 * t, 7168)}, w2, {at(e, 1), all(4096), all(7168)}});
    }
    check_rank(m, "tp2", f);
  }
}

// Mixtral-8x7B at DP3 with EP 3: 8 experts over 3 EP ranks, base 2 and remainder 2, which vLLM's
// linear placement gives to the first ranks: rank 0 owns [0, 3), rank 1 [3, 6), rank 2 [6, 8).
// Whole experts: w13 [local, 2 x 14336, 4096], w2 [local, 4096, 14336]. Attention at TP1: the
// whole qkv [4096 + 1024 + 1024 = 6144, 4096].
TEST(LoaderFacts, MixtralAt8x7BUnevenExpertParallel) {
  ModelSpec m = load_model("mixtral-8x7b-v0.1");
  const std::string L = "model.layers.4.", B = L + "block_sparse_moe.";
  const std::string w13 = B + "experts.w13_weight", w2 = B + "experts.w2_weight";
  auto ex = [&](int64_t e, const char* w) {
    return B + "experts." + std::to_string(e) + "." + w + ".weight";
  };
  struct Owner {
    int rank;
    int64_t first, count;
  };
  for (Owner o : {Owner{0, 0, 3}, Owner{1, 3, 3}, Owner{2, 6, 2}}) {
    RankFacts f;
    f.rank = o.rank;
    f.params = {{w13, {o.count, 28672, 4096}},
                {w2, {o.count, 4096, 14336}},
                {L + "self_attn.qkv_proj.weight", {6144, 4096}}};
    const std::string qkv = L + "self_attn.qkv_proj.weight";
    f.copies = {
        {L + "self_attn.q_proj.weight", {all(4096), all(4096)}, qkv, {at(0, 4096), all(4096)}},
        {L + "self_attn.k_proj.weight", {all(1024), all(4096)}, qkv, {at(4096, 1024), all(4096)}},
        {L + "self_attn.v_proj.weight", {all(1024), all(4096)}, qkv, {at(5120, 1024), all(4096)}},
    };
    for (int64_t local = 0; local < o.count; ++local) {
      const int64_t e = o.first + local;
      f.copies.push_back(
          {ex(e, "w1"), {all(14336), all(4096)}, w13, {at(local, 1), at(0, 14336), all(4096)}});
      f.copies.push_back(
          {ex(e, "w3"), {all(14336), all(4096)}, w13, {at(local, 1), at(14336, 14336), all(4096)}});
      f.copies.push_back(
          {ex(e, "w2"), {all(4096), all(14336)}, w2, {at(local, 1), all(4096), all(14336)}});
    }
    if (o.first > 0) f.absent.push_back(ex(o.first - 1, "w1"));
    if (o.first + o.count < 8) f.absent.push_back(ex(o.first + o.count, "w2"));
    check_rank(m, "dp3,ep3", f);
  }
}

// GLM-4.5-Air (configs/models/glm-4.5-air.json) at TP4, no EP. 96 q heads x 128 = 12288 q rows
// (3 x hidden 4096) -> 24 heads = 3072 per rank; 8 KV heads -> 2 = 256 rows per rank; qkv_proj
// [3072 + 256 + 256 = 3584, 4096] with attention_bias true: a qkv bias [3584] sharded the same
// way; o_proj [4096, 12288] has no bias, columns [3072t, +3072). use_qk_norm false: no q/k norms.
// Layer 0 dense (first_k_dense_replace 1): intermediate 10944 -> 2736 per rank. MoE layers: 128
// experts of 1408 -> 352 per rank (w13 [128, 704, 4096]); 1 shared expert of 1408 -> 352 per
// rank; the gate is an fp32 nn.Linear [128, 4096], whole, as is its fp32
// e_score_correction_bias. The MTP layer 46 (num_nextn_predict_layers 1) is not in vLLM's model
// and not in the list. vocab 151552 = 2368 x 64 -> 37888 per rank.
TEST(LoaderFacts, Glm45AirTp4) {
  ModelSpec m = load_model("glm-4.5-air");
  const std::string D = "model.layers.0.", L = "model.layers.10.";
  const std::string w13 = L + "mlp.experts.w13_weight", w2 = L + "mlp.experts.w2_weight";
  EXPECT_LT(m.find("model.layers.46.input_layernorm.weight"), 0);
  for (int t : {0, 3}) {
    RankFacts f;
    f.rank = t;
    const std::string qkv = L + "self_attn.qkv_proj.weight", qkv_b = L + "self_attn.qkv_proj.bias";
    f.params = {{qkv, {3584, 4096}},
                {qkv_b, {3584}},
                {L + "self_attn.o_proj.weight", {4096, 3072}},
                {L + "mlp.gate.weight", {128, 4096}, DType::kF32},
                {L + "mlp.gate.e_score_correction_bias", {128}, DType::kF32},
                {w13, {128, 704, 4096}},
                {w2, {128, 4096, 352}},
                {L + "mlp.shared_experts.gate_up_proj.weight", {704, 4096}},
                {D + "mlp.gate_up_proj.weight", {5472, 4096}},
                {"model.embed_tokens.weight", {37888, 4096}}};
    f.no_params = {L + "self_attn.o_proj.bias", L + "self_attn.q_norm.weight"};
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(3072 * t, 3072), all(4096)},
         qkv,
         {at(0, 3072), all(4096)}},
        {L + "self_attn.k_proj.weight",
         {at(256 * t, 256), all(4096)},
         qkv,
         {at(3072, 256), all(4096)}},
        {L + "self_attn.v_proj.weight",
         {at(256 * t, 256), all(4096)},
         qkv,
         {at(3328, 256), all(4096)}},
        {L + "self_attn.q_proj.bias", {at(3072 * t, 3072)}, qkv_b, {at(0, 3072)}},
        {L + "self_attn.k_proj.bias", {at(256 * t, 256)}, qkv_b, {at(3072, 256)}},
        {L + "self_attn.v_proj.bias", {at(256 * t, 256)}, qkv_b, {at(3328, 256)}},
        {L + "self_attn.o_proj.weight",
         {all(4096), at(3072 * t, 3072)},
         L + "self_attn.o_proj.weight",
         {all(4096), all(3072)}},
        whole(L + "mlp.gate.weight", L + "mlp.gate.weight", {128, 4096}),
        whole(L + "mlp.gate.e_score_correction_bias", L + "mlp.gate.e_score_correction_bias",
              {128}),
        {L + "mlp.shared_experts.gate_proj.weight",
         {at(352 * t, 352), all(4096)},
         L + "mlp.shared_experts.gate_up_proj.weight",
         {at(0, 352), all(4096)}},
        {L + "mlp.shared_experts.up_proj.weight",
         {at(352 * t, 352), all(4096)},
         L + "mlp.shared_experts.gate_up_proj.weight",
         {at(352, 352), all(4096)}},
        {L + "mlp.shared_experts.down_proj.weight",
         {all(4096), at(352 * t, 352)},
         L + "mlp.shared_experts.down_proj.weight",
         {all(4096), all(352)}},
        {D + "mlp.gate_proj.weight",
         {at(2736 * t, 2736), all(4096)},
         D + "mlp.gate_up_proj.weight",
         {at(0, 2736), all(4096)}},
        {D + "mlp.up_proj.weight",
         {at(2736 * t, 2736), all(4096)},
         D + "mlp.gate_up_proj.weight",
         {at(2736, 2736), all(4096)}},
        {D + "mlp.down_proj.weight",
         {all(4096), at(2736 * t, 2736)},
         D + "mlp.down_proj.weight",
         {all(4096), all(2736)}},
        {"model.embed_tokens.weight",
         {at(37888 * t, 37888), all(4096)},
         "model.embed_tokens.weight",
         {all(37888), all(4096)}},
    };
    for (int64_t e : {0, 127}) {
      f.copies.push_back({expert(L, e, "gate_proj"),
                          {at(352 * t, 352), all(4096)},
                          w13,
                          {at(e, 1), at(0, 352), all(4096)}});
      f.copies.push_back({expert(L, e, "up_proj"),
                          {at(352 * t, 352), all(4096)},
                          w13,
                          {at(e, 1), at(352, 352), all(4096)}});
      f.copies.push_back({expert(L, e, "down_proj"),
                          {all(4096), at(352 * t, 352)},
                          w2,
                          {at(e, 1), all(4096), all(352)}});
    }
    check_rank(m, "tp4", f);
  }
}

}  // namespace
}  // namespace shardsync::facts
