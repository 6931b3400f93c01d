// The HDF5 plan store: plans of every rank of an inference layout in one file, readable
// with h5dump. Schema: docs/plan-format.md. A file recorded for another model or layout,
// or corrupted, is refused with a message saying what differs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/inference.hpp"
#include "model/catalog.hpp"
#include "plan/plan.hpp"

namespace shardsync {

inline constexpr int kPlanFormatVersion = 2;  // 2: the vLLM rules the loaders followed

// Identity of what the plans were recorded for.
struct PlanIdentity {
  std::string model_name;
  std::string model_hash;   // hash of the HF tensor list (names, dtypes, shapes) and architecture
  std::string layout;       // inference layout per replica, e.g. "dp16,ep16"
  std::string layout_hash;
  std::string vllm;         // vllm_rules(): which vLLM release's loaders the plans follow
  int ranks_per_replica = 0;
};
PlanIdentity plan_identity(const ModelSpec& model, const InferencePlacement& inf);

// Writes all plans (one per rank of a replica) to `path`; identical inputs give identical bytes.
void write_plans(const std::string& path, const ModelSpec& model, const InferencePlacement& inf,
                 const std::vector<RankPlan>& plans);

struct PlanFile {
  PlanIdentity identity;
  int format_version = 0;
  std::vector<RankPlan> plans;  // indexed by local rank
};

// Reads and validates a plan file against the model and layout of this run.
PlanFile read_plans(const std::string& path, const ModelSpec& model, const InferencePlacement& inf);
// Reads only the identity (for `plan show` without a model).
PlanIdentity read_plan_identity(const std::string& path);

// The header's size: a plan file is this many bytes of header, then the HDF5 part.
inline constexpr int64_t kPlanHeaderBytes = 512;
// Recomputes the checksums of the file at `path` after its HDF5 part (which begins
// kPlanHeaderBytes in) was changed: each rank's content hash over its tables where they can be
// read, then the header's length and whole-file checksum. For the fuzzer that mutates the HDF5
// part itself, below both checksums (tests/fuzz/fuzz_plan_reader.cpp); write_plans seals the
// files it records.
void reseal_plan_file(const std::string& path);

}  // namespace shardsync
