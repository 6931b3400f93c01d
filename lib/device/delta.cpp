#include "device/delta.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "common/error.hpp"

namespace shardsync {

namespace {

constexpr int64_t kBitmapBytes = kDeltaSegmentWords / 8;

int64_t segments(int64_t words) { return (words + kDeltaSegmentWords - 1) / kDeltaSegmentWords; }
int64_t prefix_bytes(int64_t segs) { return (4 * segs + 15) & ~int64_t(15); }

uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

int64_t delta_index_bytes(int64_t chunk_bytes) {
  return kDeltaHeaderBytes + prefix_bytes(segments(chunk_bytes / 2));
}

DeltaRecord delta_encode(uint8_t* record, int64_t chunk_bytes, uint8_t* kept, uint64_t base_version, uint64_t version,
                         bool whole, std::vector<uint8_t>& scratch) {
  uint8_t* fresh = record + kDeltaHeaderBytes;
  DeltaHeader h;
  h.version = version;
  auto send_whole = [&] {
    std::memcpy(record, &h, sizeof h);
    if (kept) std::memcpy(kept, fresh, size_t(chunk_bytes));
    return DeltaRecord{kDeltaHeaderBytes + chunk_bytes, kDeltaHeaderBytes, chunk_bytes, true};
  };
  const int64_t words = chunk_bytes / 2;
  const int64_t fixed = delta_index_bytes(chunk_bytes);
  const int64_t limit = kDeltaHeaderBytes + chunk_bytes;  // a delta must be smaller than the whole
  if (whole || !kept || chunk_bytes % 2 != 0 || words > int64_t(UINT32_MAX) || fixed >= limit) return send_whole();
  const int64_t segs = segments(words);
  // scratch: the index (header, prefix counts, then the bitmaps of segments with a change) and,
  // from `limit` on, the changed values; the record is smaller than `limit` or goes whole.
  scratch.resize(size_t(2 * limit));
  std::memset(scratch.data(), 0, size_t(fixed));
  uint8_t* prefix = scratch.data() + kDeltaHeaderBytes;
  uint8_t* values = scratch.data() + limit;
  int64_t index = fixed, changed = 0;
  for (int64_t s = 0; s < segs; ++s) {
    const uint32_t before = uint32_t(changed);
    std::memcpy(prefix + 4 * s, &before, 4);
    const int64_t lo = s * kDeltaSegmentWords, hi = std::min(words, lo + kDeltaSegmentWords);
    uint8_t* bm = nullptr;  // this segment's bitmap, placed at its first change
    for (int64_t i = lo; i < hi;) {
      // Four words at a time while they agree (most do at low densities).
      if (i + 4 <= hi && load64(fresh + 2 * i) == load64(kept + 2 * i)) {
        i += 4;
        continue;
      }
      const int64_t end = std::min(hi, i + 4);
      for (; i < end; ++i) {
        if (std::memcmp(fresh + 2 * i, kept + 2 * i, 2) == 0) continue;
        if (!bm) {
          if (index + kBitmapBytes + 2 * (changed + 1) >= limit) return send_whole();
          bm = scratch.data() + index;
          std::memset(bm, 0, size_t(kBitmapBytes));
          index += kBitmapBytes;
        } else if (index + 2 * (changed + 1) >= limit) {
          return send_whole();
        }
        bm[(i - lo) >> 3] = uint8_t(bm[(i - lo) >> 3] | (1u << ((i - lo) & 7)));
        std::memcpy(values + 2 * changed, fresh + 2 * i, 2);
        std::memcpy(kept + 2 * i, fresh + 2 * i, 2);
        ++changed;
      }
    }
  }
  h.format = 1;
  h.base_version = base_version;
  h.changed = uint32_t(changed);
  h.words = uint32_t(words);
  std::memcpy(scratch.data(), &h, sizeof h);
  std::memcpy(record, scratch.data(), size_t(index));
  std::memcpy(record + index, values, size_t(2 * changed));
  return DeltaRecord{index + 2 * changed, index, 2 * changed, false};
}

DeltaRecord delta_apply(const uint8_t* record, int64_t record_bytes, uint8_t* kept, int64_t chunk_bytes,
                        bool have_kept, uint64_t kept_version) {
  auto bad = [&](const std::string& why) {
    return Error("delta record of " + std::to_string(record_bytes) + " bytes for a chunk of " +
                 std::to_string(chunk_bytes) + ": " + why);
  };
  if (record_bytes < kDeltaHeaderBytes) throw bad("shorter than its 32-byte header");
  DeltaHeader h;
  std::memcpy(&h, record, sizeof h);
  if (h.magic != kDeltaMagic) throw bad("no DLT1 header (magic " + std::to_string(h.magic) + ")");
  if (h.format == 0) {
    if (record_bytes != kDeltaHeaderBytes + chunk_bytes) throw bad("a whole chunk must be header + chunk bytes");
    std::memcpy(kept, record + kDeltaHeaderBytes, size_t(chunk_bytes));
    return DeltaRecord{record_bytes, kDeltaHeaderBytes, chunk_bytes, true};
  }
  if (h.format != 1) throw bad("format " + std::to_string(h.format) + " (expected 0, whole, or 1, delta)");
  if (!have_kept)
    throw bad("a delta on top of version " + std::to_string(h.base_version) +
              " for a chunk this rank has never received (it needed the whole chunk, an anchor)");
  if (h.base_version != kept_version)
    throw bad("a delta on top of version " + std::to_string(h.base_version) + ", but this rank holds version " +
              std::to_string(kept_version) + " of the chunk (it needed an anchor)");
  const int64_t words = chunk_bytes / 2;
  if (chunk_bytes % 2 != 0 || int64_t(h.words) != words)
    throw bad("header says " + std::to_string(h.words) + " words, the chunk has " + std::to_string(words));
  const int64_t segs = segments(words);
  const int64_t fixed = delta_index_bytes(chunk_bytes);
  if (record_bytes < fixed) throw bad("shorter than its prefix counts (" + std::to_string(fixed) + " bytes)");
  const uint8_t* prefix = record + kDeltaHeaderBytes;
  auto count_before = [&](int64_t s) {
    uint32_t c = h.changed;
    if (s < segs) std::memcpy(&c, prefix + 4 * s, 4);
    return int64_t(c);
  };
  // Segments with a change carry a bitmap, in order; then the values.
  int64_t with_bitmap = 0;
  for (int64_t s = 0; s < segs; ++s) {
    const int64_t n = count_before(s + 1) - count_before(s);
    if (n < 0 || n > kDeltaSegmentWords) throw bad("segment " + std::to_string(s) + "'s count disagrees with its neighbours'");
    with_bitmap += n > 0;
  }
  const int64_t index = fixed + kBitmapBytes * with_bitmap;
  if (count_before(0) != 0 || record_bytes != index + 2 * int64_t(h.changed))
    throw bad("header says " + std::to_string(h.changed) + " changed words in " + std::to_string(with_bitmap) +
              " segments, so " + std::to_string(index + 2 * int64_t(h.changed)) + " bytes");
  const uint8_t* bm = record + fixed;
  const uint8_t* values = record + index;
  int64_t taken = 0;
  for (int64_t s = 0; s < segs; ++s) {
    const int64_t n = count_before(s + 1) - count_before(s);
    if (n == 0) continue;
    const int64_t lo = s * kDeltaSegmentWords, words_here = std::min(words - lo, kDeltaSegmentWords);
    int64_t here = 0;
    for (int64_t b = 0; b < kBitmapBytes; ++b) {
      unsigned bits = bm[b];
      if (bits == 0) continue;
      if (8 * b + (32 - std::countl_zero(bits)) > words_here) throw bad("a changed word past the chunk's end");
      here += std::popcount(bits);
      if (here > n) throw bad("segment " + std::to_string(s) + "'s count disagrees with its bitmap");
      for (; bits != 0; bits &= bits - 1) {
        const int64_t i = lo + 8 * b + std::countr_zero(bits);
        std::memcpy(kept + 2 * i, values + 2 * taken, 2);
        ++taken;
      }
    }
    if (here != n) throw bad("segment " + std::to_string(s) + "'s count disagrees with its bitmap");
    bm += kBitmapBytes;
  }
  return DeltaRecord{record_bytes, index, 2 * taken, false};
}

}  // namespace shardsync
