// Hand-written vLLM loader facts for the MLA families: DeepSeek-V2 (q_lora_rank null) and
// DeepSeek-V3 / Kimi-K2 (issue 41; the checker: loader_facts.hpp). Each number is derived in a
// comment from the published config.json in configs/models. vLLM's rules (deepseek_v2.py):
// shared/reference/models-and-loaders.md B.6, and FusedMoE B.5 for the routed experts.
#include "loader_facts.hpp"

namespace shardsync::facts {
namespace {

// DeepSeek-V2-Lite (configs/models/deepseek-v2-lite.json) at TP2: MLA with q_lora_rank null, so
// vLLM has a column-parallel q_proj and a replicated kv_a_proj_with_mqa (no fused_qkv_a_proj).
// 16 heads -> 8 per rank. q_proj [16 x (128 + 64) = 3072, 2048] -> rows [1536t, +1536);
// kv_a_proj_with_mqa [512 + 64 = 576, 2048] whole; kv_b_proj [16 x (128 + 128) = 4096, 512] ->
// rows [2048t, +2048); o_proj [2048, 16 x 128 = 2048] -> columns [1024t, +1024). Layer 0 is
// dense (first_k_dense_replace 1): intermediate 10944 -> 5472 per rank. MoE layers: 64 experts of
// 1408 -> 704 per rank (w13 [64, 1408, 2048]); 2 shared experts = one MLP of 2 x 1408 = 2816 ->
// 1408 per rank (shared_experts.gate_up_proj [2816, 2048]); topk_method greedy: no
// e_score_correction_bias. vocab 102400 -> 51200 per rank.
TEST(LoaderFacts, DeepseekV2LiteTp2) {
  ModelSpec m = load_model("deepseek-v2-lite");
  const std::string D = "model.layers.0.", L = "model.layers.3.";
  const std::string w13 = L + "mlp.experts.w13_weight", w2 = L + "mlp.experts.w2_weight";
  EXPECT_LT(m.find(L + "mlp.gate.e_score_correction_bias"), 0);
  for (int t : {0, 1}) {
    RankFacts f;
    f.rank = t;
    f.params = {{L + "self_attn.q_proj.weight", {1536, 2048}},
                {L + "self_attn.kv_a_proj_with_mqa.weight", {576, 2048}},
                {L + "self_attn.kv_a_layernorm.weight", {512}},
                {L + "self_attn.kv_b_proj.weight", {2048, 512}},
                {L + "self_attn.o_proj.weight", {2048, 1024}},
                {L + "mlp.gate.weight", {64, 2048}},
                {w13, {64, 1408, 2048}},
                {w2, {64, 2048, 704}},
                {L + "mlp.shared_experts.gate_up_proj.weight", {2816, 2048}},
                {L + "mlp.shared_experts.down_proj.weight", {2048, 1408}},
                {D + "mlp.gate_up_proj.weight", {10944, 2048}},
                {D + "mlp.down_proj.weight", {2048, 5472}},
                {"model.embed_tokens.weight", {51200, 2048}}};
    f.no_params = {L + "self_attn.fused_qkv_a_proj.weight", L + "self_attn.q_b_proj.weight",
                   D + "mlp.experts.w13_weight"};
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(1536 * t, 1536), all(2048)},
         L + "self_attn.q_proj.weight",
         {all(1536), all(2048)}},
        whole(L + "self_attn.kv_a_proj_with_mqa.weight", L + "self_attn.kv_a_proj_with_mqa.weight",
              {576, 2048}),
        whole(L + "self_attn.kv_a_layernorm.weight", L + "self_attn.kv_a_layernorm.weight", {512}),
        {L + "self_attn.kv_b_proj.weight",
         {at(2048 * t, 2048), all(512)},
         L + "self_attn.kv_b_proj.weight",
         {all(2048), all(512)}},
        {L + "self_attn.o_proj.weight",
         {all(2048), at(1024 * t, 1024)},
         L + "self_attn.o_proj.weight",
         {all(2048), all(1024)}},
        whole(L + "mlp.gate.weight", L + "mlp.gate.weight", {64, 2048}),
        {L + "mlp.shared_experts.gate_proj.weight",
         {at(1408 * t, 1408), all(2048)},
         L + "mlp.shared_experts.gate_up_proj.weight",
         {at(0, 1408), all(2048)}},
        {L + "mlp.shared_experts.up_proj.weight",
         {at(1408 * t, 1408), all(2048)},
         L + "mlp.shared_experts.gate_up_proj.weight",
         {at(1408, 1408), all(2048)}},
        {L + "mlp.shared_experts.down_proj.weight",
         {all(2048), at(1408 * t, 1408)},
         L + "mlp.shared_experts.down_proj.weight",
         {all(2048), all(1408)}},
        {D + "mlp.gate_proj.weight",
         {at(5472 * t, 5472), all(2048)},
         D + "mlp.gate_up_proj.weight",
         {at(0, 5472), all(2048)}},
        {D + "mlp.up_proj.weight",
         {at(5472 * t, 5472), all(2048)},
         D + "mlp.gate_up_proj.weight",
         {at(5472, 5472), all(2048)}},
        {D + "mlp.down_proj.weight",
         {all(2048), at(5472 * t, 5472)},
         D + "mlp.down_proj.weight",
         {all(2048), all(5472)}},
        {"model.embed_tokens.weight",
         {at(51200 * t, 51200), all(2048)},
         "model.embed_tokens.weight",
         {all(51200), all(2048)}},
    };
    for (int64_t e : {0, 63}) {
      f.copies.push_back({expert(L, e, "gate_proj"),
                          {at(704 * t, 704), all(2048)},
                          w13,
                          {at(e, 1), at(0, 704), all(2048)}});
      f.copies.push_back({expert(L, e, "up_proj"),
                          {at(704 * t, 704), all(2048)},
                          w13,
                          {at(e, 1), at(704, 704), all(2048)}});
      f.copies.push_back({expert(L, e, "down_proj"),
                          {all(2048), at(704 * t, 704)},
                          w2,
                          {at(e, 1), all(2048), all(704)}});
    }
    check_rank(m, "tp2", f);
  }
}

// Kimi-K2-Instruct (configs/models/kimi-k2-instruct.json; DeepseekV3ForCausalLM) at TP8 with
// EP 8. MLA with q_lora_rank 1536: q_a_proj [1536, 7168] and kv_a_proj_with_mqa [512 + 64 = 576,
// 7168] are fused into the replicated fused_qkv_a_proj [2112, 7168] (q_a rows [0, 1536), kv_a
// rows [1536, 2112)) on every rank. 64 heads -> 8 per rank: q_b_proj [64 x 192 = 12288, 1536] ->
// rows [1536t, +1536); kv_b_proj [64 x 256 = 16384, 512] -> rows [2048t, +2048); o_proj [7168,
// 64 x 128 = 8192] -> columns [1024t, +1024). Layer 0 dense (first_k_dense_replace 1):
// intermediate 18432 -> 2304 per rank. MoE layers: 384 experts / EP 8 = 48 whole experts per
// rank, rank r owning [48r, 48r + 48), w13 [48, 2 x 2048, 7168]; the one shared expert (2048) is
// split over TP (DP 1, so no sequence-parallel MoE): 256 rows per rank. The router gate [384,
// 7168] and its fp32 e_score_correction_bias [384] are whole. vocab 163840 -> 20480 per rank.
TEST(LoaderFacts, KimiK2Tp8Ep8) {
  ModelSpec m = load_model("kimi-k2-instruct");
  const std::string D = "model.layers.0.", L = "model.layers.7.";
  const std::string w13 = L + "mlp.experts.w13_weight", w2 = L + "mlp.experts.w2_weight";
  const std::string qkv_a = L + "self_attn.fused_qkv_a_proj.weight";
  for (int t : {0, 5}) {
    const int64_t first = 48 * t;  // rank 0: experts 0..47; rank 5: 240..287
    RankFacts f;
    f.rank = t;
    f.params = {{qkv_a, {2112, 7168}},
                {L + "self_attn.q_a_layernorm.weight", {1536}},
                {L + "self_attn.q_b_proj.weight", {1536, 1536}},
                {L + "self_attn.kv_b_proj.weight", {2048, 512}},
                {L + "self_attn.o_proj.weight", {7168, 1024}},
                {L + "mlp.gate.weight", {384, 7168}},
                {L + "mlp.gate.e_score_correction_bias", {384}, DType::kF32},
                {w13, {48, 4096, 7168}},
                {w2, {48, 7168, 2048}},
                {L + "mlp.shared_experts.gate_up_proj.weight", {512, 7168}},
                {L + "mlp.shared_experts.down_proj.weight", {7168, 256}},
                {D + "mlp.gate_up_proj.weight", {4608, 7168}},
                {"model.embed_tokens.weight", {20480, 7168}}};
    f.no_params = {L + "self_attn.q_a_proj.weight", L + "self_attn.kv_a_proj_with_mqa.weight"};
    f.copies = {
        {L + "self_attn.q_a_proj.weight", {all(1536), all(7168)}, qkv_a, {at(0, 1536), all(7168)}},
        {L + "self_attn.kv_a_proj_with_mqa.weight",
         {all(576), all(7168)},
         qkv_a,
         {at(1536, 576), all(7168)}},
        whole(L + "self_attn.q_a_layernorm.weight", L + "self_attn.q_a_layernorm.weight", {1536}),
        whole(L + "self_attn.kv_a_layernorm.weight", L + "self_attn.kv_a_layernorm.weight", {512}),
        {L + "self_attn.q_b_proj.weight",
         {at(1536 * t, 1536), all(1536)},
         L + "self_attn.q_b_proj.weight",
         {all(1536), all(1536)}},
        {L + "self_attn.kv_b_proj.weight",
         {at(2048 * t, 2048), all(512)},
         L + "self_attn.kv_b_proj.weight",
         {all(2048), all(512)}},
        {L + "self_attn.o_proj.weight",
         {all(7168), at(1024 * t, 1024)},
         L + "self_attn.o_proj.weight",
         {all(7168), all(1024)}},
        whole(L + "mlp.gate.weight", L + "mlp.gate.weight", {384, 7168}),
        whole(L + "mlp.gate.e_score_correction_bias", L + "mlp.gate.e_score_correction_bias",
              {384}),
        {L + "mlp.shared_experts.gate_proj.weight",
         {at(256 * t, 256), all(7168)},
         L + "mlp.shared_experts.gate_up_proj.weight",
         {at(0, 256), all(7168)}},
        {L + "mlp.shared_experts.up_proj.weight",
         {at(256 * t, 256), all(7168)},
         L + "mlp.shared_experts.gate_up_proj.weight",
         {at(256, 256), all(7168)}},
        {L + "mlp.shared_experts.down_proj.weight",
         {all(7168), at(256 * t, 256)},
         L + "mlp.shared_experts.down_proj.weight",
         {all(7168), all(256)}},
        {D + "mlp.gate_proj.weight",
         {at(2304 * t, 2304), all(7168)},
         D + "mlp.gate_up_proj.weight",
         {at(0, 2304), all(7168)}},
        {D + "mlp.up_proj.weight",
         {at(2304 * t, 2304), all(7168)},
         D + "mlp.gate_up_proj.weight",
         {at(2304, 2304), all(7168)}},
        {D + "mlp.down_proj.weight",
         {all(7168), at(2304 * t, 2304)},
         D + "mlp.down_proj.weight",
         {all(7168), all(2304)}},
        {"model.embed_tokens.weight",
         {at(20480 * t, 20480), all(7168)},
         "model.embed_tokens.weight",
         {all(20480), all(7168)}},
    };
    for (int64_t local : {0, 10, 47}) {
      const int64_t e = first + local;
      f.copies.push_back({expert(L, e, "gate_proj"),
                          {all(2048), all(7168)},
                          w13,
                          {at(local, 1), at(0, 2048), all(7168)}});
      f.copies.push_back({expert(L, e, "up_proj"),
                          {all(2048), all(7168)},
                          w13,
                          {at(local, 1), at(2048, 2048), all(7168)}});
      f.copies.push_back({expert(L, e, "down_proj"),
                          {all(7168), all(2048)},
                          w2,
                          {at(local, 1), all(7168), all(2048)}});
    }
    f.absent = {expert(L, first + 48, "gate_proj")};
    if (first > 0) f.absent.push_back(expert(L, first - 1, "down_proj"));
    check_rank(m, "tp8,ep8", f);
  }
}

}  // namespace
}  // namespace shardsync::facts
