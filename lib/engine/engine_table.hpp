// The engine table: every weight-sync engine is one row, and the row is the only place
// where an engine's policies are written. The producer, the consumer, the simulator, the
// CLI, `report`, the micro-benchmarks and the sbatch scripts read it. A light header (no
// MPI), so offline tools (sim, report) can name engines.
//
// Adding an engine: one row in engine_table.cpp. A new combination of existing policies
// needs nothing else; a new policy value needs its code in the one place that reads it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "plan/routes.hpp"

namespace shardsync {

// Row index of the table; the wire (START messages) and result files carry names or this.
enum class EngineKind : int { kBroadcast = 0, kV1 = 1, kV2 = 2, kV3 = 3, kV4 = 4 };

// How bytes reach the inference ranks.
enum class Delivery : uint8_t {
  kBroadcast,  // rank 0 broadcasts full tensors to every inference rank (a collective)
  kPull,       // each inference rank pulls its pieces one-sided from trainer memory
};

// Tensors gathered, moved and released together.
enum class UnitKind : uint8_t {
  kBucket,       // consecutive tensors up to --bucket bytes
  kTensor,       // one HF tensor (the seed's per-parameter iterator)
  kWeightGroup,  // one transformer block (embeddings and head are groups of their own)
};

// Collectives a sync runs (bits of EngineSpec::collectives).
enum Collective : uint8_t {
  kCollectiveNone = 0,
  kGatherToRoot = 1,       // every trainer rank -> trainer rank 0
  kAllGatherTrainers = 2,  // every trainer rank, every tensor
  kAllGatherTpGroup = 4,   // within the TP (or ETP) group of a PP stage
  kBroadcastAll = 8,       // trainer rank 0 -> every inference rank
};

// The simulator's schedule model of a row; kNone: the simulator refuses the row by name.
enum class SimModel : uint8_t {
  kNone,
  kBucketBroadcast,  // gather to root per tensor, broadcast per bucket
  kTensorIterator,   // one tensor after another (pulls overlap the iterator if cached)
  kGroupPipeline,    // weight groups, gather of group N+1 under the pulls of group N
};

struct EngineSpec {
  EngineKind kind;
  const char* name;
  const char* summary;  // one line, for --help and `shardsync engines`
  Delivery delivery;
  SourcePolicy source;  // where pieces come from (what the trainer gathers first)
  UnitKind unit;
  bool cache_requests;      // requests sent once and kept by trainers across syncs
  int depth;                // units a trainer holds at once; 0: --inflight
  bool background_process;  // process + copy into live weights on the background lane
  uint8_t collectives;      // Collective bits
  SimModel sim;
};

std::span<const EngineSpec> engine_table();
const EngineSpec& engine_spec(EngineKind kind);
// nullptr when no row has this name.
const EngineSpec* find_engine(const std::string& name);
// "broadcast, v1, v2, v3, v4"
std::string engine_list();

// Whether a sync serves the trainer's PP stages at the same time: true when none of the row's
// collectives spans stages (a stage-local or direct source: each stage's trainer ranks gather,
// pack and serve their own units and skip the others'), false when one does (V1's all-gather over
// every trainer rank, the broadcast's gather to rank 0: every rank takes part in every unit, one
// unit after another). The simulator's schedule model reads it.
constexpr bool stages_concurrent(const EngineSpec& e) {
  return (e.collectives & (kGatherToRoot | kAllGatherTrainers)) == 0;
}

// Convenience over the row.
inline const char* engine_name(EngineKind k) {
  return engine_spec(k).name;
}
inline SourcePolicy source_policy(EngineKind k) {
  return engine_spec(k).source;
}
// A row's policies in words (source, unit, caching, depth, lane, collectives).
std::string describe_source(SourcePolicy s);
std::string describe_unit(UnitKind u);
std::string describe_collectives(uint8_t bits);

}  // namespace shardsync
