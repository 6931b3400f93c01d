#include "model/catalog.hpp"

#include <filesystem>

#include "common/error.hpp"
#include "common/table.hpp"
#include "common/json_input.hpp"
#include "model/bundled.hpp"

namespace shardsync {

const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::kEmbedding: return "embedding";
    case TensorKind::kLmHead: return "lm_head";
    case TensorKind::kNorm: return "norm";
    case TensorKind::kQProj: return "q_proj";
    case TensorKind::kKProj: return "k_proj";
    case TensorKind::kVProj: return "v_proj";
    case TensorKind::kOProj: return "o_proj";
    case TensorKind::kGateProj: return "gate_proj";
    case TensorKind::kUpProj: return "up_proj";
    case TensorKind::kDownProj: return "down_proj";
    case TensorKind::kRouter: return "router";
    case TensorKind::kRouterBias: return "router_bias";
    case TensorKind::kExpertGate: return "expert_gate";
    case TensorKind::kExpertUp: return "expert_up";
    case TensorKind::kExpertDown: return "expert_down";
    case TensorKind::kSharedGate: return "shared_gate";
    case TensorKind::kSharedUp: return "shared_up";
    case TensorKind::kSharedDown: return "shared_down";
    case TensorKind::kMlaQ: return "mla_q";
    case TensorKind::kMlaQA: return "mla_q_a";
    case TensorKind::kMlaQB: return "mla_q_b";
    case TensorKind::kMlaKvA: return "mla_kv_a";
    case TensorKind::kMlaKvB: return "mla_kv_b";
    case TensorKind::kFusedExpertsGateUp: return "fused_experts_gate_up";
    case TensorKind::kFusedExpertsDown: return "fused_experts_down";
    case TensorKind::kSinks: return "sinks";
  }
  return "?";
}

int64_t ParamMeta::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow was excluded when the catalog was built
  return n;
}

namespace {

// Appends parameters of one model, checking element counts for overflow.
class ParamListBuilder {
 public:
  explicit ParamListBuilder(const ModelConfig& c) : c_(c) {}

  void add(std::string name, std::vector<int64_t> shape, TensorKind kind, int32_t layer,
           int32_t expert = -1, bool is_bias = false, DType dtype_override = DType::kBF16,
           bool use_override = false) {
    int64_t n = 1;
    for (int64_t d : shape) {
      if (d <= 0 || __builtin_mul_overflow(n, d, &n))
        throw InputError(c_.source, "sizes",
                         "tensor " + name + " has shape " + fmt_shape(shape) +
                             " whose element count is not a positive 64-bit integer");
    }
    int64_t b = 0;
    if (__builtin_mul_overflow(n, int64_t(4), &b) || __builtin_add_overflow(total_, b, &total_))
      throw InputError(c_.source, "sizes", "model size overflows 64 bits at tensor " + name);
    ParamMeta p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.kind = kind;
    p.layer = layer;
    p.expert = expert;
    p.is_bias = is_bias;
    p.dtype = use_override ? dtype_override : c_.dtype;
    p.group = layer < 0 ? (kind == TensorKind::kEmbedding ? 0 : int32_t(c_.num_layers) + 1)
                        : layer + 1;
    params_.push_back(std::move(p));
  }

  std::vector<ParamMeta> take() { return std::move(params_); }

 private:
  const ModelConfig& c_;
  std::vector<ParamMeta> params_;
  int64_t total_ = 0;
};

std::string lp(const ModelConfig& c, int64_t layer) {
  return c.layer_prefix + std::to_string(layer) + ".";
}

void add_gqa_attention(const ModelConfig& c, ParamListBuilder& b, int32_t l) {
  std::string p = lp(c, l) + "self_attn.";
  int64_t h = c.hidden, q = c.q_proj_rows(), kv = c.kv_proj_rows();
  b.add(p + "q_proj.weight", {q, h}, TensorKind::kQProj, l);
  if (c.qkv_bias) b.add(p + "q_proj.bias", {q}, TensorKind::kQProj, l, -1, true);
  b.add(p + "k_proj.weight", {kv, h}, TensorKind::kKProj, l);
  if (c.qkv_bias) b.add(p + "k_proj.bias", {kv}, TensorKind::kKProj, l, -1, true);
  b.add(p + "v_proj.weight", {kv, h}, TensorKind::kVProj, l);
  if (c.qkv_bias) b.add(p + "v_proj.bias", {kv}, TensorKind::kVProj, l, -1, true);
  b.add(p + "o_proj.weight", {h, q}, TensorKind::kOProj, l);
  if (c.o_bias) b.add(p + "o_proj.bias", {h}, TensorKind::kOProj, l, -1, true);
  if (c.qk_norm) {
    b.add(p + "q_norm.weight", {c.head_dim}, TensorKind::kNorm, l);
    b.add(p + "k_norm.weight", {c.head_dim}, TensorKind::kNorm, l);
  }
  if (c.attn_sinks) b.add(p + "sinks", {c.num_heads}, TensorKind::kSinks, l);
}

void add_mla_attention(const ModelConfig& c, ParamListBuilder& b, int32_t l) {
  std::string p = lp(c, l) + "self_attn.";
  int64_t h = c.hidden;
  const int64_t q_rows = c.num_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim);
  if (c.q_lora_rank > 0) {
    b.add(p + "q_a_proj.weight", {c.q_lora_rank, h}, TensorKind::kMlaQA, l);
    b.add(p + "q_a_layernorm.weight", {c.q_lora_rank}, TensorKind::kNorm, l);
    b.add(p + "q_b_proj.weight", {q_rows, c.q_lora_rank}, TensorKind::kMlaQB, l);
  } else {
    b.add(p + "q_proj.weight", {q_rows, h}, TensorKind::kMlaQ, l);
  }
  b.add(p + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, h}, TensorKind::kMlaKvA, l);
  b.add(p + "kv_a_layernorm.weight", {c.kv_lora_rank}, TensorKind::kNorm, l);
  b.add(p + "kv_b_proj.weight", {c.num_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
        TensorKind::kMlaKvB, l);
  b.add(p + "o_proj.weight", {h, c.num_heads * c.v_head_dim}, TensorKind::kOProj, l);
}

void add_dense_mlp(const ModelConfig& c, ParamListBuilder& b, int32_t l, const std::string& mlp,
                   int64_t inter, TensorKind gate, TensorKind up, TensorKind down, bool bias = false) {
  std::string p = lp(c, l) + mlp;
  b.add(p + "gate_proj.weight", {inter, c.hidden}, gate, l);
  if (bias) b.add(p + "gate_proj.bias", {inter}, gate, l, -1, true);
  b.add(p + "up_proj.weight", {inter, c.hidden}, up, l);
  if (bias) b.add(p + "up_proj.bias", {inter}, up, l, -1, true);
  b.add(p + "down_proj.weight", {c.hidden, inter}, down, l);
  if (bias) b.add(p + "down_proj.bias", {c.hidden}, down, l, -1, true);
}

void add_per_expert_moe(const ModelConfig& c, ParamListBuilder& b, int32_t l) {
  std::string p = lp(c, l) + c.moe_block;
  // GLM-4.5: vLLM holds the gate as an fp32 nn.Linear and upcasts the checkpoint's bf16 on
  // load; the trainer side sends it as fp32 (the upcast is exact), so bytes move unconverted.
  b.add(p + "gate.weight", {c.num_experts, c.hidden}, TensorKind::kRouter, l, -1, false, DType::kF32, c.router_fp32);
  if (c.router_bias)
    b.add(p + "gate.e_score_correction_bias", {c.num_experts}, TensorKind::kRouterBias, l, -1, false,
          DType::kF32, true);
  for (int32_t e = 0; e < int32_t(c.num_experts); ++e) {
    std::string ep = p + "experts." + std::to_string(e) + ".";
    b.add(ep + c.expert_names[0] + ".weight", {c.moe_intermediate, c.hidden}, TensorKind::kExpertGate, l, e);
    b.add(ep + c.expert_names[1] + ".weight", {c.moe_intermediate, c.hidden}, TensorKind::kExpertUp, l, e);
    b.add(ep + c.expert_names[2] + ".weight", {c.hidden, c.moe_intermediate}, TensorKind::kExpertDown, l, e);
  }
  if (c.num_shared_experts > 0)
    add_dense_mlp(c, b, l, "mlp.shared_experts.", c.shared_intermediate, TensorKind::kSharedGate,
                  TensorKind::kSharedUp, TensorKind::kSharedDown);
}

void add_llama4_moe(const ModelConfig& c, ParamListBuilder& b, int32_t l) {
  std::string p = lp(c, l) + "feed_forward.";
  b.add(p + "router.weight", {c.num_experts, c.hidden}, TensorKind::kRouter, l);
  b.add(p + "experts.gate_up_proj", {c.num_experts, c.hidden, 2 * c.moe_intermediate},
        TensorKind::kFusedExpertsGateUp, l);
  b.add(p + "experts.down_proj", {c.num_experts, c.moe_intermediate, c.hidden},
        TensorKind::kFusedExpertsDown, l);
  add_dense_mlp(c, b, l, "feed_forward.shared_expert.", c.shared_intermediate,
                TensorKind::kSharedGate, TensorKind::kSharedUp, TensorKind::kSharedDown);
}

// gpt-oss: a router with a bias, and the experts fused with their biases; gate_up's last
// dimension interleaves gate and up columns (g0, u0, g1, u1, ...).
void add_gpt_oss_moe(const ModelConfig& c, ParamListBuilder& b, int32_t l) {
  std::string p = lp(c, l) + "mlp.";
  int64_t E = c.num_experts, h = c.hidden, I = c.moe_intermediate;
  b.add(p + "router.weight", {E, h}, TensorKind::kRouter, l);
  b.add(p + "router.bias", {E}, TensorKind::kRouterBias, l, -1, true);
  b.add(p + "experts.gate_up_proj", {E, h, 2 * I}, TensorKind::kFusedExpertsGateUp, l);
  b.add(p + "experts.gate_up_proj_bias", {E, 2 * I}, TensorKind::kFusedExpertsGateUp, l, -1, true);
  b.add(p + "experts.down_proj", {E, I, h}, TensorKind::kFusedExpertsDown, l);
  b.add(p + "experts.down_proj_bias", {E, h}, TensorKind::kFusedExpertsDown, l, -1, true);
}

std::vector<ParamMeta> make_params(const ModelConfig& c) {
  ParamListBuilder b(c);
  b.add(c.model_prefix + "embed_tokens.weight", {c.vocab, c.hidden}, TensorKind::kEmbedding, -1);
  for (int32_t l = 0; l < int32_t(c.num_layers); ++l) {
    b.add(lp(c, l) + "input_layernorm.weight", {c.hidden}, TensorKind::kNorm, l);
    if (c.is_mla()) add_mla_attention(c, b, l);
    else add_gqa_attention(c, b, l);
    b.add(lp(c, l) + "post_attention_layernorm.weight", {c.hidden}, TensorKind::kNorm, l);
    bool moe = c.is_moe_layer(l);
    if (c.arch == Arch::kLlama4) {
      if (moe) add_llama4_moe(c, b, l);
      else add_dense_mlp(c, b, l, "feed_forward.", c.intermediate, TensorKind::kGateProj,
                         TensorKind::kUpProj, TensorKind::kDownProj);
    } else if (moe && c.arch == Arch::kGptOss) {
      add_gpt_oss_moe(c, b, l);
    } else if (moe) {
      add_per_expert_moe(c, b, l);
    } else {
      add_dense_mlp(c, b, l, "mlp.", c.intermediate, TensorKind::kGateProj, TensorKind::kUpProj,
                    TensorKind::kDownProj, c.mlp_bias);
    }
  }
  b.add(c.model_prefix + "norm.weight", {c.hidden}, TensorKind::kNorm, -1);
  if (!c.tie_embeddings) b.add(c.lm_head_name, {c.vocab, c.hidden}, TensorKind::kLmHead, -1);
  return b.take();
}

}  // namespace

ModelSpec::ModelSpec(ModelConfig config, std::vector<ParamMeta> params)
    : config_(std::move(config)), params_(std::move(params)) {
  int32_t num_groups = int32_t(config_.num_layers) + 2;
  groups_.resize(size_t(num_groups));
  groups_[0].name = "embed";
  for (int32_t l = 0; l < int32_t(config_.num_layers); ++l) {
    groups_[size_t(l) + 1].name = "layer." + std::to_string(l);
    groups_[size_t(l) + 1].layer = l;
  }
  groups_.back().name = "head";
  for (int32_t i = 0; i < int32_t(params_.size()); ++i) {
    const ParamMeta& p = params_[size_t(i)];
    WeightGroup& g = groups_[size_t(p.group)];
    if (g.num_params == 0) g.first_param = i;
    if (g.first_param + g.num_params != i)
      throw Error("catalog: parameters of group " + g.name + " are not contiguous");
    g.num_params++;
    g.bytes += p.bytes();
    num_elements_ += p.numel();
    total_bytes_ += p.bytes();
    index_.emplace(p.name, i);
  }
}

int32_t ModelSpec::find(const std::string& hf_name) const {
  auto it = index_.find(hf_name);
  return it == index_.end() ? -1 : it->second;
}

ModelSpec build_model(const ModelConfig& config) { return ModelSpec(config, make_params(config)); }

ModelSpec load_model(const std::string& name_or_path) {
  if (const char* text = bundled_text("models", name_or_path))
    return build_model(parse_model_config(text, "bundled:" + name_or_path, name_or_path));
  bool looks_like_path = name_or_path.find('/') != std::string::npos ||
                         name_or_path.ends_with(".json");
  if (!looks_like_path)
    throw InputError("--model", name_or_path,
                     "not a bundled model name (" + bundled_names_list("models") + ") nor a path to a config.json");
  const std::string text = read_text_file(name_or_path, "cannot open model config for reading");
  std::filesystem::path p(name_or_path);
  std::string name = p.stem().string();
  if (name == "config" && p.has_parent_path()) name = p.parent_path().filename().string();
  return build_model(parse_model_config(text, name_or_path, name));
}

}  // namespace shardsync
