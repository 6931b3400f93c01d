#include "plan/engine_params.hpp"

#include "common/error.hpp"

namespace shardsync {

const char* loader_kind_name(LoaderKind k) {
  switch (k) {
    case LoaderKind::kReplicated: return "replicated";
    case LoaderKind::kColumn: return "column";
    case LoaderKind::kRow: return "row";
    case LoaderKind::kQKV: return "qkv";
    case LoaderKind::kMergedColumn: return "merged_column";
    case LoaderKind::kVocab: return "vocab";
    case LoaderKind::kFusedMoE: return "fused_moe";
  }
  return "?";
}

int64_t EngineParam::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void EngineParams::add(int32_t layer, Slot slot, std::string name, std::vector<int64_t> shape, LoaderKind loader,
                       DType dtype, std::vector<int64_t> output_sizes, bool disable_tp) {
  EngineParam p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.loader = loader;
  p.slot = slot;
  p.layer = layer;
  p.dtype = dtype;
  p.group = layer >= 0 ? layer + 1 : (slot == Slot::kEmbed ? 0 : num_layers_ + 1);
  p.output_sizes = std::move(output_sizes);
  p.disable_tp = disable_tp;
  index_[size_t((layer + 1) * int32_t(Slot::kCount) + int32_t(slot))] = int32_t(params_.size());
  params_.push_back(std::move(p));
}

EngineParams::EngineParams(const ModelSpec& model, const InferencePlacement& inf, int rank) {
  const ModelConfig& c = model.config();
  num_layers_ = int32_t(c.num_layers);
  index_.assign(size_t((num_layers_ + 1) * int32_t(Slot::kCount)), -1);
  InferenceCoord co = inf.coord(rank);
  const int64_t T = inf.layout().tp, h = c.hidden;
  const int64_t m = inf.ep() ? 1 : inf.moe_size();  // MoE tensor-parallel size
  const DType dt = c.dtype;
  const bool first = co.pp_rank == 0, last = co.pp_rank == inf.layout().pp - 1;
  const int64_t vocab_rows = inf.vocab_rows_per_rank();
  const std::string mp = c.model_prefix;
  const std::string head = c.arch == Arch::kLlama4 ? "language_model.lm_head.weight" : "lm_head.weight";
  using LK = LoaderKind;

  const bool gpt_oss = c.arch == Arch::kGptOss;  // vLLM 0.11.0 names: embedding, attn.qkv
  if (first) add(-1, Slot::kEmbed, mp + (gpt_oss ? "embedding.weight" : "embed_tokens.weight"), {vocab_rows, h}, LK::kVocab, dt);
  int64_t num_local_experts = c.is_moe() ? (inf.ep() ? inf.local_expert_count(co.moe_rank) : c.num_experts) : 0;
  for (int32_t l = 0; l < num_layers_; ++l) {
    if (inf.stage_of_layer(l) != co.pp_rank) continue;
    std::string p = c.layer_prefix + std::to_string(l) + ".";
    add(l, Slot::kInputNorm, p + "input_layernorm.weight", {h}, LK::kReplicated, dt);
    if (c.is_mla()) {
      int64_t nh = c.num_heads / T, q_rows = nh * (c.qk_nope_head_dim + c.qk_rope_head_dim);
      if (c.q_lora_rank > 0) {
        add(l, Slot::kFusedQkvA, p + "self_attn.fused_qkv_a_proj.weight",
            {c.q_lora_rank + c.kv_lora_rank + c.qk_rope_head_dim, h}, LK::kMergedColumn, dt,
            {c.q_lora_rank, c.kv_lora_rank + c.qk_rope_head_dim}, true);
        add(l, Slot::kQANorm, p + "self_attn.q_a_layernorm.weight", {c.q_lora_rank}, LK::kReplicated, dt);
        add(l, Slot::kQB, p + "self_attn.q_b_proj.weight", {q_rows, c.q_lora_rank}, LK::kColumn, dt);
      } else {  // vLLM: q_proj column-parallel, kv_a_proj_with_mqa a ReplicatedLinear of its own
        add(l, Slot::kQ, p + "self_attn.q_proj.weight", {q_rows, h}, LK::kColumn, dt);
        add(l, Slot::kKvA, p + "self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, h},
            LK::kReplicated, dt);
      }
      add(l, Slot::kKvANorm, p + "self_attn.kv_a_layernorm.weight", {c.kv_lora_rank}, LK::kReplicated, dt);
      add(l, Slot::kKvB, p + "self_attn.kv_b_proj.weight", {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
          LK::kColumn, dt);
      add(l, Slot::kO, p + "self_attn.o_proj.weight", {h, nh * c.v_head_dim}, LK::kRow, dt);
    } else {
      int64_t nq = c.num_heads / T, nkv = inf.kv_heads_per_rank();
      int64_t rows = (nq + 2 * nkv) * c.head_dim;
      const std::string a = p + (gpt_oss ? "attn." : "self_attn."), qkv = gpt_oss ? "qkv" : "qkv_proj";
      add(l, Slot::kQKV, a + qkv + ".weight", {rows, h}, LK::kQKV, dt);
      if (c.qkv_bias) add(l, Slot::kQKVBias, a + qkv + ".bias", {rows}, LK::kQKV, dt);
      add(l, Slot::kO, a + "o_proj.weight", {h, nq * c.head_dim}, LK::kRow, dt);
      if (c.o_bias) add(l, Slot::kOBias, a + "o_proj.bias", {h}, LK::kReplicated, dt);
      if (c.qk_norm) {
        add(l, Slot::kQNorm, a + "q_norm.weight", {c.head_dim}, LK::kReplicated, dt);
        add(l, Slot::kKNorm, a + "k_norm.weight", {c.head_dim}, LK::kReplicated, dt);
      }
      if (c.attn_sinks) add(l, Slot::kSinks, a + "sinks", {nq}, LK::kColumn, dt);
    }
    add(l, Slot::kPostNorm, p + "post_attention_layernorm.weight", {h}, LK::kReplicated, dt);
    const std::string mlp = p + (c.arch == Arch::kLlama4 ? "feed_forward." : "mlp.");
    const std::string moe = p + (c.arch == Arch::kLlama4 ? "feed_forward." : c.moe_block);
    if (c.is_moe_layer(l) && gpt_oss) {
      int64_t mi = c.moe_intermediate / m;
      add(l, Slot::kRouter, mlp + "router.weight", {c.num_experts, h}, LK::kReplicated, dt);
      add(l, Slot::kRouterBias, mlp + "router.bias", {c.num_experts}, LK::kReplicated, dt);
      add(l, Slot::kW13, mlp + "experts.w13_weight", {num_local_experts, 2 * mi, h}, LK::kFusedMoE, dt);
      add(l, Slot::kW13Bias, mlp + "experts.w13_bias", {num_local_experts, 2 * mi}, LK::kFusedMoE, dt);
      add(l, Slot::kW2, mlp + "experts.w2_weight", {num_local_experts, h, mi}, LK::kFusedMoE, dt);
      add(l, Slot::kW2Bias, mlp + "experts.w2_bias", {num_local_experts, h}, LK::kFusedMoE, dt);
    } else if (c.is_moe_layer(l)) {
      int64_t mi = c.moe_intermediate / m;
      std::string router = c.arch == Arch::kLlama4 ? "router.weight" : "gate.weight";
      add(l, Slot::kRouter, moe + router, {c.num_experts, h}, LK::kReplicated, c.router_fp32 ? DType::kF32 : dt);
      if (c.router_bias)
        add(l, Slot::kRouterBias, moe + "gate.e_score_correction_bias", {c.num_experts}, LK::kReplicated, DType::kF32);
      add(l, Slot::kW13, moe + "experts.w13_weight", {num_local_experts, 2 * mi, h}, LK::kFusedMoE, dt);
      add(l, Slot::kW2, moe + "experts.w2_weight", {num_local_experts, h, mi}, LK::kFusedMoE, dt);
      if (c.num_shared_experts > 0) {
        std::string sp = moe + (c.arch == Arch::kLlama4 ? "shared_expert." : "shared_experts.");
        int64_t si = c.shared_intermediate;
        const bool whole = inf.shared_experts_whole();  // vLLM's disable_tp under sequence-parallel MoE
        const int64_t st = whole ? 1 : T;
        add(l, Slot::kSharedGateUp, sp + "gate_up_proj.weight", {2 * si / st, h}, LK::kMergedColumn, dt, {si, si}, whole);
        add(l, Slot::kSharedDown, sp + "down_proj.weight", {h, si / st}, whole ? LK::kReplicated : LK::kRow, dt, {},
            whole);
      }
    } else {
      int64_t I = c.intermediate;
      add(l, Slot::kGateUp, mlp + "gate_up_proj.weight", {2 * I / T, h}, LK::kMergedColumn, dt, {I, I});
      if (c.mlp_bias) add(l, Slot::kGateUpBias, mlp + "gate_up_proj.bias", {2 * I / T}, LK::kMergedColumn, dt, {I, I});
      add(l, Slot::kDown, mlp + "down_proj.weight", {h, I / T}, LK::kRow, dt);
      if (c.mlp_bias) add(l, Slot::kDownBias, mlp + "down_proj.bias", {h}, LK::kReplicated, dt);
    }
  }
  if (last) {
    add(-1, Slot::kFinalNorm, mp + "norm.weight", {h}, LK::kReplicated, dt);
    // Tied weights: with one PP stage lm_head is embed_tokens itself; with several, the
    // last stage keeps its own copy loaded from embed_tokens.
    if (!c.tie_embeddings || !first) add(-1, Slot::kLmHead, head, {vocab_rows, h}, LK::kVocab, dt);
  }
}

int32_t EngineParams::find(int32_t layer, Slot slot) const {
  if (layer < -1 || layer >= num_layers_) return -1;
  return index_[size_t((layer + 1) * int32_t(Slot::kCount) + int32_t(slot))];
}

int32_t EngineParams::find(const std::string& name) const {
  for (int32_t i = 0; i < int32_t(params_.size()); ++i)
    if (params_[size_t(i)].name == name) return i;
  return -1;
}

int64_t EngineParams::total_bytes() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.bytes();
  return n;
}

}  // namespace shardsync
