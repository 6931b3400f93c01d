// The weight source and parameter sink seams (weights.hpp).
#include "engine/weights.hpp"

#include "common/bytes.hpp"
#include "common/error.hpp"

namespace shardsync {

namespace {
template <class T>
void put(std::vector<uint8_t>& b, T v) {
  put_bytes(b, v);
}
template <class T>
T take(const std::vector<uint8_t>& b, size_t& at) {
  return take_bytes<T>(b, at, "tensor table: truncated");
}
}  // namespace

// [segments: u32, then each: u32 size + bytes][entries: u32, then each: i32 hf, i32 segment, i64 offset]
std::vector<uint8_t> TensorTable::encode() const {
  std::vector<uint8_t> out;
  put(out, uint32_t(segments.size()));
  for (const auto& h : segments) {
    put(out, uint32_t(h.size()));
    out.insert(out.end(), h.begin(), h.end());
  }
  uint32_t n = 0;
  for (int32_t s : segment) n += s >= 0;
  put(out, n);
  for (size_t hf = 0; hf < segment.size(); ++hf)
    if (segment[hf] >= 0) {
      put(out, int32_t(hf));
      put(out, segment[hf]);
      put(out, offset[hf]);
    }
  return out;
}

TensorTable TensorTable::decode(const std::vector<uint8_t>& b, size_t num_hf) {
  TensorTable t;
  t.segment.assign(num_hf, -1);
  t.offset.assign(num_hf, 0);
  if (b.empty()) return t;  // a rank with nothing outside its region
  size_t at = 0;
  const uint32_t ns = take<uint32_t>(b, at);
  for (uint32_t i = 0; i < ns; ++i) {
    const uint32_t size = take<uint32_t>(b, at);
    if (at + size > b.size()) throw Error("tensor table: a segment handle past the end");
    t.segments.emplace_back(b.begin() + ptrdiff_t(at), b.begin() + ptrdiff_t(at + size));
    at += size;
  }
  const uint32_t n = take<uint32_t>(b, at);
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t hf = take<int32_t>(b, at), seg = take<int32_t>(b, at);
    const int64_t off = take<int64_t>(b, at);
    if (hf < 0 || size_t(hf) >= num_hf || seg < 0 || size_t(seg) >= t.segments.size() || off < 0)
      throw Error("tensor table: entry " + std::to_string(i) + " (tensor " + std::to_string(hf) + ", segment " +
                  std::to_string(seg) + ") out of range");
    t.segment[size_t(hf)] = seg;
    t.offset[size_t(hf)] = off;
  }
  return t;
}

int64_t SyntheticSource::prepare(uint64_t version, int sync_index) {
  const bool stale = sync_index == stale_at_sync_ && !shards_.shards().empty();
  shards_.fill(version, updates_, stale ? shards_.shards().front().hf : -1);
  return 0;
}

const uint8_t* SyntheticSource::data(int32_t hf) const {
  const TrainerShards::Shard* s = shards_.find(hf);
  return s ? s->data : nullptr;
}

TensorTable CallerSource::share(size_t num_hf, std::vector<std::pair<int32_t, std::string>>* notes) {
  TensorTable t;
  t.segment.assign(num_hf, -1);
  t.offset.assign(num_hf, 0);
  const auto& shards = shards_.shards();
  shared_.assign(shards.size(), false);
  std::vector<std::vector<uint8_t>> bases;  // one handle per allocation
  for (size_t i = 0; i < shards.size(); ++i) {
    const uint8_t* from = bound_.at(i);
    if (!from || from == shards[i].data) continue;  // in its slot: the region's table says where
    std::vector<uint8_t> handle;
    int64_t offset = 0;
    std::string why;
    if (!device_.ipc_export(from, &handle, &offset, &why)) {
      if (notes) notes->emplace_back(shards[i].hf, why);
      continue;
    }
    size_t seg = 0;
    while (seg < t.segments.size() && t.segments[seg] != handle) ++seg;
    if (seg == t.segments.size()) t.segments.push_back(handle);
    t.segment[size_t(shards[i].hf)] = int32_t(seg);
    t.offset[size_t(shards[i].hf)] = offset;
    shared_[i] = true;
  }
  return t;
}

bool CallerSource::in_place(size_t i) const {
  const uint8_t* from = bound_.at(i);
  return !from || from == shards_.shards()[i].data || (i < shared_.size() && shared_[i]);
}

int64_t CallerSource::prepare(uint64_t, int) {
  int64_t staged = 0;
  const auto& shards = shards_.shards();
  for (size_t i = 0; i < shards.size(); ++i) {
    if (in_place(i)) continue;  // read where it lies
    device_.memcpy(shards[i].data, bound_.at(i), shards[i].bytes);
    staged += shards[i].bytes;
  }
  device_.synchronize();
  return staged;
}

const uint8_t* CallerSource::data(int32_t hf) const {
  const TrainerShards::Shard* s = shards_.find(hf);
  if (!s) return nullptr;
  const size_t i = size_t(s - shards_.shards().data());
  const uint8_t* from = bound_.at(i);
  return from && i < shared_.size() && shared_[i] ? from : s->data;
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
