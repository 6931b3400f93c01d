// The synthetic weights (lib/device/synth_hash.hpp): finite, bell-shaped around zero with the
// tensor's scale, a few outliers per 128 x 128 block, the same value in bf16 and fp32, and no
// e4m3fn NaN among 1-byte elements; synth_fill (the CPU twin of the GPU synth kernel) writes
// exactly synth_element.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

#include "device/device.hpp"
#include "device/fp8.hpp"
#include "device/synth_hash.hpp"

namespace shardsync {
namespace {

constexpr int64_t kElems = 1 << 20;

TEST(Synth, Bf16WeightsAreFiniteBellShapedWithFewOutliers) {
  for (int32_t tensor : {0, 7, 123, 4096}) {
    const uint64_t seed = synth_seed(tensor, 3);
    const double unit = std::ldexp(1.0, -int(11 + (seed >> 62)));  // the tensor's factor
    int64_t outliers = 0, within_sigma = 0, nonzero = 0;
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < kElems; ++i) {
      const auto b = uint16_t(synth_element(seed, i, 2));
      const float v = bf16_to_float(b);
      ASSERT_TRUE(std::isfinite(v)) << "tensor " << tensor << " element " << i;
      const double s = double(v) / unit;  // the draw, times 16 for an outlier
      ASSERT_EQ(s, std::trunc(s)) << "not a whole multiple of the tensor's factor: element " << i;
      ASSERT_LE(std::fabs(s), 191.0 * 16);
      if (std::fabs(s) > 191) {
        ++outliers;
        continue;
      }
      sum += s;
      sum_sq += s * s;
      within_sigma += std::fabs(s) <= 64;
      nonzero += s != 0;
    }
    const double n = double(kElems - outliers), mean = sum / n, sigma = std::sqrt(sum_sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.5) << "tensor " << tensor;
    EXPECT_NEAR(sigma, 64.0, 1.0) << "tensor " << tensor;
    // The halved Irwin-Hall sum of three bytes: 67.1% within one sigma (exact count over the
    // 2^24 byte triples); a uniform draw has 57.7%, a normal 68.3%.
    EXPECT_NEAR(double(within_sigma) / n, 0.671, 0.01) << "tensor " << tensor;
    EXPECT_GT(nonzero, kElems * 9 / 10);
    // One in 4,096 is an outlier (256 expected); the 13% whose draw is within +-11 stay under
    // 191 and are counted with the rest (222 expected here).
    EXPECT_GT(outliers, 150) << "tensor " << tensor;
    EXPECT_LT(outliers, 300) << "tensor " << tensor;
  }
}

TEST(Synth, ScalesDifferBetweenTensorsAndVersionsChangeValues) {
  std::vector<uint64_t> factors;
  int64_t same = 0;
  for (int32_t t = 0; t < 64; ++t) {
    factors.push_back(synth_seed(t, 1) >> 62);
    for (int64_t i = 0; i < 256; ++i) same += synth_element(synth_seed(t, 1), i, 2) == synth_element(synth_seed(t, 2), i, 2);
  }
  for (uint64_t f = 0; f < 4; ++f) EXPECT_NE(std::count(factors.begin(), factors.end(), f), 0) << "factor 2^-" << 11 + f;
  EXPECT_LT(same, 64 * 256 / 50);  // two versions share a value by chance (about 1 in 150)
}

TEST(Synth, Fp32IsTheSameValueAsBf16) {
  const uint64_t seed = synth_seed(5, 9);
  for (int64_t i = 0; i < kElems; i += 7) {
    const uint32_t f = synth_element(seed, i, 4);
    ASSERT_EQ(f, synth_element(seed, i, 2) << 16) << "element " << i;
    ASSERT_TRUE(std::isfinite(bits_to_float(f)));
  }
}

TEST(Synth, BytesAreNeverE4m3NaN) {
  int counts[256] = {};
  for (int64_t i = 0; i < kElems; ++i) {
    const uint32_t b = synth_element(synth_seed(1, 1), i, 1);
    ASSERT_LT(b, 256u);
    ++counts[b];
  }
  EXPECT_EQ(counts[0x7f], 0);
  EXPECT_EQ(counts[0xff], 0);
  EXPECT_GT(counts[0x7e], counts[0x01]);  // 0x7f folded into 0x7e
  EXPECT_GT(counts[0x00], 0);
}

// synth_fill runs a vectorized (AVX2 where the CPU has it) copy of the loop: its bits must be
// synth_element's, element by element, also across 2^32 (the index's high word enters the hash)
// and for runs that end off a vector's width.
TEST(Synth, FillWritesSynthElementForEverySize) {
  const uint64_t seed = synth_seed(42, 7);
  for (int64_t first : {int64_t(500), (int64_t(1) << 32) - 301})
    for (int64_t eb : {1, 2, 4, 8}) {
      std::vector<uint8_t> buf(size_t(1003 * eb), 0xcc);
      synth_fill(buf.data(), seed, first, 1003, eb);
      for (int64_t i = 0; i < 1003; ++i) {
        uint64_t got = 0;
        std::memcpy(&got, buf.data() + i * eb, size_t(eb));
        ASSERT_EQ(got, uint64_t(synth_element(seed, first + i, eb))) << eb << "-byte element " << first + i;
      }
    }
}

}  // namespace
}  // namespace shardsync
