#include "layout/inference.hpp"

#include "common/error.hpp"

namespace shardsync {

const char* quant_name(Quant q) {
  switch (q) {
    case Quant::kNone: return "none";
    case Quant::kFp8Block128: return "fp8-block128";
  }
  return "?";
}

bool parse_quant(const std::string& s, Quant* out) {
  if (s == "none") *out = Quant::kNone;
  else if (s == "fp8-block128") *out = Quant::kFp8Block128;
  else return false;
  return true;
}

std::string InferenceLayout::describe() const {
  std::string s;
  auto add = [&](const char* k, int v) { s += (s.empty() ? "" : ",") + std::string(k) + std::to_string(v); };
  if (tp > 1 || (dp == 1 && pp == 1)) add("tp", tp);
  if (dp > 1) add("dp", dp);
  if (pp > 1) add("pp", pp);
  if (enable_ep) add("ep", tp * dp);
  if (quant != Quant::kNone) s += std::string(" ") + quant_name(quant);
  if (replicas > 1) s += " x" + std::to_string(replicas) + " replicas";
  return s;
}

InferencePlacement::InferencePlacement(const ModelSpec& model, InferenceLayout layout)
    : model_(&model), layout_(std::move(layout)) {
  validate();
  // vLLM get_pp_indices: n//PP each; the remainder goes to partitions -2, -3, ...
  int64_t L = model_->config().num_layers;
  int pp = layout_.pp;
  stage_layers_.assign(size_t(pp), L / pp);
  int64_t rem = L % pp;
  for (int64_t i = 0; i < rem; ++i) stage_layers_[size_t(pp - 2 - i)]++;
  int64_t first = 0;
  for (int s = 0; s < pp; ++s) {
    stage_first_.push_back(first);
    for (int64_t i = 0; i < stage_layers_[size_t(s)]; ++i) stage_of_layer_.push_back(s);
    first += stage_layers_[size_t(s)];
  }
}

void InferencePlacement::validate() {
  const InferenceLayout& l = layout_;
  const ModelConfig& c = model_->config();
  for (auto [name, v] : {std::pair{"tp", l.tp}, {"dp", l.dp}, {"pp", l.pp}, {"replicas", l.replicas}})
    if (v < 1) throw InputError(l.source, name, "expected an integer >= 1, got " + std::to_string(v));
  auto fail = [&](const std::string& field, const std::string& what) {
    throw InputError(l.source, field, what + " (inference layout " + l.describe() + ", model " +
                                          model_->name() + ")");
  };
  int64_t T = l.tp;
  if (l.pp > c.num_layers) fail("pp=" + std::to_string(l.pp), "exceeds num_hidden_layers");
  if (l.enable_ep && !c.is_moe()) fail("ep", "model has no experts to place");
  if (c.num_heads % T) fail("tp=" + std::to_string(T), "must divide num_attention_heads = " + std::to_string(c.num_heads));
  if (!c.is_mla() && T % c.num_kv_heads != 0 && c.num_kv_heads % T != 0)
    fail("tp=" + std::to_string(T), "must divide or be a multiple of num_key_value_heads = " +
                                        std::to_string(c.num_kv_heads) + " (vLLM QKVParallelLinear)");
  bool any_dense = false;
  for (int64_t i = 0; i < c.num_layers; ++i) any_dense = any_dense || !c.is_moe_layer(i);
  if (any_dense && c.intermediate % T) fail("tp=" + std::to_string(T), "must divide intermediate_size = " + std::to_string(c.intermediate));
  if (padded_vocab() % T) fail("tp=" + std::to_string(T), "must divide the padded vocabulary " + std::to_string(padded_vocab()));
  if (c.is_moe()) {
    int64_t m = moe_size();
    if (c.shared_intermediate % T && !shared_experts_whole()) fail("tp=" + std::to_string(T), "must divide the shared expert width " + std::to_string(c.shared_intermediate));
    if (l.enable_ep) {
      if (m > c.num_experts) fail("ep=" + std::to_string(m), "exceeds num_experts = " + std::to_string(c.num_experts));
      if (c.arch == Arch::kGptOss && c.num_experts % m)  // its loader slices num_experts // ep_size a rank
        fail("ep=" + std::to_string(m), "must divide num_local_experts = " + std::to_string(c.num_experts) +
                                            " (vLLM's gpt-oss loader gives every EP rank num_experts // ep experts)");
    } else if (c.moe_intermediate % m) {
      fail("dp*tp=" + std::to_string(m), "must divide moe_intermediate_size = " + std::to_string(c.moe_intermediate) +
                                             " (MoE-TP is flattened over DP without EP)");
    }
  }
}

InferenceCoord InferencePlacement::coord(int rank) const {
  const InferenceLayout& l = layout_;
  InferenceCoord c;
  c.replica = rank / l.ranks_per_replica();
  c.local = rank % l.ranks_per_replica();
  c.tp_rank = c.local % l.tp;
  c.pp_rank = (c.local / l.tp) % l.pp;
  c.dp_rank = c.local / (l.tp * l.pp);
  c.moe_rank = c.dp_rank * l.tp + c.tp_rank;
  return c;
}

bool InferencePlacement::holds_param(int rank, const ParamMeta& p) const {
  int stage = coord(rank).pp_rank;
  if (p.layer >= 0) return stage_of_layer(p.layer) == stage;
  if (p.kind == TensorKind::kEmbedding) return stage == 0 || (model_->config().tie_embeddings && stage == layout_.pp - 1);
  return stage == layout_.pp - 1;  // final norm, lm_head
}

int64_t InferencePlacement::local_expert_first(int moe_rank) const {
  int64_t E = model_->config().num_experts, n = moe_size();
  int64_t base = E / n, rem = E % n;
  return moe_rank * base + std::min<int64_t>(moe_rank, rem);
}

int64_t InferencePlacement::local_expert_count(int moe_rank) const {
  int64_t E = model_->config().num_experts, n = moe_size();
  return E / n + (moe_rank < E % n ? 1 : 0);
}

int64_t InferencePlacement::expert_map(int moe_rank, int64_t expert) const {
  if (!layout_.enable_ep) return expert;
  int64_t first = local_expert_first(moe_rank);
  return expert >= first && expert < first + local_expert_count(moe_rank) ? expert - first : -1;
}

int64_t InferencePlacement::kv_heads_per_rank() const {
  int64_t nkv = model_->config().num_kv_heads, T = layout_.tp;
  return T >= nkv ? 1 : nkv / T;
}

int64_t InferencePlacement::kv_head_first(int tp_rank) const {
  int64_t nkv = model_->config().num_kv_heads, T = layout_.tp;
  int64_t replicas = T >= nkv ? T / nkv : 1;
  return (tp_rank / replicas) * kv_heads_per_rank();
}

bool InferencePlacement::shared_experts_whole() const {
  const InferenceLayout& l = layout_;
  return model_->config().is_mla() && model_->config().num_shared_experts > 0 && l.enable_ep && l.tp > 1 &&
         l.dp > 1 && !l.shared_experts_tp;
}

int64_t InferencePlacement::padded_vocab() const {
  int64_t V = model_->config().vocab;
  return (V + 63) / 64 * 64;
}

int64_t InferencePlacement::needed_bytes(int rank, int32_t param_idx) const {
  const ParamMeta& p = model_->param(param_idx);
  if (!holds_param(rank, p)) return 0;
  const ModelConfig& c = model_->config();
  InferenceCoord co = coord(rank);
  int64_t T = layout_.tp, bytes = p.bytes(), elem = dtype_bytes(p.dtype);
  int64_t m = moe_size();
  switch (p.kind) {
    case TensorKind::kEmbedding:
    case TensorKind::kLmHead: {
      int64_t per = vocab_rows_per_rank(), start = co.tp_rank * per;
      int64_t rows = std::max<int64_t>(0, std::min(c.vocab, start + per) - start);
      return rows * p.shape[1] * elem;
    }
    case TensorKind::kSharedGate:
    case TensorKind::kSharedUp:
    case TensorKind::kSharedDown:
      return shared_experts_whole() ? bytes : bytes / T;
    case TensorKind::kQProj:
    case TensorKind::kGateProj:
    case TensorKind::kUpProj:
    case TensorKind::kMlaQB:
    case TensorKind::kMlaKvB:
    case TensorKind::kMlaQ:
    case TensorKind::kSinks:
      return bytes / T;
    case TensorKind::kKProj:
    case TensorKind::kVProj:
      return T >= c.num_kv_heads ? bytes / c.num_kv_heads : bytes / T;
    case TensorKind::kOProj:
    case TensorKind::kDownProj:
      return p.is_bias ? bytes : bytes / T;  // a row-parallel bias is whole on every rank
    case TensorKind::kExpertGate:
    case TensorKind::kExpertUp:
    case TensorKind::kExpertDown:
      if (ep()) return expert_map(co.moe_rank, p.expert) >= 0 ? bytes : 0;
      return bytes / m;
    case TensorKind::kFusedExpertsGateUp:
    case TensorKind::kFusedExpertsDown:
      if (ep()) return bytes / c.num_experts * local_expert_count(co.moe_rank);
      // gpt-oss's down_proj bias: whole on MoE-TP rank 0, zeros elsewhere (summed once by the
      // MoE all-reduce)
      if (p.is_bias && p.kind == TensorKind::kFusedExpertsDown) return co.moe_rank == 0 ? bytes : 0;
      return bytes / m;
    default:
      return bytes;  // norms, routers, router bias, MLA down-projections: replicated
  }
}

int64_t InferencePlacement::needed_bytes(int rank) const {
  int64_t total = 0;
  for (int32_t i = 0; i < int32_t(model_->params().size()); ++i) total += needed_bytes(rank, i);
  return total;
}

int64_t InferencePlacement::needed_tensors(int rank) const {
  int64_t n = 0;
  for (int32_t i = 0; i < int32_t(model_->params().size()); ++i) n += needed_bytes(rank, i) > 0;
  return n;
}

}  // namespace shardsync
