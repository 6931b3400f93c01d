// strided.cuh: the kernel-side form of a copy or synthetic-fill job, and the batched
// kernels over such jobs: copy (pack/unpack/replay), synth (fill trainer shards, zero
// padding) and verify (count and locate mismatches against synthetic values).
//
// A job is a CopyDesc (loops of (size, src_stride, dst_stride), outermost first) split into
// an inner run and up to kMaxOuter outer loops. When both sides of the inner run are
// contiguous the run moves in units of up to 16 bytes (vector loads and stores), else one
// element per unit. Jobs are cut into tiles of kTileUnits units (a job's last one shorter);
// one block per tile, so many small tensors of one chunk go in one launch (copies of rows,
// several runs under one outer loop, in a launch of their own). A block finds its
// job by a binary search of the jobs' first tiles: no per-tile list is built or uploaded
// (for a 16 GB one-pass read that list was 3 MB, copied before the kernel could start).
#pragma once

#include <cstdint>

#include "device/synth_hash.hpp"

namespace shardsync::kernels {

inline constexpr int kMaxOuter = 7;
inline constexpr int64_t kTileUnits = 8192;

// kVerifyZero: the padding's zeros. kHash: --checksum of bytes where they lie (read at the dst
// positions, nothing written); a kCopy job with hash_tensor >= 0 also hashes what it copies.
enum JobMode : int32_t { kCopy = 0, kSynth = 1, kZero = 2, kVerify = 3, kVerifyZero = 4, kHash = 5 };

struct DevJob {
  const uint8_t* src;  // kCopy only
  uint8_t* dst;
  int64_t src_offset;  // elements (kCopy: of src; kSynth/kVerify: the element index space)
  int64_t dst_offset;  // elements
  int64_t runs;        // outer iterations
  int64_t run_units;   // units per inner run
  int64_t inner_src_stride, inner_dst_stride;  // elements, used when unit == one element
  int64_t size[kMaxOuter], src_stride[kMaxOuter], dst_stride[kMaxOuter];  // outer loops, elements
  SynthKey key;        // kSynth/kVerify: the values (synth_value)
  int32_t outer;       // number of outer loops
  int32_t elem_bytes;
  int32_t unit_bytes;  // elem_bytes, or a vector width (4, 8, 16) for contiguous runs
  int32_t mode;
  int32_t id;          // the caller's job index (verify reports it)
  // --checksum (kHash, or kCopy with hash_tensor >= 0): each element's term (checksum_term) of
  // tensor hash_tensor at the index its loop position has on this third side (the piece's HF
  // element coordinates), added to sums[hash_slot].
  int32_t hash_tensor;
  int64_t hash_offset, hash_inner_stride;
  int64_t hash_stride[kMaxOuter];
  int32_t hash_slot;
  int32_t pad;
};

// A transposing copy (the destination runs along the last loop, the source along the one
// before; Llama-4's expert weights): dst[i * ds + j] = src[i + j * ss] for i < ni, j < nj in
// each iteration of up to kMaxOuter outer loops. It goes through shared memory in tiles of
// kTransposeTile x kTransposeTile elements (twice that of 16-bit pairs where every offset,
// stride and base pointer allows 4-byte accesses), so a warp reads along a source row and
// writes along a destination row.
inline constexpr int kTransposeTile = 32;
struct TransposeJob {
  const uint8_t* src;
  uint8_t* dst;
  int64_t src_offset, dst_offset;  // elements
  int64_t ni, nj, ss, ds;          // the two inner loops
  int64_t tiles_i, tiles, total;   // tiles along i, per outer iteration, in all
  int64_t size[kMaxOuter], src_stride[kMaxOuter], dst_stride[kMaxOuter];  // outer loops
  int32_t outer;
  int32_t elem_bytes;
  int32_t pairs;                   // 16-bit pairs (transpose16_kernel)
  int32_t pad;
};


}  // namespace shardsync::kernels
