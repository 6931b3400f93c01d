// Synthetic weights: the value of every element is a counter-based hash of (HF tensor,
// element index, version), so any rank can compute any element's expected value without
// the full tensor, and a stale (old version) or misplaced byte is always caught.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "layout/trainer.hpp"
#include "device/device.hpp"
#include "device/synth_hash.hpp"
#include "engine/update_model.hpp"
#include "model/catalog.hpp"

namespace shardsync {

// The key of HF tensor `hf`'s values at `version` under `updates`.
SynthKey weight_key(const ModelSpec& model, int32_t hf, uint64_t version, const UpdateModel& updates);

// The copy from an HF tensor's element-index space to a box stored contiguously: the
// source positions are the elements' global indices.
CopyDesc box_desc(const std::vector<int64_t>& shape, const Box& box);

// Visits a box of a tensor as contiguous runs: f(global element offset, box-local element
// offset, run length). Boxes are stored contiguously in row-major box order.
template <class F>
void for_each_box_run(const std::vector<int64_t>& shape, const Box& box, F&& f) {
  const size_t nd = shape.size();
  if (box.numel() == 0) return;
  // Merge trailing dimensions that the box covers fully into the run.
  size_t inner = nd - 1;
  int64_t run = box.length[inner];
  while (inner > 0 && box.start[inner] == 0 && box.length[inner] == shape[inner]) {
    --inner;
    run *= box.length[inner];
  }
  std::vector<int64_t> strides(nd, 1);
  for (size_t d = nd - 1; d > 0; --d) strides[d - 1] = strides[d] * shape[d];
  std::vector<int64_t> idx(inner, 0);
  int64_t local = 0;
  int64_t runs = box.numel() / run;
  for (int64_t r = 0; r < runs; ++r) {
    int64_t global = box.start[inner] * strides[inner];
    for (size_t d = 0; d < inner; ++d) global += (box.start[d] + idx[d]) * strides[d];
    for (size_t d = inner + 1; d < nd; ++d) global += box.start[d] * strides[d];
    f(global, local, run);
    local += run;
    for (size_t d = inner; d-- > 0;) {
      if (++idx[d] < box.length[d]) break;
      idx[d] = 0;
    }
  }
}

// Where a trainer rank keeps its shards: one contiguous region, as a Megatron trainer keeps
// its parameters in contiguous buffers (one registration covers them all), shards in HF
// order, 256-byte aligned. A function of (model, placement, rank) only, so a consumer knows
// where any piece lies in any trainer's weights without asking.
struct WeightsLayout {
  std::vector<int64_t> offset;  // per HF tensor: bytes from the region's start, -1: not held
  std::vector<Box> box;         // per HF tensor: the held box (stored row-major)
  int64_t bytes = 0;
};
WeightsLayout weights_layout(const ModelSpec& model, const TrainerPlacement& trainer, int rank);

// The pieces of HF tensors one trainer rank holds (its shard), filled per version, in the
// memory of `device` (host or GPU) at `region` (weights_layout(...).bytes of it).
class TrainerShards {
 public:
  TrainerShards(const ModelSpec& model, const TrainerPlacement& trainer, int rank, uint8_t* region, Device& device);
  struct Shard {
    int32_t hf = -1;
    Box box;
    uint8_t* data = nullptr;  // box elements, row-major, in the weights region
    int64_t bytes = 0;
  };
  // Refills every shard with `version` (the optimizer step) under `updates`; `skip_hf` keeps
  // one stale.
  void fill(uint64_t version, const UpdateModel& updates, int32_t skip_hf = -1);
  const Shard* find(int32_t hf) const;
  const std::vector<Shard>& shards() const { return shards_; }
  int64_t bytes() const { return bytes_; }

 private:
  const ModelSpec* model_;
  Device* device_;
  std::vector<Shard> shards_;
  std::vector<int32_t> index_;  // hf -> shard or -1
  int64_t bytes_ = 0;
};

}  // namespace shardsync
