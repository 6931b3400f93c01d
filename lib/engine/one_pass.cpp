// One-pass reads: a consumer reads the pieces whose source is a trainer's own shard straight
// from the trainer's weights into the live engine parameters (see OnePassReads).
#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

namespace {
constexpr size_t kMaxGetsInFlight = 16;
}  // namespace

OnePassReads::OnePassReads(Engines::Impl& m, const ConsumerSchedule& s, BusyTime& busy, bool corrupt) : m_(m), busy_(busy) {
  const ConsumerSide& cs = m.consumer_side;
  for (const auto& [t, pieces] : s.direct) {
    const WeightsLayout& w = m.weights_of(t);
    std::vector<CopyJob> jobs;
    int64_t bytes = 0;
    for (const ChunkPiece& p : pieces) {
      const int32_t ep = cs.plan->entries[size_t(p.entry)].engine_param;
      const int64_t eb = dtype_bytes(m.model.param(p.hf).dtype);
      const int64_t shard = w.offset.at(size_t(p.hf));
      if (shard < 0)
        throw Error("one-pass read: trainer rank " + std::to_string(t) + " holds no shard of " + m.model.param(p.hf).name);
      CopyDesc d = p.copy;  // source: elements of the trainer's shard
      d.src_offset -= p.slab_lo;
      uint8_t* dst = cs.param(ep);
      if (!first_dst_) first_dst_ = dst + d.dst_offset * eb;
      bytes += p.bytes;
      if (m.one_pass == OnePass::kMapped) {
        const uint8_t* base = m.transport->mapped(t);
        if (!base) throw Error("one-pass read: the transport has no mapping of trainer rank " + std::to_string(t));
        const uint8_t* src = m.caller_shard(t, p.hf);  // the caller's own memory, shared through t's table
        if (!src) src = base + m.weights_base() + shard;
        if (corrupt && !corrupt_copy_.data()) src = damaged_source(src, d, eb);
        // --checksum: each piece hashed as it is copied, at its HF element indices (p.copy's source side)
        jobs.push_back(CopyJob{src, dst, d, int32_t(eb), m.opt.checksum ? p.hf : -1, &p.copy});
        continue;
      }
      // One run on both sides (reads_directly): gets of at most a chunk.
      const int64_t remote = m.weights_base() + shard + d.src_offset * eb;
      const int64_t local = m.live_base() + cs.param_offset[size_t(ep)] + d.dst_offset * eb;
      for (int64_t off = 0; off < p.bytes; off += m.chunk_bytes)
        queue_.push_back(Get{t, remote + off, local + off, std::min(m.chunk_bytes, p.bytes - off)});
    }
    if (bytes == 0) continue;  // the trainer waits for no READ_DONE either
    left_[t] = bytes;
    bytes_ += bytes;
    if (!jobs.empty()) {
      busy_.begin(now_s());
      if (m.opt.checksum) hashed_[t] = m.device->copy_hashed(jobs);  // a job per piece, in the pieces' order
      else m.device->copy(jobs);
      launched_[t] = m.device->fence(Lane::kMain);
    }
  }
}

// The test hook's source: the piece's source elements copied aside, the first one's lowest bit
// flipped; returned as the base the piece's offsets apply to.
const uint8_t* OnePassReads::damaged_source(const uint8_t* src, const CopyDesc& d, int64_t eb) {
  int64_t lo = 0, hi = 0;
  source_range(d, &lo, &hi);  // [lo, hi)
  const int64_t bytes = (hi - lo) * eb;
  corrupt_copy_ = DeviceBuffer(m_.device.get(), bytes);
  m_.device->memcpy(corrupt_copy_.data(), src + lo * eb, bytes);
  m_.device->synchronize();
  uint8_t* at = corrupt_copy_.data() + (d.src_offset - lo) * eb;
  uint8_t b = 0;
  m_.device->to_host(&b, at, 1);
  b ^= 0x01;
  m_.device->from_host(at, &b, 1);
  return corrupt_copy_.data() - lo * eb;
}

bool OnePassReads::post(RankStats& st) {
  bool any = false;
  while (!queue_.empty() && in_flight_.size() < kMaxGetsInFlight) {
    Get g = queue_.front();
    queue_.pop_front();
    busy_.begin(now_s());
    in_flight_.emplace(m_.transport->get(g.trainer, size_t(g.remote), size_t(g.local), size_t(g.bytes)), g);
    ++st.gets;
    any = true;
  }
  return any;
}

bool OnePassReads::complete(RankStats& st, const std::function<void()>& landed) {
  bool any = false;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!m_.transport->test(it->first)) {
      ++it;
      continue;
    }
    const Get g = it->second;
    it = in_flight_.erase(it);
    busy_.end(now_s());
    st.bytes_in += g.bytes;
    st.one_pass_bytes += g.bytes;
    any = true;
    if ((left_.at(g.trainer) -= g.bytes) == 0) finished(g.trainer, st);
    landed();
  }
  for (auto it = launched_.begin(); it != launched_.end();) {
    if (!m_.device->done(it->second)) {
      ++it;
      continue;
    }
    const int t = it->first;
    busy_.end(now_s());
    st.bytes_in += left_.at(t);
    st.one_pass_bytes += left_.at(t);
    it = launched_.erase(it);
    finished(t, st);
    any = true;
    landed();
  }
  return any;
}

void OnePassReads::finished(int trainer, RankStats& st) {
  left_.erase(trainer);
  CtrlMsg done{kMsgReadDone, -1, m_.world.local_rank, 0, 1, 0, 0, 0, {}};
  m_.transport->send(trainer, done);
  ++st.messages;
}

}  // namespace shardsync
