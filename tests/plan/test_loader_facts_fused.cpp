// Hand-written vLLM loader facts for the families whose experts come fused in one tensor:
// gpt-oss ([E, in, 2I] with gate and up columns interleaved, biases) and Llama-4 ([E, in, 2I]
// as [gate | up], with the rope permutation of q/k) (issue 41; the checker: loader_facts.hpp).
// Sources: gpt_oss.py's _load_weights_other (bf16) and llama4.py's load_weights
// (shared/reference/models-and-loaders.md B.6).
#include "loader_facts.hpp"

namespace shardsync::facts {
namespace {

// gpt-oss-20b (configs/models/gpt-oss-20b.json) at TP2, bf16 weights (vLLM's
// _load_weights_other). Attention: 64 q heads x 64 = 4096 q rows -> 32 heads = 2048 per rank; 8
// KV heads x 64 = 512 rows -> 4 = 256 per rank; attn.qkv [2560, 2880] and its bias [2560];
// o_proj [2880, 4096] -> columns [2048t, +2048), its bias [2880] whole (RowParallelLinear);
// sinks [64] -> the rank's heads [32t, +32). The router (nn.Linear) and its bias whole.
// Experts: 32 experts, intermediate 2880, MoE-TP 2 -> 1440 per rank. gate_up_proj [32, 2880 (in),
// 5760 (out)] interleaves gate and up columns (g0, u0, g1, u1, ...); vLLM takes columns
// [2 x 1440t, 2 x 1440(t+1)) = [2880t, +2880) -- whole (gate, up) pairs, still interleaved --
// and permutes to w13 [32, 2880, 2880 (in)]: w13[e][j][h] = gate_up[e][h][2880t + j]. Its bias
// [32, 5760] -> columns [2880t, +2880). down_proj [32, 2880 (in), 2880 (out)] -> rows [1440t,
// +1440), permuted to w2 [32, 2880, 1440]; down_proj_bias [32, 2880] whole on rank 0 and zeroed
// on the others (the MoE all-reduce adds it once). vocab 201088 = 3142 x 64 -> 100544 per rank;
// vLLM names the embedding model.embedding.
TEST(LoaderFacts, GptOss20bTp2) {
  ModelSpec m = load_model("gpt-oss-20b");
  const std::string L = "model.layers.5.", A = L + "attn.", X = L + "mlp.experts.";
  for (int t : {0, 1}) {
    RankFacts f;
    f.rank = t;
    f.params = {{A + "qkv.weight", {2560, 2880}},
                {A + "qkv.bias", {2560}},
                {A + "o_proj.weight", {2880, 2048}},
                {A + "o_proj.bias", {2880}},
                {A + "sinks", {32}},
                {L + "mlp.router.weight", {32, 2880}},
                {X + "w13_weight", {32, 2880, 2880}},
                {X + "w13_bias", {32, 2880}},
                {X + "w2_weight", {32, 2880, 1440}},
                {X + "w2_bias", {32, 2880}},
                {"model.embedding.weight", {100544, 2880}}};
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(2048 * t, 2048), all(2880)},
         A + "qkv.weight",
         {at(0, 2048), all(2880)}},
        {L + "self_attn.k_proj.weight",
         {at(256 * t, 256), all(2880)},
         A + "qkv.weight",
         {at(2048, 256), all(2880)}},
        {L + "self_attn.v_proj.weight",
         {at(256 * t, 256), all(2880)},
         A + "qkv.weight",
         {at(2304, 256), all(2880)}},
        {L + "self_attn.q_proj.bias", {at(2048 * t, 2048)}, A + "qkv.bias", {at(0, 2048)}},
        {L + "self_attn.k_proj.bias", {at(256 * t, 256)}, A + "qkv.bias", {at(2048, 256)}},
        {L + "self_attn.v_proj.bias", {at(256 * t, 256)}, A + "qkv.bias", {at(2304, 256)}},
        {L + "self_attn.o_proj.weight",
         {all(2880), at(2048 * t, 2048)},
         A + "o_proj.weight",
         {all(2880), all(2048)}},
        whole(L + "self_attn.o_proj.bias", A + "o_proj.bias", {2880}),
        {L + "self_attn.sinks", {at(32 * t, 32)}, A + "sinks", {all(32)}},
        whole(L + "mlp.router.weight", L + "mlp.router.weight", {32, 2880}),
        whole(L + "mlp.router.bias", L + "mlp.router.bias", {32}),
        {X + "gate_up_proj",
         {all(32), all(2880), at(2880 * t, 2880)},
         X + "w13_weight",
         {all(32), all(2880), all(2880)},
         {0, 2, 1}},
        {X + "gate_up_proj_bias",
         {all(32), at(2880 * t, 2880)},
         X + "w13_bias",
         {all(32), all(2880)}},
        {X + "down_proj",
         {all(32), at(1440 * t, 1440), all(2880)},
         X + "w2_weight",
         {all(32), all(2880), all(1440)},
         {0, 2, 1}},
        {"model.embed_tokens.weight",
         {at(100544 * t, 100544), all(2880)},
         "model.embedding.weight",
         {all(100544), all(2880)}},
        {"lm_head.weight",
         {at(100544 * t, 100544), all(2880)},
         "lm_head.weight",
         {all(100544), all(2880)}},
    };
    if (t == 0) {
      f.copies.push_back(whole(X + "down_proj_bias", X + "w2_bias", {32, 2880}));
    } else {
      f.absent = {X + "down_proj_bias"};
      f.fills = {{X + "w2_bias", {all(32), all(2880)}}};
    }
    check_rank(m, "tp2", f);
  }
}

// Llama-4-Scout-17B-16E (configs/models/llama-4-scout-17b-16e.json, text_config) at TP8.
// 40 q heads x 128 -> 5 heads = 640 q rows per rank; 8 KV heads -> 1 = 128 rows; qkv_proj [896,
// 5120]. vLLM permutes q_proj and k_proj rows before slicing (interleaved rope to neox): within
// each head of 128 rows, row j reads old row 2j for j < 64 and 2(j - 64) + 1 for j >= 64; v_proj
// is not permuted. o_proj [5120, 5120] -> columns [640t, +640). Experts (every layer MoE):
// gate_up_proj [16, 5120 (in), 16384 (out)] = [gate 8192 | up 8192] along the last dimension;
// vLLM chunks it, transposes each half to [16, 8192, 5120] and narrows rows [1024t, +1024) (MoE-TP
// 8: 8192 / 8): w13 [16, 2048, 5120] with w13[e][j][h] = gate_up[e][h][1024t + j] for j < 1024 and
// gate_up[e][h][8192 + 1024t + j - 1024] after. down_proj [16, 8192 (in), 5120] transposed, columns
// [1024t, +1024) -> w2 [16, 5120, 1024]. The shared expert (8192) is TP-split: 1024 rows per rank.
// vocab 202048 = 3157 x 64 -> 25256 per rank.
TEST(LoaderFacts, Llama4ScoutTp8) {
  ModelSpec m = load_model("llama-4-scout-17b-16e");
  const std::string L = "language_model.model.layers.2.", F = L + "feed_forward.";
  const std::string qkv = L + "self_attn.qkv_proj.weight";
  auto rope = [](int64_t r) {  // row offset in the rank's q (or k) rows -> row offset read
    const int64_t head = r / 128, j = r % 128;
    return head * 128 + (j < 64 ? 2 * j : 2 * (j - 64) + 1);
  };
  for (int t : {0, 3, 7}) {
    RankFacts f;
    f.rank = t;
    f.params = {{qkv, {896, 5120}},
                {L + "self_attn.o_proj.weight", {5120, 640}},
                {F + "router.weight", {16, 5120}},
                {F + "experts.w13_weight", {16, 2048, 5120}},
                {F + "experts.w2_weight", {16, 5120, 1024}},
                {F + "shared_expert.gate_up_proj.weight", {2048, 5120}},
                {F + "shared_expert.down_proj.weight", {5120, 1024}},
                {"language_model.lm_head.weight", {25256, 5120}}};
    f.no_params = {F + "gate_up_proj.weight"};
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(640 * t, 640), all(5120)},
         qkv,
         {at(0, 640), all(5120)},
         {},
         rope},
        {L + "self_attn.k_proj.weight",
         {at(128 * t, 128), all(5120)},
         qkv,
         {at(640, 128), all(5120)},
         {},
         rope},
        {L + "self_attn.v_proj.weight",
         {at(128 * t, 128), all(5120)},
         qkv,
         {at(768, 128), all(5120)}},
        {L + "self_attn.o_proj.weight",
         {all(5120), at(640 * t, 640)},
         L + "self_attn.o_proj.weight",
         {all(5120), all(640)}},
        whole(F + "router.weight", F + "router.weight", {16, 5120}),
        {F + "experts.gate_up_proj",
         {all(16), all(5120), at(1024 * t, 1024)},
         F + "experts.w13_weight",
         {all(16), at(0, 1024), all(5120)},
         {0, 2, 1}},
        {F + "experts.gate_up_proj",
         {all(16), all(5120), at(8192 + 1024 * t, 1024)},
         F + "experts.w13_weight",
         {all(16), at(1024, 1024), all(5120)},
         {0, 2, 1}},
        {F + "experts.down_proj",
         {all(16), at(1024 * t, 1024), all(5120)},
         F + "experts.w2_weight",
         {all(16), all(5120), all(1024)},
         {0, 2, 1}},
        {F + "shared_expert.gate_proj.weight",
         {at(1024 * t, 1024), all(5120)},
         F + "shared_expert.gate_up_proj.weight",
         {at(0, 1024), all(5120)}},
        {F + "shared_expert.up_proj.weight",
         {at(1024 * t, 1024), all(5120)},
         F + "shared_expert.gate_up_proj.weight",
         {at(1024, 1024), all(5120)}},
        {F + "shared_expert.down_proj.weight",
         {all(5120), at(1024 * t, 1024)},
         F + "shared_expert.down_proj.weight",
         {all(5120), all(1024)}},
        {"language_model.lm_head.weight",
         {at(25256 * t, 25256), all(5120)},
         "language_model.lm_head.weight",
         {all(25256), all(5120)}},
        {"language_model.model.embed_tokens.weight",
         {at(25256 * t, 25256), all(5120)},
         "language_model.model.embed_tokens.weight",
         {all(25256), all(5120)}},
    };
    check_rank(m, "tp8", f);
  }
}

// Llama-4-Scout at TP8 with EP 8: 16 experts / 8 = 2 whole experts per rank, rank r owning 2r
// and 2r + 1 (the loader gathers them from the fused tensors with index_select). w13 [2, 16384,
// 5120]: gate columns [0, 8192) of experts 2r, 2r + 1 transposed into rows [0, 8192), up columns
// [8192, 16384) into rows [8192, 16384); w2 [2, 5120, 8192] the whole down_proj of both,
// transposed.
TEST(LoaderFacts, Llama4ScoutTp8Ep8) {
  ModelSpec m = load_model("llama-4-scout-17b-16e");
  const std::string F = "language_model.model.layers.2.feed_forward.";
  for (int r : {0, 3, 7}) {
    RankFacts f;
    f.rank = r;
    f.params = {{F + "experts.w13_weight", {2, 16384, 5120}},
                {F + "experts.w2_weight", {2, 5120, 8192}}};
    f.copies = {
        {F + "experts.gate_up_proj",
         {at(2 * r, 2), all(5120), at(0, 8192)},
         F + "experts.w13_weight",
         {all(2), at(0, 8192), all(5120)},
         {0, 2, 1}},
        {F + "experts.gate_up_proj",
         {at(2 * r, 2), all(5120), at(8192, 8192)},
         F + "experts.w13_weight",
         {all(2), at(8192, 8192), all(5120)},
         {0, 2, 1}},
        {F + "experts.down_proj",
         {at(2 * r, 2), all(8192), all(5120)},
         F + "experts.w2_weight",
         {all(2), all(5120), all(8192)},
         {0, 2, 1}},
    };
    check_rank(m, "tp8,ep8", f);
  }
}

}  // namespace
}  // namespace shardsync::facts
