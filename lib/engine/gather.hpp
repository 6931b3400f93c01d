// The trainer-side gather of one unit under a source policy: all-gather over every trainer
// rank (V1), TP/ETP all-gather within the PP stage (V2, V3), gather to rank 0 (broadcast),
// or none (V4: the rank's own shards are the slabs). Where the group maps its members'
// weights (CUDA IPC on one node, GPUs shared or no NCCL) the slabs are copied from them
// directly: one device copy, no send or receive buffer, no host. Non-blocking: post, then test() until complete, so V3 overlaps the gather
// of the next weight group with the pulls of the current one.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/collectives.hpp"
#include "engine/schedule.hpp"
#include "engine/synthetic.hpp"
#include "engine/weights.hpp"

namespace shardsync {

// Elements [lo, hi) of an HF tensor, contiguous, served by this rank.
struct SlabRef {
  const uint8_t* data = nullptr;
  int64_t lo = 0, hi = 0;
};

struct GatherContext {
  const ModelSpec* model = nullptr;
  const TrainerPlacement* trainer = nullptr;
  const TrainerShards* shards = nullptr;
  const World* world = nullptr;
  Device* device = nullptr;
  GroupComm* trainers = nullptr;  // every trainer rank
  GroupComm* tp_group = nullptr;
  GroupComm* etp_group = nullptr;
  // Where each trainer rank's weights lie in its registered allocation (gathers that read
  // the members' weights through GroupComm::peer_region).
  int64_t weights_base = 0;
  std::function<const WeightsLayout&(int)> weights_of;
  // Where this rank's shards lie (the weight source: its region, or the caller's memory), and
  // where a member keeps a shard in its own memory (mapped through its tensor table; null: at
  // its region offset).
  const WeightSource* source = nullptr;
  std::function<const uint8_t*(int, int32_t)> caller_shard;
};

// Whether `rank`'s slab of `hf` under `policy` is its own shard, untouched by a collective
// (always under kDirect; otherwise the gather's no-communication case, e.g. TP1): consumers
// may then read the trainer's weights themselves. Every rank answers alike.
bool slab_is_own_shard(const ModelSpec& model, const TrainerPlacement& trainer, int32_t hf, SourcePolicy policy,
                       int rank);

class UnitGather {
 public:
  UnitGather(const GatherContext& ctx, const Unit& unit, SourcePolicy policy);
  ~UnitGather() = default;
  UnitGather(const UnitGather&) = delete;
  UnitGather& operator=(const UnitGather&) = delete;
  // Progresses the collectives; true once every slab is assembled.
  bool test();
  void wait();
  const SlabRef* slab(int32_t hf) const;
  int64_t staging_bytes() const { return staging_bytes_; }
  bool communicates() const { return !comms_.empty(); }

 private:
  struct Contribution {
    int32_t hf;
    Box box;
    int64_t bytes;
  };
  struct CommGather {
    GroupComm* comm = nullptr;
    bool to_root = false;            // gather to comm rank 0 instead of all-gather
    std::vector<std::vector<Contribution>> by_member;  // per comm rank
    std::vector<int64_t> counts, displs;
    DeviceBuffer send, recv;
    std::unique_ptr<GroupComm::Op> op;
    bool receives = true;            // false for non-root ranks of a gather to root
    bool done = false;
    std::vector<int> members;        // world ranks, in comm rank order
    bool reads = false;              // the slabs are copied from the members' mapped weights
    Fence copied = 0;
  };
  struct OwnedSlab {
    int32_t hf;
    int64_t lo, hi;
    DeviceBuffer data;
  };
  void plan_tensor(int32_t hf, SourcePolicy policy);
  CommGather& comm_for(GroupComm* comm, bool to_root, const std::vector<int>& members);
  void read_members(CommGather& g);
  void assemble(CommGather& g);

  GatherContext ctx_;
  int rank_ = 0;
  std::vector<std::unique_ptr<CommGather>> comms_;
  std::vector<std::unique_ptr<OwnedSlab>> owned_;
  std::unordered_map<int32_t, SlabRef> slabs_;
  std::unordered_map<int32_t, OwnedSlab*> owned_by_hf_;
  bool done_ = false;
  int64_t staging_bytes_ = 0;
};

}  // namespace shardsync
