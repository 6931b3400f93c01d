// The two seams between the engines and the weights they move.
//
// WeightSource (trainer side): what a trainer rank's weights hold at each version, and where
// each HF shard lies: in the rank's registered region, at the offsets of the region's table
// (TrainerShards: every HF shard the rank holds, in HF order, 256-byte aligned; a function of
// model, placement and rank, so every rank knows it without asking), or, for the caller's
// tensors, in the caller's own memory. The trainer reads its shards at data(hf); other
// processes of the node read them through its TensorTable.
//   - synthetic: counter-based values of (tensor, element, version), checkable anywhere;
//   - caller: the caller's own tensors (the library's users). A tensor in its slot
//     (Engines::slots()) is read where it lies; so is one the others can map (its CUDA
//     allocation shared by IPC, at its offset: share()); any other is copied into its slot
//     before each sync (staged, and counted).
// ParamSink (inference side): where the engine parameters end up. The engines write each
// parameter at ConsumerSide::param(): its slot in the live weights region (in the plan's
// parameter order), or, where the sync writes in place (an in-place pull engine whose one-pass
// reads are device copies), the caller's parameter itself; a caller's parameter not written
// in place is copied out after the sync (staged, counted).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.hpp"
#include "engine/synthetic.hpp"

namespace shardsync {

// Where the weights come from (SyncOptions::weights).
enum class WeightsFrom : uint8_t { kSynthetic, kCaller };

// One tensor of this rank as the caller sees it: a trainer's HF shard (its name, the shape of
// the local shard) or an inference rank's engine parameter (vLLM's name and shape), and its
// slot in the registered region.
struct TensorSlot {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  uint8_t* slot = nullptr;  // in the rank's registered region (host or device memory)
  int64_t bytes = 0;
};

// The caller's memory for each slot: null where the caller keeps the tensor in its slot.
class Bindings {
 public:
  explicit Bindings(size_t n = 0) : data_(n, nullptr) {}
  void bind(size_t slot, uint8_t* data) { data_.at(slot) = data; }
  uint8_t* at(size_t slot) const { return data_.at(slot); }
  size_t size() const { return data_.size(); }

 private:
  std::vector<uint8_t*> data_;
};

// Where a trainer rank's HF shards lie for the other processes of its node (published once, at
// the first sync): in its registered region (segment -1: at the region's table offsets), or in
// one of the caller's allocations shared by CUDA IPC (segments[segment], `offset` bytes in).
struct TensorTable {
  std::vector<std::vector<uint8_t>> segments;  // IPC handles
  std::vector<int32_t> segment;                // per HF tensor
  std::vector<int64_t> offset;                 // per HF tensor, bytes into its segment
  std::vector<uint8_t> encode() const;
  static TensorTable decode(const std::vector<uint8_t>& bytes, size_t num_hf);
};

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // Where HF tensor hf's shard lies on this rank at this sync (this rank's reads).
  virtual const uint8_t* data(int32_t hf) const = 0;
  // Brings the region to `version` before sync `sync_index` starts; returns the bytes staged
  // (copied in).
  virtual int64_t prepare(uint64_t version, int sync_index) = 0;
  // Whether every element's value at a version is known to any rank (verification by
  // expected values); false for the caller's weights.
  virtual bool expected_values() const = 0;
  virtual std::string describe() const = 0;
};

// Synthetic weights (the benchmark's source): TrainerShards::fill per version; at sync
// `stale_at_sync` (a test hook, -1: never) the rank's first shard keeps its old version.
class SyntheticSource : public WeightSource {
 public:
  SyntheticSource(TrainerShards& shards, const UpdateModel& updates, int stale_at_sync)
      : shards_(shards), updates_(updates), stale_at_sync_(stale_at_sync) {}
  int64_t prepare(uint64_t version, int sync_index) override;
  const uint8_t* data(int32_t hf) const override;
  bool expected_values() const override { return true; }
  std::string describe() const override { return "synthetic: " + updates_.describe(); }

 private:
  TrainerShards& shards_;
  UpdateModel updates_;
  int stale_at_sync_ = -1;
};

// The caller's tensors, one per shard of the region (bound in the slots' order).
class CallerSource : public WeightSource {
 public:
  CallerSource(TrainerShards& shards, Device& device) : shards_(shards), device_(device), bound_(shards.shards().size()) {}
  Bindings& bindings() { return bound_; }
  // Before the first sync, where the node's other processes map this rank's memory (CUDA IPC
  // transport and gathers): each bound tensor outside its slot whose allocation the device can
  // share is read where it lies from now on; returns the table the others read by. A tensor
  // that cannot be shared (host memory, a cuMem allocation such as PyTorch's
  // expandable_segments) stays staged, and `notes` says which and why. Without share(),
  // every tensor outside its slot is staged.
  TensorTable share(size_t num_hf, std::vector<std::pair<int32_t, std::string>>* notes);
  int64_t prepare(uint64_t version, int sync_index) override;
  const uint8_t* data(int32_t hf) const override;
  bool expected_values() const override { return false; }
  std::string describe() const override { return "the caller's tensors"; }

 private:
  bool in_place(size_t i) const;  // shard i is read where the caller keeps it
  TrainerShards& shards_;
  Device& device_;
  Bindings bound_;
  std::vector<bool> shared_;  // per shard: its caller memory is read in place (share())
};

// The caller's engine parameters: copied out of the live weights after each sync where they
// lie outside their slots. Returns the bytes staged.
int64_t copy_out(const std::vector<TensorSlot>& slots, const Bindings& bound, Device& device);

}  // namespace shardsync
