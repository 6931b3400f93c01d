// Delta sync (--delta, issue 21): a packed chunk travels as what changed since the same chunk
// was last sent. Trainers and inference ranks each keep the chunk as last sent / received (the
// pull engines' chunks have the same layout every sync), the trainer compares the freshly
// packed chunk with its copy word by word (16 bits: one bf16 weight), and the record says which
// words changed and their values. A record is self-describing, so an anchor (whole chunk) and a
// delta need no agreement beyond the header: a delta names the version it applies on top of,
// and an inference rank that holds another refuses it.
//
// A record, in the send buffer at the chunk's place and in the receive buffer as pulled:
//   header (32 bytes): magic "DLT1", format (0 whole, 1 delta), base version, version,
//                      changed words, words
//   whole: the chunk's bytes
//   delta: per segment of 1024 words, the changed words before it (uint32, 16-byte padded),
//          then for each segment with a change, in order, a bitmap of its 1024 words (128
//          bytes; bit i of byte k: word 8k + i), then the changed words' values in order
// The prefix counts say which segments carry a bitmap and where each segment's values start,
// so every segment can be decoded on its own (a GPU's block per segment). An index costs 4
// bytes per 2 KiB segment, plus 128 bytes per segment with a change: 6.4% of the chunk when
// every segment changes (uniform changes), less when changes cluster. A record that would not
// be smaller than the whole chunk goes whole. The functions below are the host's codec and the
// twin of the GPU's (kernels/delta_kernels.cuh); devices run either through Device::delta_encode
// and Device::delta_apply.
#pragma once

#include <cstdint>
#include <vector>

namespace shardsync {

inline constexpr uint32_t kDeltaMagic = 0x31544c44;  // "DLT1"
inline constexpr int64_t kDeltaHeaderBytes = 32;
inline constexpr int64_t kDeltaSegmentWords = 1024;

struct DeltaHeader {
  uint32_t magic = kDeltaMagic;
  uint32_t format = 0;        // 0: the whole chunk follows; 1: a delta
  uint64_t base_version = 0;  // delta: the version the receiver's copy must hold
  uint64_t version = 0;       // the version the chunk holds after this record
  uint32_t changed = 0;       // delta: changed words
  uint32_t words = 0;         // delta: the chunk's 16-bit words
};
static_assert(sizeof(DeltaHeader) == kDeltaHeaderBytes);

// The most a chunk's record takes: the header and the whole chunk.
inline int64_t delta_record_capacity(int64_t chunk_bytes) { return kDeltaHeaderBytes + chunk_bytes; }
// A delta record's fixed part for a chunk: header and prefix counts (the whole record when
// nothing changed).
int64_t delta_index_bytes(int64_t chunk_bytes);

struct DeltaRecord {
  int64_t bytes = 0;          // the record (what travels)
  int64_t index_bytes = 0;    // of those, header + prefix counts + bitmaps (whole: the header)
  int64_t changed_bytes = 0;  // delta: the changed words' bytes; whole: the chunk's bytes
  bool whole = false;
};

// The trainer's side. `record` holds the freshly packed chunk at record + kDeltaHeaderBytes
// (`chunk_bytes` of it); `kept` the chunk as last sent (version base_version), or null when
// there is none. Writes the record at `record` (a delta, or the header of a whole chunk when
// `whole` is asked for, there is no kept copy, the chunk has an odd size, or a delta would not
// be smaller) and brings `kept` to the fresh chunk. `scratch` is reused between calls.
DeltaRecord delta_encode(uint8_t* record, int64_t chunk_bytes, uint8_t* kept, uint64_t base_version, uint64_t version,
                         bool whole, std::vector<uint8_t>& scratch);

// The inference rank's side: applies a record of `record_bytes` to `kept` (the chunk as last
// received, `chunk_bytes`; `have_kept` false: nothing yet). Returns what it was; throws Error
// naming the fault for a malformed record, a delta without a kept copy or on top of a version
// other than `kept_version`.
DeltaRecord delta_apply(const uint8_t* record, int64_t record_bytes, uint8_t* kept, int64_t chunk_bytes,
                        bool have_kept, uint64_t kept_version);

// A device's batch of encodings: each job's chunk was packed at record + kDeltaHeaderBytes.
struct DeltaEncodeJob {
  uint8_t* record = nullptr;
  int64_t chunk_bytes = 0;
  uint8_t* kept = nullptr;  // the chunk as last sent (version base_version)
  uint64_t base_version = 0, version = 0;
  bool whole = false;       // an anchor, or nothing kept yet
};
// A pulled record to apply to the chunk as last received.
struct DeltaApplyJob {
  const uint8_t* record = nullptr;
  int64_t record_bytes = 0;
  uint8_t* kept = nullptr;
  int64_t chunk_bytes = 0;
  bool have_kept = false;
  uint64_t kept_version = 0;
};

}  // namespace shardsync
