// Sharding plans: per inference rank, per HF tensor, the recorded op chain and where the
// bytes land. Address-free (offsets in elements of the full HF tensor and of the engine
// parameter); binding to memory and executing are separate steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layout/inference.hpp"
#include "model/catalog.hpp"
#include "plan/engine_params.hpp"
#include "tensor/ops.hpp"
#include "tensor/view.hpp"

namespace shardsync {

struct PlanEntry {
  int32_t hf_param = -1;      // index into the model's HF tensors; -1: zero fill (padding)
  int32_t engine_param = -1;  // index into the rank's engine parameters
  std::vector<Op> ops;        // chain applied to the full HF tensor
  int64_t dst_offset = 0;     // destination view in the engine parameter (elements)
  std::vector<int64_t> dst_shape, dst_strides;
  CopyDesc copy;              // derived: compiled chain (src: HF tensor, dst: engine param)

  bool is_fill() const { return hf_param < 0; }
  int64_t numel() const { return copy.numel; }
};

struct RankPlan {
  int local_rank = 0;           // rank within a replica (plans are the same in every replica)
  InferenceCoord coord;
  std::vector<EngineParam> params;
  std::vector<PlanEntry> entries;  // in HF checkpoint order

  int64_t copy_bytes(const ModelSpec& m) const;  // bytes pulled (fill entries excluded)
  int64_t num_copies() const;
};

// Runs the loaders of one rank on RecordingTensors.
RankPlan record_rank_plan(const ModelSpec& model, const InferencePlacement& inf, int local_rank);
// All distinct plans of an inference layout: one per rank of a replica.
std::vector<RankPlan> record_plans(const ModelSpec& model, const InferencePlacement& inf);

// Rebuilds an entry's CopyDesc from its ops and destination; throws ViewError if they do
// not describe a valid copy for these shapes (used when loading plan files).
CopyDesc compile_entry(const PlanEntry& e, const std::vector<int64_t>& hf_shape,
                       const std::vector<int64_t>& param_shape);

// Replays an entry from a full HF tensor's bytes into an engine parameter's bytes.
void replay_entry(const PlanEntry& e, const void* hf_data, void* param_data, int64_t elem_bytes);
// Zero-fills the destination of a fill entry.
void execute_fill(const CopyDesc& d, void* param_data, int64_t elem_bytes);

}  // namespace shardsync
