#include "plan/loaders.hpp"

#include "common/error.hpp"
#include "tensor/real_tensor.hpp"
#include "tensor/recording_tensor.hpp"

namespace shardsync {

LoaderRank::LoaderRank(const ModelSpec& m, const InferencePlacement& inf, int r)
    : model(&m), inference(&inf), rank(r), coord(inf.coord(r)) {
  tp_size = inf.layout().tp;
  moe_tp_size = inf.ep() ? 1 : inf.moe_size();
  moe_tp_rank = inf.ep() ? 0 : coord.moe_rank;
}

std::string vllm_rules(const ModelConfig& c, const InferenceLayout& l) {
  std::string s = std::string("vLLM ") + kVllmVersion;
  if (l.shared_experts_tp) s += " with shared experts split over TP (pre-0.11 rule)";
  if (c.arch == Arch::kGptOss && (l.enable_ep || l.dp > 1))
    s += "; gpt-oss experts as vLLM 0.12.0 loads them (0.11.0 cannot load bf16 gpt-oss under EP or DP > 1)";
  return s;
}

const char* LoaderRank::loader_name() const { return arch_name(model->config().arch); }

namespace {

enum class MoeShard { kW1, kW2, kW3 };

// ---- vLLM weight_loader behaviours, one per LoaderKind --------------------------------

// QKVParallelLinear: q rows of this rank's heads; k/v rows of KV head t // replicas.
template <class T>
void qkv_loader(const LoaderRank& r, T& dst, const T& w, char shard) {
  const ModelConfig& c = r.model->config();
  int64_t t = r.coord.tp_rank, T_ = r.tp_size, hd = c.head_dim;
  int64_t nq = c.num_heads / T_;
  int64_t nkv = T_ >= c.num_kv_heads ? 1 : c.num_kv_heads / T_;
  int64_t replicas = T_ >= c.num_kv_heads ? T_ / c.num_kv_heads : 1;
  int64_t offset = 0, size = 0, start = 0;
  if (shard == 'q') {
    size = nq * hd;
    start = t * size;
  } else {
    size = nkv * hd;
    offset = shard == 'k' ? nq * hd : (nq + nkv) * hd;
    start = (t / replicas) * size;
  }
  dst.narrow(0, offset, size).copy_(w.narrow(0, start, size));
}

// MergedColumnParallelLinear: shard i lands at sum(output_sizes[:i]) / tp.
template <class T>
void merged_column_loader(const LoaderRank& r, const EngineParam& p, T& dst, const T& w, int shard) {
  int64_t tp = p.disable_tp ? 1 : r.tp_size, t = p.disable_tp ? 0 : r.coord.tp_rank;
  int64_t offset = 0;
  for (int i = 0; i < shard; ++i) offset += p.output_sizes[size_t(i)] / tp;
  int64_t size = p.output_sizes[size_t(shard)] / tp;
  dst.narrow(0, offset, size).copy_(w.narrow(0, t * size, size));
}

template <class T>
void column_loader(const LoaderRank& r, T& dst, const T& w) {
  int64_t n = dst.size(0);
  dst.copy_(w.narrow(0, r.coord.tp_rank * n, n));
}

template <class T>
void row_loader(const LoaderRank& r, T& dst, const T& w) {
  int64_t n = dst.size(1);
  dst.copy_(w.narrow(1, r.coord.tp_rank * n, n));
}

// VocabParallelEmbedding / ParallelLMHead: padded range of this rank clipped to the real
// vocabulary; the padding rows are zero-filled.
template <class T>
void vocab_loader(const LoaderRank& r, T& dst, const T& w) {
  int64_t per = dst.size(0), start = r.coord.tp_rank * per;
  int64_t rows = std::max<int64_t>(0, std::min(w.size(0), start + per) - start);
  if (rows > 0) dst.narrow(0, 0, rows).copy_(w.narrow(0, start, rows));
  if (rows < per) dst.narrow(0, rows, per - rows).zero_();
}

// FusedMoE.weight_loader: expert_map, then the TP shard of w1/w3 (into w13 halves) or w2.
template <class T>
void fused_moe_loader(const LoaderRank& r, T& param, const T& w, MoeShard shard, int64_t expert) {
  int64_t local = r.inference->expert_map(r.coord.moe_rank, expert);
  if (local < 0) return;
  bool full_load = w.dim() == 3;  // a 3-d tensor carries the expert dimension itself
  int shard_dim = (shard == MoeShard::kW2 ? 1 : 0) + (full_load ? 1 : 0);
  T dst = full_load ? param : param.select(0, local);
  if (shard == MoeShard::kW2) {
    int64_t size = dst.size(shard_dim);
    dst.copy_(w.narrow(shard_dim, r.moe_tp_rank * size, size));
  } else {
    int64_t size = dst.size(shard_dim) / 2;
    dst.narrow(shard_dim, shard == MoeShard::kW1 ? 0 : size, size)
        .copy_(w.narrow(shard_dim, r.moe_tp_rank * size, size));
  }
}

// ---- model-level mapping (vLLM load_weights: stacked params, expert params) ------------

// Llama-4 converts interleaved rope to neox rope before any slicing.
template <class T>
T llama4_permute_qk(const T& w, int64_t heads, int64_t head_dim) {
  int64_t hidden = w.size(1);
  return w.view({heads, head_dim / 2, 2, hidden}).transpose(1, 2).reshape({heads * head_dim, hidden});
}

Slot norm_slot(const ParamMeta& p) {
  const std::string& n = p.name;
  auto ends = [&](const char* s) { return n.ends_with(s); };
  if (p.layer < 0) return Slot::kFinalNorm;
  if (ends("input_layernorm.weight")) return Slot::kInputNorm;
  if (ends("post_attention_layernorm.weight")) return Slot::kPostNorm;
  if (ends("q_norm.weight")) return Slot::kQNorm;
  if (ends("k_norm.weight")) return Slot::kKNorm;
  if (ends("q_a_layernorm.weight")) return Slot::kQANorm;
  if (ends("kv_a_layernorm.weight")) return Slot::kKvANorm;
  throw Error("loader: no engine parameter for norm " + n);
}

template <class T>
T& need(const LoaderRank& r, ParamStore<T>& store, int32_t layer, Slot slot, const ParamMeta& p) {
  T* t = store.find(layer, slot);
  if (!t)
    throw Error(std::string("loader ") + r.loader_name() + ": tensor " + p.name + " maps to no parameter on inference rank " +
                std::to_string(r.rank));
  return *t;
}

template <class T>
void load_llama4_fused_experts(const LoaderRank& r, const ParamMeta& p, const T& w, ParamStore<T>& store) {
  const InferencePlacement& inf = *r.inference;
  int64_t first = 0;
  std::vector<int64_t> local;
  if (inf.ep()) {
    first = inf.local_expert_first(r.coord.moe_rank);
    for (int64_t e = 0; e < inf.local_expert_count(r.coord.moe_rank); ++e) local.push_back(first + e);
  }
  auto select_local = [&](const T& x) { return inf.ep() ? x.index_select(0, local) : x; };
  if (p.kind == TensorKind::kFusedExpertsGateUp) {
    T& w13 = need(r, store, p.layer, Slot::kW13, p);
    std::vector<T> halves = w.chunk(2, -1);  // [E, h, I] each: gate, up
    fused_moe_loader(r, w13, select_local(halves[0].transpose(-1, -2)), MoeShard::kW1, first);
    fused_moe_loader(r, w13, select_local(halves[1].transpose(-1, -2)), MoeShard::kW3, first);
  } else {
    T& w2 = need(r, store, p.layer, Slot::kW2, p);
    fused_moe_loader(r, w2, select_local(w.transpose(-1, -2)), MoeShard::kW2, first);
  }
}

// gpt-oss (vLLM's _load_weights_other, bf16): under EP the contiguous experts
// [r*E/ep, (r+1)*E/ep); otherwise MoE-TP rank t takes the contiguous range [2tI/m, 2(t+1)I/m)
// of gate_up's interleaved last dimension, whole (gate_j, up_j) pairs, and transposes it; no
// de-interleave. down_proj rows [tI/m, (t+1)I/m) transposed; its bias whole on MoE-TP rank 0
// and zeros elsewhere. MoE-TP is flattened over DP (vLLM 0.12.0's rank; 0.11.0 used the
// attention TP rank and its EP call swapped the expert bounds, so it cannot load these layouts).
template <class T>
void load_gpt_oss_experts(const LoaderRank& r, const ParamMeta& p, const T& w, ParamStore<T>& store) {
  const InferencePlacement& inf = *r.inference;
  const bool gate_up = p.kind == TensorKind::kFusedExpertsGateUp;
  const Slot slot = gate_up ? (p.is_bias ? Slot::kW13Bias : Slot::kW13) : (p.is_bias ? Slot::kW2Bias : Slot::kW2);
  T& dst = need(r, store, p.layer, slot, p);
  T x = inf.ep() ? w.narrow(0, inf.local_expert_first(r.coord.moe_rank), inf.local_expert_count(r.coord.moe_rank))
                 : w;
  const int64_t m = r.moe_tp_size, t = r.moe_tp_rank, I = r.model->config().moe_intermediate / m;
  if (gate_up && !p.is_bias) {
    dst.copy_(x.narrow(2, t * 2 * I, 2 * I).transpose(1, 2));
  } else if (gate_up) {
    dst.copy_(x.narrow(1, t * 2 * I, 2 * I));
  } else if (!p.is_bias) {
    dst.copy_(x.narrow(1, t * I, I).transpose(1, 2));
  } else if (t == 0) {
    dst.copy_(x);
  } else {
    dst.zero_();
  }
}

}  // namespace

bool may_load(const LoaderRank& r, const ParamMeta& p) {
  if (!r.inference->holds_param(r.rank, p)) return false;
  bool per_expert = p.kind == TensorKind::kExpertGate || p.kind == TensorKind::kExpertUp ||
                    p.kind == TensorKind::kExpertDown;
  return !(per_expert && r.inference->expert_map(r.coord.moe_rank, p.expert) < 0);
}

template <class T>
void load_weight(const LoaderRank& r, int32_t hf_idx, const T& w, ParamStore<T>& store) {
  const ParamMeta& p = r.model->param(hf_idx);
  const ModelConfig& c = r.model->config();
  if (!r.inference->holds_param(r.rank, p)) return;  // is_pp_missing_parameter
  const int32_t l = p.layer;
  switch (p.kind) {
    case TensorKind::kEmbedding: {
      if (T* e = store.find(-1, Slot::kEmbed)) vocab_loader(r, *e, w);
      if (T* h = store.find(-1, Slot::kLmHead); h && c.tie_embeddings) vocab_loader(r, *h, w);
      return;
    }
    case TensorKind::kLmHead:
      vocab_loader(r, need(r, store, -1, Slot::kLmHead, p), w);
      return;
    case TensorKind::kNorm:
      need(r, store, l, norm_slot(p), p).copy_(w);
      return;
    case TensorKind::kQProj:
    case TensorKind::kKProj:
    case TensorKind::kVProj: {
      char shard = p.kind == TensorKind::kQProj ? 'q' : p.kind == TensorKind::kKProj ? 'k' : 'v';
      if (p.is_bias) {
        qkv_loader(r, need(r, store, l, Slot::kQKVBias, p), w, shard);
      } else if (c.arch == Arch::kLlama4 && shard != 'v') {
        int64_t heads = shard == 'q' ? c.num_heads : c.num_kv_heads;
        qkv_loader(r, need(r, store, l, Slot::kQKV, p), llama4_permute_qk(w, heads, c.head_dim), shard);
      } else {
        qkv_loader(r, need(r, store, l, Slot::kQKV, p), w, shard);
      }
      return;
    }
    case TensorKind::kOProj:
      if (p.is_bias) need(r, store, l, Slot::kOBias, p).copy_(w);
      else row_loader(r, need(r, store, l, Slot::kO, p), w);
      return;
    case TensorKind::kGateProj:
    case TensorKind::kUpProj: {
      const Slot slot = p.is_bias ? Slot::kGateUpBias : Slot::kGateUp;
      T& dst = need(r, store, l, slot, p);
      merged_column_loader(r, store.params->params()[size_t(store.params->find(l, slot))], dst, w,
                           p.kind == TensorKind::kGateProj ? 0 : 1);
      return;
    }
    case TensorKind::kDownProj:
      if (p.is_bias) need(r, store, l, Slot::kDownBias, p).copy_(w);  // RowParallelLinear: bias whole
      else row_loader(r, need(r, store, l, Slot::kDown, p), w);
      return;
    case TensorKind::kSharedGate:
    case TensorKind::kSharedUp: {
      T& dst = need(r, store, l, Slot::kSharedGateUp, p);
      merged_column_loader(r, store.params->params()[size_t(store.params->find(l, Slot::kSharedGateUp))], dst, w,
                           p.kind == TensorKind::kSharedGate ? 0 : 1);
      return;
    }
    case TensorKind::kSharedDown: {
      T& dst = need(r, store, l, Slot::kSharedDown, p);
      if (store.params->params()[size_t(store.params->find(l, Slot::kSharedDown))].disable_tp) dst.copy_(w);
      else row_loader(r, dst, w);
      return;
    }
    case TensorKind::kRouter:
      need(r, store, l, Slot::kRouter, p).copy_(w);
      return;
    case TensorKind::kRouterBias:
      need(r, store, l, Slot::kRouterBias, p).copy_(w);
      return;
    case TensorKind::kExpertGate:
      fused_moe_loader(r, need(r, store, l, Slot::kW13, p), w, MoeShard::kW1, p.expert);
      return;
    case TensorKind::kExpertUp:
      fused_moe_loader(r, need(r, store, l, Slot::kW13, p), w, MoeShard::kW3, p.expert);
      return;
    case TensorKind::kExpertDown:
      fused_moe_loader(r, need(r, store, l, Slot::kW2, p), w, MoeShard::kW2, p.expert);
      return;
    case TensorKind::kMlaQ:
      column_loader(r, need(r, store, l, Slot::kQ, p), w);
      return;
    case TensorKind::kMlaKvA:
      if (c.q_lora_rank == 0) {  // no fused_qkv_a_proj: a ReplicatedLinear of its own
        need(r, store, l, Slot::kKvA, p).copy_(w);
        return;
      }
      [[fallthrough]];
    case TensorKind::kMlaQA: {
      T& dst = need(r, store, l, Slot::kFusedQkvA, p);
      merged_column_loader(r, store.params->params()[size_t(store.params->find(l, Slot::kFusedQkvA))], dst, w,
                           p.kind == TensorKind::kMlaQA ? 0 : 1);
      return;
    }
    case TensorKind::kMlaQB:
      column_loader(r, need(r, store, l, Slot::kQB, p), w);
      return;
    case TensorKind::kMlaKvB:
      column_loader(r, need(r, store, l, Slot::kKvB, p), w);
      return;
    case TensorKind::kFusedExpertsGateUp:
    case TensorKind::kFusedExpertsDown:
      if (c.arch == Arch::kGptOss) load_gpt_oss_experts(r, p, w, store);
      else load_llama4_fused_experts(r, p, w, store);
      return;
    case TensorKind::kSinks:  // rank t: the sinks of its q heads
      column_loader(r, need(r, store, l, Slot::kSinks, p), w);
      return;
  }
  throw Error(std::string("loader ") + r.loader_name() + ": no rule for tensor " + p.name);
}

template void load_weight<RealTensor>(const LoaderRank&, int32_t, const RealTensor&, ParamStore<RealTensor>&);
template void load_weight<RecordingTensor>(const LoaderRank&, int32_t, const RecordingTensor&,
                                           ParamStore<RecordingTensor>&);

}  // namespace shardsync
