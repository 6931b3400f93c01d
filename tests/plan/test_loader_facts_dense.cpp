// Hand-written vLLM loader facts for the dense families: Qwen3, Qwen2, Llama, Mistral
// (issue 41; the checker and its conventions: loader_facts.hpp). Each number is derived in
// a comment from the published config.json; vLLM's rules are those of
// shared/reference/models-and-loaders.md part B (QKVParallelLinear B.1, MergedColumn B.2,
// RowParallel B.3, VocabParallelEmbedding B.4, PP B.7).
#include "loader_facts.hpp"

namespace shardsync::facts {
namespace {

// Qwen3-8B (configs/models/qwen3-8b.json) at TP2: hidden 4096; 32 q heads x 128 = 4096 q
// rows, 8 KV heads x 128 = 1024 k (and v) rows; TP2 -> 16 heads = 2048 q rows and 4 KV heads =
// 512 k/v rows per rank, so qkv_proj is [2048 + 512 + 512 = 3072, 4096] with q at 0, k at 2048,
// v at 2560. intermediate 12288 -> 6144 per rank: gate_up_proj [12288, 4096] = [gate 6144 ; up
// 6144], down_proj [4096, 6144] (columns). vocab 151936 = 2374 x 64: no padding, 75968 rows per
// rank. q_norm / k_norm [128] whole; attention_bias false: no qkv bias.
TEST(LoaderFacts, Qwen3At8BTp2) {
  ModelSpec m = load_model("qwen3-8b");
  const std::string L = "model.layers.7.";
  for (int t : {0, 1}) {
    RankFacts f;
    f.rank = t;
    f.params = {{"model.embed_tokens.weight", {75968, 4096}},
                {L + "self_attn.qkv_proj.weight", {3072, 4096}},
                {L + "self_attn.o_proj.weight", {4096, 2048}},
                {L + "self_attn.q_norm.weight", {128}},
                {L + "mlp.gate_up_proj.weight", {12288, 4096}},
                {L + "mlp.down_proj.weight", {4096, 6144}},
                {"lm_head.weight", {75968, 4096}}};
    f.no_params = {L + "self_attn.qkv_proj.bias", L + "self_attn.o_proj.bias"};
    f.copies = {
        {"model.embed_tokens.weight",
         {at(75968 * t, 75968), all(4096)},
         "model.embed_tokens.weight",
         {all(75968), all(4096)}},
        // rank 1: q rows [2048, 4096) into [0, 2048); k rows [512, 1024) into [2048, 2560) and
        // v rows [512, 1024) into [2560, 3072)
        {L + "self_attn.q_proj.weight",
         {at(2048 * t, 2048), all(4096)},
         L + "self_attn.qkv_proj.weight",
         {at(0, 2048), all(4096)}},
        {L + "self_attn.k_proj.weight",
         {at(512 * t, 512), all(4096)},
         L + "self_attn.qkv_proj.weight",
         {at(2048, 512), all(4096)}},
        {L + "self_attn.v_proj.weight",
         {at(512 * t, 512), all(4096)},
         L + "self_attn.qkv_proj.weight",
         {at(2560, 512), all(4096)}},
        // o_proj [4096, 4096] is row-parallel: input columns [2048t, +2048) of every row
        {L + "self_attn.o_proj.weight",
         {all(4096), at(2048 * t, 2048)},
         L + "self_attn.o_proj.weight",
         {all(4096), all(2048)}},
        whole(L + "self_attn.q_norm.weight", L + "self_attn.q_norm.weight", {128}),
        whole(L + "self_attn.k_norm.weight", L + "self_attn.k_norm.weight", {128}),
        whole(L + "input_layernorm.weight", L + "input_layernorm.weight", {4096}),
        whole(L + "post_attention_layernorm.weight", L + "post_attention_layernorm.weight", {4096}),
        // rank 1: gate rows [6144, 12288) into [0, 6144), up rows [6144, 12288) into [6144, 12288)
        {L + "mlp.gate_proj.weight",
         {at(6144 * t, 6144), all(4096)},
         L + "mlp.gate_up_proj.weight",
         {at(0, 6144), all(4096)}},
        {L + "mlp.up_proj.weight",
         {at(6144 * t, 6144), all(4096)},
         L + "mlp.gate_up_proj.weight",
         {at(6144, 6144), all(4096)}},
        {L + "mlp.down_proj.weight",
         {all(4096), at(6144 * t, 6144)},
         L + "mlp.down_proj.weight",
         {all(4096), all(6144)}},
        whole("model.norm.weight", "model.norm.weight", {4096}),
        {"lm_head.weight",
         {at(75968 * t, 75968), all(4096)},
         "lm_head.weight",
         {all(75968), all(4096)}},
    };
    check_rank(m, "tp2", f);
  }
}

// Qwen2.5-7B-Instruct (configs/models/qwen2.5-7b-instruct.json) at TP4: hidden 3584; 28 q
// heads x 128 = 3584 q rows -> 7 heads = 896 per rank; 4 KV heads x 128 = 512 rows -> 1 head =
// 128 per rank (T = nkv: no replication, rank t keeps KV head t). qkv_proj [896 + 128 + 128 =
// 1152, 3584], and Qwen2's QKVParallelLinear has a bias sharded the same way; o_proj has none.
// intermediate 18944 -> 4736 per rank. vocab 152064 = 2376 x 64, 38016 rows per rank.
TEST(LoaderFacts, Qwen2At7BTp4) {
  ModelSpec m = load_model("qwen2.5-7b-instruct");
  const std::string L = "model.layers.11.";
  for (int t : {0, 2, 3}) {
    RankFacts f;
    f.rank = t;
    f.params = {{L + "self_attn.qkv_proj.weight", {1152, 3584}},
                {L + "self_attn.qkv_proj.bias", {1152}},
                {L + "self_attn.o_proj.weight", {3584, 896}},
                {L + "mlp.gate_up_proj.weight", {9472, 3584}},
                {L + "mlp.down_proj.weight", {3584, 4736}},
                {"model.embed_tokens.weight", {38016, 3584}}};
    f.no_params = {L + "self_attn.o_proj.bias", L + "self_attn.q_norm.weight"};
    const std::string qkv = L + "self_attn.qkv_proj.weight", qkv_b = L + "self_attn.qkv_proj.bias";
    f.copies = {
        // rank 2: q rows [1792, 2688) at 0; KV head 2 = rows [256, 384) at 896 (k) and 1024 (v)
        {L + "self_attn.q_proj.weight",
         {at(896 * t, 896), all(3584)},
         qkv,
         {at(0, 896), all(3584)}},
        {L + "self_attn.k_proj.weight",
         {at(128 * t, 128), all(3584)},
         qkv,
         {at(896, 128), all(3584)}},
        {L + "self_attn.v_proj.weight",
         {at(128 * t, 128), all(3584)},
         qkv,
         {at(1024, 128), all(3584)}},
        {L + "self_attn.q_proj.bias", {at(896 * t, 896)}, qkv_b, {at(0, 896)}},
        {L + "self_attn.k_proj.bias", {at(128 * t, 128)}, qkv_b, {at(896, 128)}},
        {L + "self_attn.v_proj.bias", {at(128 * t, 128)}, qkv_b, {at(1024, 128)}},
        {L + "self_attn.o_proj.weight",
         {all(3584), at(896 * t, 896)},
         L + "self_attn.o_proj.weight",
         {all(3584), all(896)}},
        {L + "mlp.gate_proj.weight",
         {at(4736 * t, 4736), all(3584)},
         L + "mlp.gate_up_proj.weight",
         {at(0, 4736), all(3584)}},
        {L + "mlp.up_proj.weight",
         {at(4736 * t, 4736), all(3584)},
         L + "mlp.gate_up_proj.weight",
         {at(4736, 4736), all(3584)}},
        {L + "mlp.down_proj.weight",
         {all(3584), at(4736 * t, 4736)},
         L + "mlp.down_proj.weight",
         {all(3584), all(4736)}},
        {"model.embed_tokens.weight",
         {at(38016 * t, 38016), all(3584)},
         "model.embed_tokens.weight",
         {all(38016), all(3584)}},
    };
    check_rank(m, "tp4", f);
  }
}

// Llama: no Llama config is bundled, so the published config.json of
// NousResearch/Nous-Hermes-2-SOLAR-10.7B (LlamaForCausalLM), verbatim. Its vocabulary of
// 32002 (two added chat tokens) is not a multiple of 64, so it shows vLLM's vocab padding.
constexpr const char* kSolarConfig = R"({
  "_name_or_path": "upstage/SOLAR-10.7B-v1.0",
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 32000,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 48,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-5,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.37.0.dev0",
  "use_cache": false,
  "vocab_size": 32002
})";

// Nous-Hermes-2-SOLAR-10.7B at TP2 x PP2 (local rank = pp * 2 + tp). hidden 4096; 32 q heads
// x 128 -> 2048 q rows per rank; 8 KV heads -> 4 per rank = 512 rows; qkv_proj [3072, 4096].
// intermediate 14336 -> 7168 per rank. PP: get_pp_indices(48, p, 2) gives layers [0, 24) to
// stage 0 and [24, 48) to stage 1; the embedding lives on stage 0, norm and lm_head on stage 1.
// Vocab: 32002 padded to ceil(32002 / 64) x 64 = 32064 rows, 16032 per rank: rank tp0 holds
// rows [0, 16032); tp1's padded range [16032, 32064) clipped to 32002 is [16032, 32002), 15970
// real rows copied into param rows [0, 15970) and param rows [15970, 16032) (62) zero-filled.
TEST(LoaderFacts, LlamaSolar10BTp2Pp2) {
  ModelSpec m = build_model(
      parse_model_config(kSolarConfig, "Nous-Hermes-2-SOLAR-10.7B/config.json", "solar-10.7b"));
  for (int rank : {0, 1, 2, 3}) {
    const int t = rank % 2, stage = rank / 2;
    const std::string L = "model.layers." + std::to_string(stage == 0 ? 23 : 24) + ".";
    const std::string other = "model.layers." + std::to_string(stage == 0 ? 24 : 23) + ".";
    const int64_t vocab_rows = t == 0 ? 16032 : 15970;  // real rows of this rank's 16032
    RankFacts f;
    f.rank = rank;
    f.params = {{L + "self_attn.qkv_proj.weight", {3072, 4096}},
                {L + "self_attn.o_proj.weight", {4096, 2048}},
                {L + "mlp.gate_up_proj.weight", {14336, 4096}},
                {L + "mlp.down_proj.weight", {4096, 7168}}};
    f.no_params = {other + "self_attn.qkv_proj.weight", L + "self_attn.qkv_proj.bias"};
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(2048 * t, 2048), all(4096)},
         L + "self_attn.qkv_proj.weight",
         {at(0, 2048), all(4096)}},
        {L + "self_attn.k_proj.weight",
         {at(512 * t, 512), all(4096)},
         L + "self_attn.qkv_proj.weight",
         {at(2048, 512), all(4096)}},
        {L + "self_attn.v_proj.weight",
         {at(512 * t, 512), all(4096)},
         L + "self_attn.qkv_proj.weight",
         {at(2560, 512), all(4096)}},
        {L + "self_attn.o_proj.weight",
         {all(4096), at(2048 * t, 2048)},
         L + "self_attn.o_proj.weight",
         {all(4096), all(2048)}},
        {L + "mlp.gate_proj.weight",
         {at(7168 * t, 7168), all(4096)},
         L + "mlp.gate_up_proj.weight",
         {at(0, 7168), all(4096)}},
        {L + "mlp.up_proj.weight",
         {at(7168 * t, 7168), all(4096)},
         L + "mlp.gate_up_proj.weight",
         {at(7168, 7168), all(4096)}},
        {L + "mlp.down_proj.weight",
         {all(4096), at(7168 * t, 7168)},
         L + "mlp.down_proj.weight",
         {all(4096), all(7168)}},
    };
    f.absent = {other + "self_attn.q_proj.weight", other + "mlp.gate_proj.weight"};
    const std::string vocab_param = stage == 0 ? "model.embed_tokens.weight" : "lm_head.weight";
    f.params.push_back({vocab_param, {16032, 4096}});
    f.copies.push_back({vocab_param,
                        {at(16032 * t, vocab_rows), all(4096)},
                        vocab_param,
                        {all(vocab_rows), all(4096)}});
    if (t == 1) f.fills = {{vocab_param, {at(15970, 62), all(4096)}}};
    if (stage == 0) {
      f.no_params.push_back("lm_head.weight");
      f.no_params.push_back("model.norm.weight");
      f.absent.push_back("lm_head.weight");
      f.absent.push_back("model.norm.weight");
    } else {
      f.no_params.push_back("model.embed_tokens.weight");
      f.absent.push_back("model.embed_tokens.weight");
      f.copies.push_back(whole("model.norm.weight", "model.norm.weight", {4096}));
    }
    check_rank(m, "tp2,pp2", f);
  }
}

// Mistral: no Mistral config is bundled, so the published config.json of
// mistralai/Mistral-Nemo-Base-2407 (MistralForCausalLM; vLLM loads it with its Llama code).
// Its head_dim 128 is not hidden / heads (5120 / 32 = 160): q_proj has 32 x 128 = 4096 rows
// against a hidden of 5120, and o_proj is [5120, 4096].
constexpr const char* kNemoConfig = R"({
  "architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 5120,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 1024000,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 40,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 131072
})";

// Mistral-Nemo at TP8: 32 q heads -> 4 per rank = 512 q rows; 8 KV heads -> 1 per rank = 128
// rows (rank t keeps KV head t); qkv_proj [768, 5120]. o_proj [5120, 4096] row-parallel:
// columns [512t, +512). intermediate 14336 -> 1792 per rank. vocab 131072 -> 16384 per rank.
TEST(LoaderFacts, MistralNemo12BTp8) {
  ModelSpec m = build_model(
      parse_model_config(kNemoConfig, "Mistral-Nemo-Base-2407/config.json", "mistral-nemo"));
  const std::string L = "model.layers.30.";
  for (int t : {0, 5, 7}) {
    RankFacts f;
    f.rank = t;
    f.params = {{L + "self_attn.qkv_proj.weight", {768, 5120}},
                {L + "self_attn.o_proj.weight", {5120, 512}},
                {L + "mlp.gate_up_proj.weight", {3584, 5120}},
                {L + "mlp.down_proj.weight", {5120, 1792}},
                {"model.embed_tokens.weight", {16384, 5120}},
                {"lm_head.weight", {16384, 5120}}};
    const std::string qkv = L + "self_attn.qkv_proj.weight";
    f.copies = {
        {L + "self_attn.q_proj.weight",
         {at(512 * t, 512), all(5120)},
         qkv,
         {at(0, 512), all(5120)}},
        {L + "self_attn.k_proj.weight",
         {at(128 * t, 128), all(5120)},
         qkv,
         {at(512, 128), all(5120)}},
        {L + "self_attn.v_proj.weight",
         {at(128 * t, 128), all(5120)},
         qkv,
         {at(640, 128), all(5120)}},
        {L + "self_attn.o_proj.weight",
         {all(5120), at(512 * t, 512)},
         L + "self_attn.o_proj.weight",
         {all(5120), all(512)}},
        {L + "mlp.gate_proj.weight",
         {at(1792 * t, 1792), all(5120)},
         L + "mlp.gate_up_proj.weight",
         {at(0, 1792), all(5120)}},
        {L + "mlp.up_proj.weight",
         {at(1792 * t, 1792), all(5120)},
         L + "mlp.gate_up_proj.weight",
         {at(1792, 1792), all(5120)}},
        {L + "mlp.down_proj.weight",
         {all(5120), at(1792 * t, 1792)},
         L + "mlp.down_proj.weight",
         {all(5120), all(1792)}},
        {"lm_head.weight",
         {at(16384 * t, 16384), all(5120)},
         "lm_head.weight",
         {all(16384), all(5120)}},
    };
    check_rank(m, "tp8", f);
  }
}

}  // namespace
}  // namespace shardsync::facts
