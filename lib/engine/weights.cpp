// The weight source and parameter sink seams (weights.hpp).
#include "engine/weights.hpp"

namespace shardsync {

int64_t SyntheticSource::prepare(uint64_t version, int sync_index) {
  const bool stale = sync_index == stale_at_sync_ && !shards_.shards().empty();
  shards_.fill(version, updates_, stale ? shards_.shards().front().hf : -1);
  return 0;
}

int64_t CallerSource::prepare(uint64_t, int) {
  int64_t staged = 0;
  const auto& shards = shards_.shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    const uint8_t* from = bound_.at(i);
    if (!from || from == shards[i].data) continue;  // kept in its slot: read where it lies
    device_.memcpy(shards[i].data, from, shards[i].bytes);
    staged += shards[i].bytes;
  }
  device_.synchronize();
  return staged;
}

int64_t copy_out(const std::vector<TensorSlot>& slots, const Bindings& bound, Device& device) {
  int64_t staged = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    uint8_t* to = bound.at(i);
    if (!to || to == slots[i].slot) continue;  // the caller keeps it in its slot: written in place
    device.memcpy(to, slots[i].slot, slots[i].bytes);
    staged += slots[i].bytes;
  }
  device.synchronize();
  return staged;
}

}  // namespace shardsync
