// Routes: which trainer rank serves each piece of each plan entry (the seed's mapping of
// source trainer ranks), load-balanced across the trainer ranks that hold the bytes after
// the engine's gather. The same local rank of every replica pulls from the same producer.
#pragma once

#include <cstdint>
#include <vector>

#include "layout/trainer.hpp"
#include "plan/plan.hpp"

namespace shardsync {

// What the trainer has gathered when consumers pull.
enum class SourcePolicy : uint8_t {
  kRootOnly,    // broadcast: trainer rank 0 assembles every full tensor
  kEverywhere,  // V1: every trainer rank gathers every tensor across TP, PP and EP
  kStageLocal,  // V2/V3: TP (or ETP) gather within the PP stage; experts stay on their EP rank
  kDirect,      // V4: no gather; each piece comes from a trainer shard (box) that holds it
};

// After the gather, `rank` holds elements [lo, hi) of the HF tensor (a full tensor, or a
// dim-0 slab of Llama-4's fused experts under EP). Not for kDirect, whose sources are the
// trainer shards themselves (boxes, TrainerPlacement::pieces).
struct Slab {
  int rank = 0;
  int64_t lo = 0, hi = 0;
};
std::vector<Slab> source_slabs(const TrainerPlacement& trainer, int32_t hf_param, SourcePolicy policy);

// One piece of one plan entry, served by one trainer rank. copy.src_offset indexes the full
// HF tensor; subtract slab_lo for the offset in the served slab. Under kDirect the copy's
// source indexes the serving rank's shard (its box, row-major) and slab_lo is 0.
struct Pull {
  int32_t entry = 0;
  int trainer_rank = 0;
  int64_t slab_lo = 0;
  CopyDesc copy;
};

struct Routes {
  std::vector<std::vector<Pull>> pulls;   // per local inference rank, in entry order
  std::vector<int64_t> served_bytes;      // per trainer rank, all replicas counted
  std::vector<int64_t> served_pulls;
};

// Every piece from the least-loaded rank holding it (all replicas counted); a piece that
// straddles holders is cut where the holder changes.
Routes route_plans(const ModelSpec& model, const TrainerPlacement& trainer, const std::vector<RankPlan>& plans,
                   int replicas, SourcePolicy policy);

}  // namespace shardsync
