// Trainer layout in Megatron-core's terms, and which trainer rank holds which bytes of each
// HF tensor (the seed's WeightSource.held_names plus the TP/ETP slice).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/catalog.hpp"

namespace shardsync {

// A hyper-rectangle of an HF tensor: per dimension [start, start + length).
struct Box {
  std::vector<int64_t> start;
  std::vector<int64_t> length;
  int64_t numel() const;
  static Box full(const std::vector<int64_t>& shape);
  bool operator==(const Box&) const = default;
};

struct TrainerLayout {
  int tp = 1, pp = 1, ep = 1;
  // FSDP2 (fully_shard) over a shard group of this many ranks, in place of Megatron's TP/EP
  // (0: a Megatron layout). Every dense parameter is chunked on dim 0 over the group (torch.chunk:
  // ceil-sized chunks, trailing ones short or empty); a MoE layer's experts are one fused [E, ...]
  // parameter in Transformers, so an expert is whole on rank e / (E / fsdp). dp counts HSDP
  // replicas of the group (default 1); pp splits layers into stages as in Megatron.
  int fsdp = 0;
  int etp = 0;  // 0: defaults to tp (Megatron's expert_tensor_parallel_size default)
  int dp = 0;   // 0: the smallest DP for which the expert grid fits (tp*dp % (etp*ep) == 0)
  std::vector<int64_t> pp_layers;  // explicit layers per stage (optional)
  std::string source = "--trainer";  // flag or file, for error messages

  int resolved_etp() const { return fsdp > 0 ? 1 : etp > 0 ? etp : tp; }
  int resolved_dp() const;
  // The ranks a dense parameter is split over: Megatron's TP group or the FSDP shard group.
  int shard_group() const { return fsdp > 0 ? fsdp : tp; }
  int world_size() const { return shard_group() * resolved_dp() * pp; }
  std::string describe() const;  // "tp4,pp2,ep8,etp1,dp2" or "fsdp8,pp1,dp1"
};

// One holder of (part of) an HF tensor.
struct TrainerShard {
  int rank = 0;
  Box box;
};

// A trainer layout resolved against a model: validates divisibility and answers ownership.
class TrainerPlacement {
 public:
  TrainerPlacement(const ModelSpec& model, TrainerLayout layout);

  const TrainerLayout& layout() const { return layout_; }
  const ModelSpec& model() const { return *model_; }
  int world_size() const { return world_; }
  // The dense split group: Megatron's TP group, or the FSDP shard group (whose gather is
  // FSDP's all-gather); rank arithmetic treats both alike.
  int tp() const { return tp_; }
  int pp() const { return layout_.pp; }
  int dp() const { return dp_; }
  // Experts' owners: Megatron's EP, or under FSDP the shard group over the fused experts.
  int ep() const { return ep_; }
  bool fsdp() const { return layout_.fsdp > 0; }
  int etp() const { return etp_; }
  int edp() const { return edp_; }

  // Megatron rank order: dense "tp-cp-ep-dp-pp" (tp fastest), experts "tp-ep-dp-pp".
  int dense_rank(int t, int d, int p) const { return t + tp() * (d + dp_ * p); }
  int expert_rank(int et, int e, int ed, int p) const { return et + etp_ * (e + ep_ * (ed + edp_ * p)); }
  int tp_rank_of(int rank) const { return rank % tp(); }
  int dp_rank_of(int rank) const { return (rank / tp()) % dp_; }
  int pp_rank_of(int rank) const { return rank / (tp() * dp_); }
  int ep_rank_of(int rank) const { return (rank / etp_) % ep_; }

  int stage_of_layer(int64_t layer) const { return stage_of_layer_[size_t(layer)]; }
  int64_t stage_first_layer(int stage) const { return stage_first_[size_t(stage)]; }
  int64_t stage_num_layers(int stage) const { return stage_layers_[size_t(stage)]; }
  // The PP stage holding a parameter (embedding: first; final norm and lm_head: last).
  int stage_of_param(const ParamMeta& p) const;
  // First expert owned by an EP rank (Megatron: linear, E divisible by EP).
  int experts_per_ep_rank() const { return int(model_->config().num_experts) / ep_; }
  int ep_owner_of_expert(int expert) const { return expert / experts_per_ep_rank(); }

  // Every rank holding part of a parameter, with its box, ordered by rank. DP replicas
  // hold identical boxes.
  std::vector<TrainerShard> shards(int32_t param_idx) const;
  // The distinct boxes (one replica's worth) that together cover the tensor exactly once,
  // each with the replicas that hold it.
  struct Piece {
    Box box;
    std::vector<int> ranks;
  };
  std::vector<Piece> pieces(int32_t param_idx) const;
  // Per rank: bytes and number of HF tensors (whole or sliced) held, in one pass.
  struct Holdings {
    std::vector<int64_t> bytes;
    std::vector<int64_t> tensors;
  };
  Holdings holdings() const;

 private:
  void validate();
  void validate_fsdp();
  void split_layers();

  const ModelSpec* model_;
  TrainerLayout layout_;
  int world_ = 0, tp_ = 1, ep_ = 1, dp_ = 1, etp_ = 1, edp_ = 1;
  std::vector<int> stage_of_layer_;
  std::vector<int64_t> stage_first_, stage_layers_;
};

}  // namespace shardsync
