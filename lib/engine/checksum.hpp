// --checksum: verification of bytes whose values nobody else knows (the caller's tensors). The
// trainer hashes each piece where it lies (its shard, or the slab its gather made) and sends the
// sums: a packed chunk's in its READY, a one-pass read's in a HASHES message at the sync's start.
// The receiver hashes each piece where it landed, in its parameter, right after the copy that
// placed it (a packed chunk's pieces as the chunk lands; one-pass pieces once their reads are
// done), and compares. A piece's sum is that of checksum_term(tensor, element, bits) over its
// elements (device/synth_hash.hpp), the same whatever order or batches either side visits them in.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "device/device.hpp"
#include "engine/schedule.hpp"
#include "engine/stats.hpp"
#include "model/catalog.hpp"
#include "plan/plan.hpp"

namespace shardsync {

// A piece read at the trainer: its elements lie in `slab` (a shard or a gathered slab) from the
// source element slab_lo on.
inline HashJob piece_hash_at_trainer(const ChunkPiece& p, const uint8_t* slab, int64_t slab_lo, int32_t elem_bytes) {
  CopyDesc d = p.copy;
  d.src_offset -= slab_lo;
  return HashJob{slab, std::move(d), elem_bytes, p.hf, slab_lo, true};
}

// A piece read at the receiver: where its copy wrote it, in the parameter (or layerwise buffer)
// that starts at `param`.
inline HashJob piece_hash_at_receiver(const ChunkPiece& p, const uint8_t* param, int32_t elem_bytes) {
  return HashJob{param, p.copy, elem_bytes, p.hf, 0, false};
}

inline void append_u64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}

inline uint64_t u64_at(const std::vector<uint8_t>& in, size_t i) {
  uint64_t v = 0;
  std::memcpy(&v, in.data() + 8 * i, 8);
  return v;
}

// The lowest and highest destination element a copy writes.
inline void dst_extent(const CopyDesc& d, int64_t* lo, int64_t* hi) {
  *lo = *hi = d.dst_offset;
  for (const CopyDim& k : d.dims) {
    if (k.size <= 0) continue;
    const int64_t span = (k.size - 1) * k.dst_stride;
    if (span < 0) *lo += span;
    else *hi += span;
  }
}

// A consumer's checksum differences in words: how many pieces of how many, and the first one's
// HF tensor, engine parameter, the parameter's elements it covers, and the trainer that sent it.
inline std::string describe_bad_sums(const RankStats& r, const ModelSpec& model, const RankPlan& plan) {
  const std::string hf = r.bad_sum_hf >= 0 ? model.param(r.bad_sum_hf).name : "?";
  const std::string param = r.bad_sum_param >= 0 ? plan.params[size_t(r.bad_sum_param)].name : "?";
  return std::to_string(r.checksum_bad) + " of " + std::to_string(r.checksum_pieces) +
         " pieces differ from the trainers' checksums; first: " + hf + " in " + param + " elements [" +
         std::to_string(r.bad_sum_lo) + ", " + std::to_string(r.bad_sum_hi) + "] (from trainer rank " +
         std::to_string(r.bad_sum_from) + ")";
}

}  // namespace shardsync
