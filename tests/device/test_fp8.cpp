// Block FP8 (lib/device/fp8.hpp): the e4m3fn conversion against a brute-force nearest-value
// search over the 127 finite magnitudes (every bf16 input, random fp32, every tie and its
// neighbours), and the block quantizer's rules (amax, zero blocks, Inf, NaN, partial blocks).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/device.hpp"
#include "device/fp8.hpp"

namespace shardsync {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The e4m3fn code of x by definition: clamp to +-448, then the finite code whose value is
// nearest, ties to the even code (an even mantissa); NaN -> 0x7f with the sign.
uint8_t reference_code(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | kE4m3NanCode;
  const double a = std::min(std::fabs(double(x)), 448.0);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= kE4m3MaxCode; ++c) {
    const double d = std::fabs(double(e4m3_to_float(uint8_t(c))) - a);
    if (d < best_d || (d == best_d && c % 2 == 0)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(sign | best);
}

TEST(Fp8, CodesHaveTheirValues) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7.0f * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(uint8_t(c))), c) << "code " << c;  // -0 keeps its sign
  }
}

TEST(Fp8, EveryBf16MatchesTheNearestValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float x = bf16_to_float(uint16_t(b));
    ASSERT_EQ(e4m3_from_float(x), reference_code(x)) << "bf16 0x" << std::hex << b;
  }
}

TEST(Fp8, TiesGoToEvenAndTheirNeighboursToTheNearer) {
  int ties = 0;
  for (int c = 0; c < kE4m3MaxCode; ++c) {
    const float lo = e4m3_to_float(uint8_t(c)), hi = e4m3_to_float(uint8_t(c + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: a few significant bits
    for (float sgn : {1.0f, -1.0f}) {
      const uint8_t s = sgn < 0 ? 0x80 : 0x00;
      EXPECT_EQ(e4m3_from_float(sgn * mid), uint8_t(s | (c % 2 == 0 ? c : c + 1)))
          << "tie after code " << c;
      EXPECT_EQ(e4m3_from_float(sgn * std::nextafter(mid, 0.0f)), uint8_t(s | c))
          << "just under the tie after " << c;
      EXPECT_EQ(e4m3_from_float(sgn * std::nextafter(mid, 1000.0f)), uint8_t(s | (c + 1)))
          << "just over the tie after " << c;
    }
    ++ties;
  }
  EXPECT_EQ(ties, 126);
}

TEST(Fp8, RandomFloatsMatchTheNearestValue) {
  std::mt19937 rng(20);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    // Exponents around the e4m3 range (2^-12 .. 2^10), random significands and signs.
    const uint32_t u = (bits(rng) & 0x807fffffu) | ((115u + bits(rng) % 23u) << 23);
    const float x = from_bits(u);
    ASSERT_EQ(e4m3_from_float(x), reference_code(x)) << x;
  }
}

TEST(Fp8, SaturatesAndKeepsNaN) {
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7e);
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7e);  // would round up to 480, which is NaN's code
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7e);
  EXPECT_EQ(e4m3_from_float(-1e30f), 0xfe);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::denorm_min()), 0x80);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // half of 2^-9: tie to 0
  EXPECT_EQ(e4m3_from_float(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);  // just over it
}

// bf16 bits of a float that bf16 holds exactly.
uint16_t bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  EXPECT_EQ(u & 0xffffu, 0u) << x << " is not a bf16 value";
  return uint16_t(u >> 16);
}

TEST(Fp8, BlocksFollowTheRules) {
  // 130 x 260: blocks of 128 x 128 and partial ones along both sides (2 x 3 scales).
  const int64_t rows = 130, cols = 260;
  std::vector<uint16_t> w(size_t(rows * cols), bf16(0.0f));
  auto at = [&](int64_t r, int64_t c) -> uint16_t& { return w[size_t(r * cols + c)]; };
  // Block (0, 0): values up to 3.5, with a tie. Block (0, 1): all zeros. Block (0, 2): an Inf
  // and a NaN beside 1.0 and -0.5. Block (1, 0) (two rows): a bf16 subnormal and -7.
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 0; c < 128; ++c) at(r, c) = bf16(float((r * 7 + c) % 15 - 7) * 0.5f);
  at(0, 256) = bf16(std::numeric_limits<float>::infinity());
  at(1, 256) = bf16(std::numeric_limits<float>::quiet_NaN());
  at(2, 257) = bf16(1.0f);
  at(3, 259) = bf16(-0.5f);
  at(128, 0) = uint16_t(0x0001);  // the smallest bf16 subnormal
  at(129, 1) = bf16(-7.0f);
  std::vector<uint8_t> q(w.size(), 0xaa);
  std::vector<float> s(6, -1.0f);
  cpu_quantize_fp8_blocks(w.data(), rows, cols, q.data(), s.data());
  auto code = [&](int64_t r, int64_t c) { return q[size_t(r * cols + c)]; };

  EXPECT_EQ(s[0], 3.5f / 448.0f);  // amax 3.5
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 0; c < 128; ++c) {
      const float x = bf16_to_float(at(r, c));
      ASSERT_EQ(code(r, c), e4m3_from_float(std::fmin(std::fmax(x / s[0], -448.0f), 448.0f)))
          << r << "," << c;
      if (x == 3.5f) {
        ASSERT_EQ(code(r, c), 0x7e);  // the block's amax is 448 exactly
      }
      if (x == -3.5f) {
        ASSERT_EQ(code(r, c), 0xfe);
      }
    }
  EXPECT_EQ(s[1], 1.0f);  // a zero block: scale 1, codes 0
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t c = 128; c < 256; ++c) ASSERT_EQ(code(r, c), 0x00);
  EXPECT_EQ(s[2], 1.0f / 448.0f);  // amax over the finite values: 1.0
  EXPECT_EQ(code(0, 256), 0x7e);   // Inf saturates
  EXPECT_EQ(code(1, 256), 0x7f);   // NaN stays NaN
  EXPECT_EQ(code(2, 257), 0x7e);
  EXPECT_EQ(code(3, 259), e4m3_from_float(-0.5f / (1.0f / 448.0f)));
  EXPECT_EQ(s[3], 7.0f / 448.0f);  // rows 128-129, columns 0-127
  EXPECT_EQ(code(129, 1), 0xfe);
  EXPECT_EQ(code(128, 0), 0x00);  // 2^-133 / (7 / 448) is far under 2^-10
  EXPECT_EQ(s[4], 1.0f);
  EXPECT_EQ(s[5], 1.0f);
}

// The CPU device's quantize_fp8 on a strided view (rows src_ld apart, codes dst_ld apart,
// scales scale_ld apart) gives what the dense quantizer gives on a copy of the view, and
// writes nothing outside it.
TEST(Fp8, StridedJobsMatchDenseOnes) {
  const int64_t rows = 200, cols = 300, src_ld = 333, dst_ld = 310, scale_ld = 5;
  std::mt19937 rng(7);
  std::vector<uint16_t> w(size_t(rows * src_ld));
  for (auto& x : w) x = uint16_t(0x3c00 + rng() % 0x0800);  // finite, of several exponents
  std::vector<uint16_t> dense(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dense[size_t(r * cols + c)] = w[size_t(r * src_ld + c)];
  std::vector<uint8_t> want(size_t(rows * cols));
  std::vector<float> want_s(2 * 3);
  cpu_quantize_fp8_blocks(dense.data(), rows, cols, want.data(), want_s.data());
  std::vector<uint8_t> got(size_t(rows * dst_ld), 0xaa);
  std::vector<float> got_s(size_t(2 * scale_ld), -1.0f);
  auto dev = make_cpu_device();
  dev->quantize_fp8({QuantJob{reinterpret_cast<const uint8_t*>(w.data()), src_ld, got.data(),
                              dst_ld, got_s.data(), scale_ld, rows, cols}});
  dev->synchronize();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dst_ld; ++c)
      ASSERT_EQ(got[size_t(r * dst_ld + c)], c < cols ? want[size_t(r * cols + c)] : 0xaa)
          << r << "," << c;
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < scale_ld; ++bc)
      ASSERT_EQ(got_s[size_t(br * scale_ld + bc)], bc < 3 ? want_s[size_t(br * 3 + bc)] : -1.0f)
          << br << "," << bc;
}

}  // namespace
}  // namespace shardsync
