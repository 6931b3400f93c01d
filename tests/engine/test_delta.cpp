// Delta records (device/delta.hpp): the trainer's encoding of a freshly packed chunk against
// the chunk as last sent, and the inference rank's application of it to the chunk as last
// received, bring both copies to the fresh chunk at any density; what a record costs; and
// that a record the receiver cannot apply is refused with the reason, never applied.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/error.hpp"
#include "device/delta.hpp"

namespace shardsync {
namespace {

struct Pair {
  std::vector<uint8_t> sent, received, record;
  uint64_t version = 0;
  bool started = false;
  std::vector<uint8_t> scratch;
  explicit Pair(int64_t bytes)
      : sent(size_t(bytes)), received(size_t(bytes)), record(size_t(delta_record_capacity(bytes))) {}

  // Packs `fresh` as the trainer does (after the header), encodes, applies; returns the record.
  DeltaRecord sync(const std::vector<uint8_t>& fresh, bool whole = false) {
    std::memcpy(record.data() + kDeltaHeaderBytes, fresh.data(), fresh.size());
    ++version;
    DeltaRecord r = delta_encode(record.data(), int64_t(fresh.size()), sent.data(), version - 1, version,
                                 whole || !started, scratch);
    DeltaRecord a = delta_apply(record.data(), r.bytes, received.data(), int64_t(fresh.size()), started, version - 1);
    EXPECT_EQ(a.bytes, r.bytes);
    EXPECT_EQ(a.whole, r.whole);
    EXPECT_EQ(a.index_bytes, r.index_bytes);
    started = true;
    return r;
  }
};

// Changes `density` of the 16-bit words of `v` (uniformly, seeded).
void change(std::vector<uint8_t>& v, double density, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution pick(density);
  for (size_t i = 0; i + 1 < v.size(); i += 2)
    if (pick(rng)) {
      v[i] = uint8_t(v[i] + 1 + rng() % 250);
      v[i + 1] ^= uint8_t(rng());
    }
}

TEST(Delta, BothCopiesFollowTheChunkAtEveryDensity) {
  for (int64_t bytes : {int64_t(2), int64_t(2000), int64_t(2048), int64_t(2 * 1024 + 6), int64_t(1) << 20}) {
    Pair p(bytes);
    std::vector<uint8_t> fresh(static_cast<size_t>(bytes));
    change(fresh, 1.0, 1);
    DeltaRecord first = p.sync(fresh);
    EXPECT_TRUE(first.whole) << "the first record of a chunk is whole";
    uint32_t seed = 2;
    for (double density : {0.0, 0.02, 0.2, 1.0, 0.0}) {
      change(fresh, density, seed++);
      DeltaRecord r = p.sync(fresh);
      ASSERT_EQ(p.sent, fresh) << bytes << " bytes, density " << density;
      ASSERT_EQ(p.received, fresh) << bytes << " bytes, density " << density;
      if (density == 1.0) {
        EXPECT_TRUE(r.whole) << "a delta of every word is larger than the chunk";
      }
      if (density == 0.0 && bytes > 1024) {
        EXPECT_FALSE(r.whole);
        EXPECT_EQ(r.bytes, delta_index_bytes(bytes)) << "nothing changed: the index alone";
      }
    }
  }
}

// The bound: at 2% of words changed a record is at most 10% of the chunk.
TEST(Delta, TwoPercentCostsUnderTenPercent) {
  const int64_t bytes = 4 << 20;
  Pair p(bytes);
  std::vector<uint8_t> fresh(static_cast<size_t>(bytes));
  change(fresh, 1.0, 7);
  p.sync(fresh);
  change(fresh, 0.02, 8);
  DeltaRecord r = p.sync(fresh);
  EXPECT_FALSE(r.whole);
  EXPECT_LE(double(r.bytes), 0.10 * double(bytes));
  EXPECT_NEAR(double(r.changed_bytes) / double(bytes), 0.02, 0.002);
  EXPECT_EQ(r.bytes, r.index_bytes + r.changed_bytes);
  EXPECT_EQ(p.received, fresh);
}

// Changes that cluster (rows of a tensor) touch few segments: only those carry a bitmap.
TEST(Delta, ClusteredChangesCarryFewBitmaps) {
  const int64_t bytes = 4 << 20, words = bytes / 2;
  Pair p(bytes);
  std::vector<uint8_t> fresh(static_cast<size_t>(bytes));
  change(fresh, 1.0, 9);
  p.sync(fresh);
  const int64_t first = words / 3, n = words / 50;  // 2% of the words, one run
  for (int64_t i = first; i < first + n; ++i) fresh[size_t(2 * i)] ^= 0x5a;
  DeltaRecord r = p.sync(fresh);
  const int64_t touched = (first + n - 1) / kDeltaSegmentWords - first / kDeltaSegmentWords + 1;
  EXPECT_EQ(r.index_bytes, delta_index_bytes(bytes) + 128 * touched);
  EXPECT_EQ(r.changed_bytes, 2 * n);
  EXPECT_LE(double(r.bytes), 0.025 * double(bytes));
  EXPECT_EQ(p.received, fresh);
}

TEST(Delta, AnAnchorGoesWhole) {
  Pair p(4096);
  std::vector<uint8_t> fresh(4096, 3);
  p.sync(fresh);
  DeltaRecord r = p.sync(fresh, /*whole=*/true);
  EXPECT_TRUE(r.whole);
  EXPECT_EQ(r.bytes, kDeltaHeaderBytes + 4096);
  EXPECT_EQ(p.received, fresh);
}

// Records a receiver cannot apply: each refused with its reason.
TEST(Delta, RefusesWhatItCannotApply) {
  const int64_t bytes = 8192;
  Pair p(bytes);
  std::vector<uint8_t> fresh(size_t(bytes), 1);
  p.sync(fresh);
  change(fresh, 0.05, 3);
  std::memcpy(p.record.data() + kDeltaHeaderBytes, fresh.data(), fresh.size());
  const DeltaRecord r = delta_encode(p.record.data(), bytes, p.sent.data(), 1, 2, false, p.scratch);
  ASSERT_FALSE(r.whole);
  auto refused = [&](std::vector<uint8_t> rec, int64_t n, bool have, uint64_t held, const char* why) {
    std::vector<uint8_t> kept = p.received;
    try {
      delta_apply(rec.data(), n, kept.data(), bytes, have, held);
      ADD_FAILURE() << "applied a record that should be refused: " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::vector<uint8_t> rec(p.record.begin(), p.record.begin() + r.bytes);
  refused(rec, r.bytes, false, 0, "never received");
  refused(rec, r.bytes, true, 5, "holds version 5");
  refused(rec, r.bytes - 2, true, 1, "segments, so");
  refused(rec, 16, true, 1, "shorter than its 32-byte header");
  auto bad_magic = rec;
  bad_magic[0] ^= 1;
  refused(bad_magic, r.bytes, true, 1, "no DLT1 header");
  auto bad_count = rec;
  bad_count[kDeltaHeaderBytes + 4] ^= 1;  // segment 1's prefix count
  refused(bad_count, r.bytes, true, 1, "count disagrees");
  // A changed word past the end of a chunk of 1000 words (its one segment has bits for 1024).
  std::vector<uint8_t> small_fresh(2000, 1), small_sent(2000, 1), small_rec(size_t(delta_record_capacity(2000)));
  small_fresh[10] = 9;
  std::memcpy(small_rec.data() + kDeltaHeaderBytes, small_fresh.data(), 2000);
  std::vector<uint8_t> scratch;
  const DeltaRecord s = delta_encode(small_rec.data(), 2000, small_sent.data(), 1, 2, false, scratch);
  ASSERT_FALSE(s.whole);
  const int64_t bitmap_at = delta_index_bytes(2000);  // the one segment's bitmap
  small_rec[size_t(bitmap_at + 127)] |= 0x80;  // word 1023 of a 1000-word chunk
  std::vector<uint8_t> kept(2000, 1);
  EXPECT_THROW(delta_apply(small_rec.data(), s.bytes, kept.data(), 2000, true, 1), Error);
}

}  // namespace
}  // namespace shardsync
