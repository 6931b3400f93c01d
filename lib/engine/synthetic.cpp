#include "engine/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace shardsync {

CopyDesc box_desc(const std::vector<int64_t>& shape, const Box& box) {
  SubView v = SubView::contiguous(shape);
  for (size_t d = 0; d < shape.size(); ++d) v.narrow(int(d), box.start[d], box.length[d]);
  return make_pack_desc(v, 0);
}

WeightsLayout weights_layout(const ModelSpec& model, const TrainerPlacement& trainer, int rank) {
  WeightsLayout w;
  w.offset.assign(model.params().size(), -1);
  w.box.resize(model.params().size());
  for (int32_t i = 0; i < int32_t(model.params().size()); ++i)
    for (const auto& piece : trainer.pieces(i)) {
      if (std::find(piece.ranks.begin(), piece.ranks.end(), rank) == piece.ranks.end()) continue;
      w.offset[size_t(i)] = w.bytes;
      w.box[size_t(i)] = piece.box;
      w.bytes += (piece.box.numel() * dtype_bytes(model.param(i).dtype) + 255) & ~int64_t(255);
    }
  return w;
}

TrainerShards::TrainerShards(const ModelSpec& model, const TrainerPlacement& trainer, int rank, uint8_t* region,
                             Device& device)
    : model_(&model), device_(&device) {
  const WeightsLayout w = weights_layout(model, trainer, rank);
  index_.assign(model.params().size(), -1);
  for (int32_t i = 0; i < int32_t(model.params().size()); ++i) {
    if (w.offset[size_t(i)] < 0) continue;
    Shard s;
    s.hf = i;
    s.box = w.box[size_t(i)];
    s.data = region + w.offset[size_t(i)];
    s.bytes = s.box.numel() * dtype_bytes(model.param(i).dtype);
    bytes_ += s.bytes;
    index_[size_t(i)] = int32_t(shards_.size());
    shards_.push_back(std::move(s));
  }
}

SynthKey weight_key(const ModelSpec& model, int32_t hf, uint64_t version, const UpdateModel& updates) {
  const std::vector<int64_t>& shape = model.param(hf).shape;
  const int64_t unit = updates.clustered && !shape.empty() ? shape.back() : 0;
  return synth_key(hf, version, updates.change_below(), unit);
}

void TrainerShards::fill(uint64_t version, const UpdateModel& updates, int32_t skip_hf) {
  std::vector<SynthJob> jobs;
  for (Shard& s : shards_) {
    if (s.hf == skip_hf) continue;
    const ParamMeta& p = model_->param(s.hf);
    jobs.push_back(SynthJob{s.data, weight_key(*model_, s.hf, version, updates), box_desc(p.shape, s.box),
                            int32_t(dtype_bytes(p.dtype)), false});
  }
  device_->synth(jobs);
  device_->synchronize();
}

const TrainerShards::Shard* TrainerShards::find(int32_t hf) const {
  int32_t i = index_[size_t(hf)];
  return i < 0 ? nullptr : &shards_[size_t(i)];
}

}  // namespace shardsync
