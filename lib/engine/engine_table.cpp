#include "engine/engine_table.hpp"

#include "common/error.hpp"

namespace shardsync {

namespace {

// clang-format off
// One row per engine: kind, name, summary, delivery, source policy, unit, requests cached
// across syncs, depth (units a trainer holds; 0: --inflight), background process lane,
// collectives, simulator model.
constexpr EngineSpec kTable[] = {
  {EngineKind::kBroadcast, "broadcast", "baseline: trainer rank 0 gathers every tensor and broadcasts buckets to every inference rank", Delivery::kBroadcast, SourcePolicy::kRootOnly, UnitKind::kBucket, false, 1, false, kGatherToRoot | kBroadcastAll, SimModel::kBucketBroadcast},
  {EngineKind::kV1, "v1", "per-tensor pull after an all-gather over every trainer rank; requests every sync", Delivery::kPull, SourcePolicy::kEverywhere, UnitKind::kTensor, false, 1, false, kAllGatherTrainers, SimModel::kTensorIterator},
  {EngineKind::kV2, "v2", "per-tensor pull after a TP/ETP gather within the PP stage; requests cached", Delivery::kPull, SourcePolicy::kStageLocal, UnitKind::kTensor, true, 1, false, kAllGatherTpGroup, SimModel::kTensorIterator},
  {EngineKind::kV3, "v3", "weight-group pipeline: TP/ETP gather of group N+1 under the pulls of group N, background process", Delivery::kPull, SourcePolicy::kStageLocal, UnitKind::kWeightGroup, true, 0, true, kAllGatherTpGroup, SimModel::kGroupPipeline},
  {EngineKind::kV4, "v4", "direct: weight-group pipeline pulling each piece from the trainer shards that hold it, no gather", Delivery::kPull, SourcePolicy::kDirect, UnitKind::kWeightGroup, true, 0, true, kCollectiveNone, SimModel::kGroupPipeline},
};
// clang-format on

constexpr bool rows_in_kind_order() {
  for (size_t i = 0; i < std::size(kTable); ++i)
    if (size_t(kTable[i].kind) != i) return false;
  return true;
}
static_assert(rows_in_kind_order(), "engine table rows must be in EngineKind order");

}  // namespace

std::span<const EngineSpec> engine_table() { return kTable; }

const EngineSpec& engine_spec(EngineKind kind) {
  if (size_t(kind) >= std::size(kTable)) throw Error("no engine row " + std::to_string(int(kind)));
  return kTable[size_t(kind)];
}

const EngineSpec* find_engine(const std::string& name) {
  for (const EngineSpec& e : kTable)
    if (name == e.name) return &e;
  return nullptr;
}

std::string engine_list() {
  std::string s;
  for (const EngineSpec& e : kTable) s += (s.empty() ? "" : ", ") + std::string(e.name);
  return s;
}

std::string describe_source(SourcePolicy s) {
  switch (s) {
    case SourcePolicy::kRootOnly: return "full tensors on rank 0";
    case SourcePolicy::kEverywhere: return "full all-gather";
    case SourcePolicy::kStageLocal: return "TP/ETP gather in stage";
    case SourcePolicy::kDirect: return "trainer shards, no gather";
  }
  return "?";
}

std::string describe_unit(UnitKind u) {
  switch (u) {
    case UnitKind::kBucket: return "bucket";
    case UnitKind::kTensor: return "tensor";
    case UnitKind::kWeightGroup: return "weight group";
  }
  return "?";
}

std::string describe_collectives(uint8_t bits) {
  if (bits == kCollectiveNone) return "none";
  std::string s;
  auto add = [&](Collective c, const char* what) {
    if (bits & c) s += (s.empty() ? "" : "+") + std::string(what);
  };
  add(kGatherToRoot, "gather-to-root");
  add(kAllGatherTrainers, "allgather-all");
  add(kAllGatherTpGroup, "allgather-tp");
  add(kBroadcastAll, "bcast");
  return s;
}

}  // namespace shardsync
