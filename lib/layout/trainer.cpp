#include "layout/trainer.hpp"

#include <algorithm>
#include <numeric>

#include "common/error.hpp"

namespace shardsync {

int64_t Box::numel() const {
  int64_t n = 1;
  for (int64_t l : length) n *= l;
  return n;
}

Box Box::full(const std::vector<int64_t>& shape) {
  return Box{std::vector<int64_t>(shape.size(), 0), shape};
}

int TrainerLayout::resolved_dp() const {
  if (dp > 0) return dp;
  if (fsdp > 0) return 1;  // one shard group; dp gives HSDP replicas
  int need = resolved_etp() * ep;
  for (int d = 1; d <= need; ++d)
    if ((tp * d) % need == 0) return d;
  return need;
}

std::string TrainerLayout::describe() const {
  std::string s = fsdp > 0 ? "fsdp" + std::to_string(fsdp) + ",pp" + std::to_string(pp) + ",dp" + std::to_string(resolved_dp())
                           : "tp" + std::to_string(tp) + ",pp" + std::to_string(pp) + ",ep" + std::to_string(ep) +
                                 ",etp" + std::to_string(resolved_etp()) + ",dp" + std::to_string(resolved_dp());
  if (!pp_layers.empty()) {
    s += ",layers=";
    for (size_t i = 0; i < pp_layers.size(); ++i) s += (i ? "/" : "") + std::to_string(pp_layers[i]);
  }
  return s;
}

namespace {

// Splitting rule of a tensor across the dense TP group or the ETP group.
struct SplitRule {
  enum Kind { kReplicated, kEven, kVocab, kChunk } kind = kReplicated;
  int dim = 0;
};

SplitRule dense_rule(const ParamMeta& p, bool fsdp) {
  if (fsdp) return {SplitRule::kChunk, 0};  // FSDP2's Shard(0) of every parameter
  switch (p.kind) {
    case TensorKind::kEmbedding:
    case TensorKind::kLmHead:
      return {SplitRule::kVocab, 0};
    case TensorKind::kQProj:
    case TensorKind::kKProj:
    case TensorKind::kVProj:
    case TensorKind::kGateProj:
    case TensorKind::kUpProj:
    case TensorKind::kSharedGate:
    case TensorKind::kSharedUp:
    case TensorKind::kMlaQB:
    case TensorKind::kMlaKvB:
    case TensorKind::kMlaQ:
    case TensorKind::kSinks:  // with the q heads
      return {SplitRule::kEven, 0};
    case TensorKind::kOProj:
    case TensorKind::kDownProj:
      return p.is_bias ? SplitRule{} : SplitRule{SplitRule::kEven, 1};  // row-parallel bias: whole
    case TensorKind::kSharedDown:
      return {SplitRule::kEven, 1};
    default:
      return {};  // norms, routers, router bias, MLA down-projections: replicated
  }
}

bool is_expert(TensorKind k) {
  return k == TensorKind::kExpertGate || k == TensorKind::kExpertUp || k == TensorKind::kExpertDown ||
         k == TensorKind::kFusedExpertsGateUp || k == TensorKind::kFusedExpertsDown;
}

// The ETP split dimension of expert tensors (HF layout); -1: whole on every ETP rank.
int expert_split_dim(const ParamMeta& p) {
  switch (p.kind) {
    case TensorKind::kExpertDown: return 1;                          // [h, mi]
    case TensorKind::kFusedExpertsGateUp: return p.is_bias ? 1 : 2;  // [E, h, 2I], bias [E, 2I]
    case TensorKind::kFusedExpertsDown: return p.is_bias ? -1 : 1;   // [E, I, h]; a row-parallel bias [E, h]
    default: return 0;                                               // gate/up [mi, h]
  }
}

Box slice_box(const ParamMeta& p, int dim, int64_t start, int64_t len) {
  Box b = Box::full(p.shape);
  b.start[size_t(dim)] = start;
  b.length[size_t(dim)] = len;
  return b;
}

[[noreturn]] void fail_divide(const TrainerLayout& l, const std::string& what, int64_t n,
                              const std::string& by, int64_t parts, const ModelSpec& m) {
  throw InputError(l.source, by + "=" + std::to_string(parts),
                   "must divide " + what + " = " + std::to_string(n) + " of model " + m.name() +
                       " (trainer layout " + l.describe() + ")");
}

}  // namespace

TrainerPlacement::TrainerPlacement(const ModelSpec& model, TrainerLayout layout)
    : model_(&model), layout_(std::move(layout)) {
  validate();
  split_layers();
}

void TrainerPlacement::validate() {
  const TrainerLayout& l = layout_;
  const ModelConfig& c = model_->config();
  for (auto [name, v] : {std::pair{"tp", l.tp}, {"pp", l.pp}, {"ep", l.ep}})
    if (v < 1) throw InputError(l.source, name, "expected an integer >= 1, got " + std::to_string(v));
  if (l.fsdp > 0) {
    validate_fsdp();
    return;
  }
  tp_ = l.tp;
  ep_ = l.ep;
  etp_ = l.resolved_etp();
  dp_ = l.resolved_dp();
  world_ = l.tp * dp_ * l.pp;
  if ((l.tp * dp_) % (etp_ * l.ep) != 0)
    throw InputError(l.source, "ep*etp=" + std::to_string(etp_ * l.ep),
                     "must divide tp*dp = " + std::to_string(l.tp * dp_) +
                         " (the expert grid tp-ep-dp-pp must fill the same ranks as the dense grid)");
  edp_ = (l.tp * dp_) / (etp_ * l.ep);
  if (l.ep > 1 && !c.is_moe())
    throw InputError(l.source, "ep=" + std::to_string(l.ep), "model " + model_->name() + " has no experts");

  int64_t t = l.tp;
  if (c.is_mla()) {
    if (c.num_heads % t) fail_divide(l, "num_attention_heads", c.num_heads, "tp", t, *model_);
  } else {
    if (c.q_proj_rows() % t) fail_divide(l, "q_proj rows (heads*head_dim)", c.q_proj_rows(), "tp", t, *model_);
    if (c.attn_sinks && c.num_heads % t) fail_divide(l, "num_attention_heads (sinks)", c.num_heads, "tp", t, *model_);
    if (c.kv_proj_rows() % t) fail_divide(l, "k_proj/v_proj rows (kv_heads*head_dim)", c.kv_proj_rows(), "tp", t, *model_);
  }
  bool any_dense = false;
  for (int64_t i = 0; i < c.num_layers; ++i) any_dense = any_dense || !c.is_moe_layer(i);
  if (any_dense && c.intermediate % t) fail_divide(l, "intermediate_size", c.intermediate, "tp", t, *model_);
  if (c.is_moe()) {
    if (c.num_experts % l.ep) fail_divide(l, "num_experts", c.num_experts, "ep", l.ep, *model_);
    if (c.moe_intermediate % etp_) fail_divide(l, "moe_intermediate_size", c.moe_intermediate, "etp", etp_, *model_);
    if (c.shared_intermediate % t) fail_divide(l, "shared expert intermediate size", c.shared_intermediate, "tp", t, *model_);
  }
}

// FSDP2: the shard group splits every dense parameter by chunks (no divisibility asked) and
// holds the fused experts by whole experts, so E must divide evenly; Megatron's TP, ETP and an
// EP other than the group's own are not combined with it.
void TrainerPlacement::validate_fsdp() {
  const TrainerLayout& l = layout_;
  const ModelConfig& c = model_->config();
  const std::string group = std::to_string(l.fsdp);
  if (l.tp != 1)
    throw InputError(l.source, "tp=" + std::to_string(l.tp),
                     "FSDP (fsdp" + group + ") with Megatron tensor parallelism is not modelled; give fsdp or tp, not both");
  if (l.etp > 0)
    throw InputError(l.source, "etp=" + std::to_string(l.etp), "under fsdp" + group + " experts are whole on their owner; drop etp");
  if (l.ep != 1 && l.ep != l.fsdp)
    throw InputError(l.source, "ep=" + std::to_string(l.ep),
                     "under fsdp" + group + " the fused experts are sharded over the same group: ep is " + group +
                         " (it need not be given)");
  tp_ = l.fsdp;
  ep_ = c.is_moe() ? l.fsdp : 1;
  etp_ = 1;
  dp_ = l.resolved_dp();
  world_ = tp_ * dp_ * l.pp;
  edp_ = dp_ * (tp_ / ep_);
  if (c.is_moe() && c.num_experts % l.fsdp)
    fail_divide(l, "num_experts (FSDP shards the fused experts on dim 0 by whole experts)", c.num_experts, "fsdp",
                l.fsdp, *model_);
}

void TrainerPlacement::split_layers() {
  const TrainerLayout& l = layout_;
  int64_t L = model_->config().num_layers;
  std::vector<int64_t> counts;
  if (!l.pp_layers.empty()) {
    if (int(l.pp_layers.size()) != l.pp)
      throw InputError(l.source, "layers", "lists " + std::to_string(l.pp_layers.size()) +
                                               " stages but pp=" + std::to_string(l.pp));
    int64_t sum = 0;
    for (int64_t n : l.pp_layers) {
      if (n < 0) throw InputError(l.source, "layers", "stage layer counts must be >= 0");
      sum += n;
    }
    if (sum != L)
      throw InputError(l.source, "layers", "stage layer counts sum to " + std::to_string(sum) +
                                               " but model " + model_->name() + " has " +
                                               std::to_string(L) + " layers");
    counts = l.pp_layers;
  } else {
    if (L % l.pp != 0)
      throw InputError(l.source, "pp=" + std::to_string(l.pp),
                       "must divide num_hidden_layers = " + std::to_string(L) + " of model " +
                           model_->name() + " (Megatron's even split); give an explicit split, e.g. "
                           "layers=a/b/... summing to " + std::to_string(L));
    counts.assign(size_t(l.pp), L / l.pp);
  }
  stage_layers_ = counts;
  stage_first_.resize(counts.size());
  int64_t first = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    stage_first_[s] = first;
    for (int64_t i = 0; i < counts[s]; ++i) stage_of_layer_.push_back(int(s));
    first += counts[s];
  }
}

int TrainerPlacement::stage_of_param(const ParamMeta& p) const {
  if (p.layer >= 0) return stage_of_layer(p.layer);
  return p.kind == TensorKind::kEmbedding ? 0 : layout_.pp - 1;
}

std::vector<TrainerPlacement::Piece> TrainerPlacement::pieces(int32_t param_idx) const {
  const ParamMeta& p = model_->param(param_idx);
  std::vector<Piece> out;
  int stage = stage_of_param(p);
  if (is_expert(p.kind)) {
    const int dim = expert_split_dim(p);
    auto add_owner = [&](int owner, const Box& base) {
      if (dim < 0) {
        Piece piece{base, {}};
        for (int et = 0; et < etp_; ++et)
          for (int ed = 0; ed < edp_; ++ed) piece.ranks.push_back(expert_rank(et, owner, ed, stage));
        std::sort(piece.ranks.begin(), piece.ranks.end());
        out.push_back(std::move(piece));
        return;
      }
      const int64_t n = p.shape[size_t(dim)] / etp_;
      for (int et = 0; et < etp_; ++et) {
        Piece piece{base, {}};
        piece.box.start[size_t(dim)] = et * n;
        piece.box.length[size_t(dim)] = n;
        for (int ed = 0; ed < edp_; ++ed) piece.ranks.push_back(expert_rank(et, owner, ed, stage));
        out.push_back(std::move(piece));
      }
    };
    if (p.kind == TensorKind::kFusedExpertsGateUp || p.kind == TensorKind::kFusedExpertsDown) {
      int per = experts_per_ep_rank();
      for (int e = 0; e < ep_; ++e) add_owner(e, slice_box(p, 0, int64_t(e) * per, per));
    } else {
      add_owner(ep_owner_of_expert(p.expert), Box::full(p.shape));
    }
    return out;
  }
  // Dense-TP tensors. A tied embedding with PP > 1 is also held (synced) by the last stage.
  std::vector<int> stages{stage};
  if (p.kind == TensorKind::kEmbedding && model_->config().tie_embeddings && layout_.pp > 1)
    stages.push_back(layout_.pp - 1);
  SplitRule rule = dense_rule(p, fsdp());
  int T = tp_;
  if (rule.kind == SplitRule::kReplicated) {
    Piece piece{Box::full(p.shape), {}};
    for (int s : stages)
      for (int d = 0; d < dp_; ++d)
        for (int t = 0; t < T; ++t) piece.ranks.push_back(dense_rank(t, d, s));
    std::sort(piece.ranks.begin(), piece.ranks.end());
    out.push_back(std::move(piece));
    return out;
  }
  int64_t rows = p.shape[size_t(rule.dim)];
  for (int t = 0; t < T; ++t) {
    int64_t start, len;
    if (rule.kind == SplitRule::kChunk) {  // torch.chunk: ceil-sized, the last ones short or empty
      const int64_t chunk = (rows + T - 1) / T;
      start = std::min(rows, t * chunk);
      len = std::min(rows, start + chunk) - start;
    } else if (rule.kind == SplitRule::kVocab) {
      int64_t mult = int64_t(128) * T;  // make_vocab_size_divisible_by * tp
      int64_t padded = (rows + mult - 1) / mult * mult;
      start = t * (padded / T);
      len = std::max<int64_t>(0, std::min(rows, start + padded / T) - start);
    } else {
      len = rows / T;
      start = t * len;
    }
    // An empty vocab slice is no holding; an empty FSDP chunk is (the rank's local shard is empty,
    // and it takes part in the group's all-gather like every other member).
    if (len == 0 && rule.kind != SplitRule::kChunk) continue;
    Piece piece{slice_box(p, rule.dim, start, len), {}};
    for (int s : stages)
      for (int d = 0; d < dp_; ++d) piece.ranks.push_back(dense_rank(t, d, s));
    std::sort(piece.ranks.begin(), piece.ranks.end());
    out.push_back(std::move(piece));
  }
  return out;
}

std::vector<TrainerShard> TrainerPlacement::shards(int32_t param_idx) const {
  std::vector<TrainerShard> out;
  for (const Piece& piece : pieces(param_idx))
    for (int r : piece.ranks) out.push_back({r, piece.box});
  std::sort(out.begin(), out.end(), [](const TrainerShard& a, const TrainerShard& b) { return a.rank < b.rank; });
  return out;
}

TrainerPlacement::Holdings TrainerPlacement::holdings() const {
  Holdings h;
  h.bytes.assign(size_t(world_), 0);
  h.tensors.assign(size_t(world_), 0);
  for (int32_t i = 0; i < int32_t(model_->params().size()); ++i) {
    int64_t elem = dtype_bytes(model_->param(i).dtype);
    for (const Piece& piece : pieces(i))
      for (int r : piece.ranks) {
        h.bytes[size_t(r)] += piece.box.numel() * elem;
        h.tensors[size_t(r)] += 1;  // a rank holds at most one piece of a tensor
      }
  }
  return h;
}

}  // namespace shardsync
