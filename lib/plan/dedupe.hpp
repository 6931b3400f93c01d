// Node-level dedupe (--dedupe-node): a plan entry that several inference ranks of one replica
// on one node need identically crosses the network once. One of them (the puller) pulls it
// from the trainers as usual; the others (its sharers) copy it from the puller's live weights
// inside the node once the puller's sync is complete. The engines and the simulator both take
// the assignment from here.
//
// Two ranks need an entry identically when it reads the same elements of the same HF tensor
// into the same place of a parameter of the same name, dtype and shape (replicated weights
// under DP attention, norms and routers under TP, KV heads replicated where KV heads < TP): the
// bytes are then equal at every version, and the sharer's copy is the puller's bytes at the same
// offsets of that parameter, however the routes cut the entry into pulls. Only entries whose
// place is at most kMaxShareRuns contiguous runs are shared (a run is one one-sided read).
// Which rank pulls is balanced: entries are taken largest first (then in HF tensor order) and
// each goes to the rank among its needers with the fewest network bytes so far (its entries
// that no other rank of the node needs counted from the start; ties to the lowest local rank).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "plan/plan.hpp"
#include "plan/routes.hpp"

namespace shardsync {

inline constexpr int kMaxShareRuns = 64;

// An entry a sharer copies from its puller, inside the node.
struct Share {
  int from = 0;            // the puller's local rank (same replica, same node)
  int32_t entry = 0;       // this rank's plan entry
  int32_t from_entry = 0;  // the puller's same entry
  CopyDesc copy;           // the entry's copy: dst is the place in the engine parameter (elements)
  int64_t bytes = 0;
  // The place as contiguous runs: (byte offset in the engine parameter, bytes); the same
  // offsets in the puller's parameter.
  std::vector<std::pair<int64_t, int64_t>> runs;
};

struct NodeDedupe {
  std::vector<std::vector<Share>> shares;  // per local rank: what it copies inside the node
  std::vector<int64_t> network_bytes;      // per local rank: bytes it pulls over the network
  std::vector<int64_t> node_bytes;         // per local rank: bytes it copies inside the node
  std::vector<std::vector<int>> sharers;   // per local rank: the local ranks that copy from it
};

// The contiguous runs of a copy's destination (byte offsets, relative to dst_offset 0 of the
// destination tensor), elements of eb bytes; empty when there are more than max_runs.
std::vector<std::pair<int64_t, int64_t>> dst_runs(const CopyDesc& copy, int64_t eb, size_t max_runs);

// Assigns each shared entry its puller and removes its pulls from its sharers' in `routes`
// (served bytes and pulls updated; every replica is laid out alike). host_of_local: the node of
// each local rank (one replica's; the engines check that every replica matches it).
// shareable(hf): false for HF tensors never shared (an FP8 target's quantized weights).
NodeDedupe dedupe_node(const ModelSpec& model, const std::vector<RankPlan>& plans, int replicas, Routes& routes,
                       const std::vector<int>& host_of_local, const std::function<bool(int32_t)>& shareable);

}  // namespace shardsync
