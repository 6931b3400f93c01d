// How synthetic weights change between versions (--update-density, synth_hash.hpp): the
// fraction of elements (or rows) that take a new value at each version, that the rest keep the
// value of the version they last changed at, and that synth_fill (the CPU twin of the kernels)
// writes exactly synth_value for uniform and clustered changes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "device/device.hpp"
#include "device/synth_hash.hpp"

namespace shardsync {
namespace {

constexpr int64_t kUpdateElems = 1 << 18;

uint32_t below(double density) { return uint32_t(std::llround(std::ldexp(density, 32))); }

TEST(Updates, EveryUnitIsTheValuesOfTheVersion) {
  for (uint64_t v : {1u, 2u, 9u}) {
    const SynthKey k = synth_key(5, v, kEveryUnit, 0);
    for (int64_t i = 0; i < 4096; ++i) {
      ASSERT_EQ(synth_value(k, i, 2), synth_element(synth_seed(5, v), i, 2)) << "version " << v << " element " << i;
      ASSERT_EQ(last_change(k, i), v);
    }
  }
}

TEST(Updates, DensityZeroKeepsVersionZero) {
  const SynthKey k = synth_key(3, 7, 0, 0);
  for (int64_t i = 0; i < 4096; ++i) ASSERT_EQ(synth_value(k, i, 2), synth_element(synth_seed(3, 0), i, 2));
}

// At each version about `density` of the elements change, each to its value at that version,
// and every other element keeps its value of the version before.
TEST(Updates, UniformDensityChangesThatFractionAndKeepsTheRest) {
  for (double density : {0.02, 0.3}) {
    for (uint64_t v = 1; v <= 6; ++v) {
      const SynthKey now = synth_key(11, v, below(density), 0), before = synth_key(11, v - 1, below(density), 0);
      int64_t changed = 0;
      for (int64_t i = 0; i < kUpdateElems; ++i) {
        const bool moved = last_change(now, i) == v;
        changed += moved;
        if (moved) {
          ASSERT_EQ(synth_value(now, i, 2), synth_element(synth_seed(11, v), i, 2));
        } else {
          ASSERT_EQ(last_change(now, i), last_change(before, i)) << "element " << i << " at version " << v;
          ASSERT_EQ(synth_value(now, i, 2), synth_value(before, i, 2));
        }
      }
      const double got = double(changed) / double(kUpdateElems);
      EXPECT_NEAR(got, density, 4 * std::sqrt(density * (1 - density) / double(kUpdateElems)) + 1e-9)
          << "density " << density << " version " << v;
    }
  }
}

// A unit changes once every 1 / density versions (here exactly 4), at its own phase.
TEST(Updates, EachUnitChangesOnceEveryOneOverDensityVersions) {
  const uint32_t quarter = uint32_t(1) << 30;
  for (int64_t i = 0; i < 2000; ++i) {
    std::vector<uint64_t> at;
    for (uint64_t v = 1; v <= 40; ++v)
      if (last_change(synth_key(4, v, quarter, 0), i) == v) at.push_back(v);
    ASSERT_GE(at.size(), 9u) << "element " << i;
    ASSERT_LE(at.front(), 4u) << "element " << i;
    for (size_t j = 1; j < at.size(); ++j) ASSERT_EQ(at[j] - at[j - 1], 4u) << "element " << i;
  }
}

// Clustered: a row's elements change together, and about `density` of the rows change.
TEST(Updates, RowsChangeWhole) {
  const int64_t row = 384, rows = 2048;
  const SynthKey k = synth_key(2, 4, below(0.05), row);
  int64_t changed_rows = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t first = last_change(k, r * row);
    for (int64_t c = 1; c < row; ++c) ASSERT_EQ(last_change(k, r * row + c), first) << "row " << r << " column " << c;
    changed_rows += first == 4;
  }
  EXPECT_NEAR(double(changed_rows) / double(rows), 0.05, 4 * std::sqrt(0.05 * 0.95 / double(rows)));
}

TEST(Updates, SynthFillWritesSynthValue) {
  for (int64_t unit : {int64_t(0), int64_t(1000)}) {
    const SynthKey k = synth_key(9, 5, below(0.1), unit);
    for (int64_t eb : {2, 4}) {
      const int64_t first = 777, n = 5000;
      std::vector<uint8_t> got(size_t(n * eb));
      synth_fill(got.data(), k, first, n, eb);
      for (int64_t i = 0; i < n; ++i) {
        uint32_t v = 0;
        std::memcpy(&v, got.data() + i * eb, size_t(eb));
        ASSERT_EQ(v, synth_value(k, first + i, eb)) << "unit " << unit << ", " << eb << "-byte element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace shardsync
