// The CPU device's fast copy (device/fast_copy.cpp) held to the reference execute_copy:
// random view chains, its fast paths, the tiled transposes with either kernel, and batches
// that take columns of the same rows together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "../tensor/view_chains.hpp"
#include "device/fast_copy.hpp"

namespace shardsync {
namespace {

using namespace test;

// execute_copy_fast (what the CPU device runs) against the reference execute_copy: pack and
// unpack descriptors of random chains at every element size, then the cases its fast paths
// take (streaming stores at unaligned offsets, tiled transposes with ragged edges).
void expect_fast_matches_reference(const CopyDesc& d, int64_t eb, int64_t src_elems,
                                   int64_t dst_elems, const std::string& what) {
  std::vector<std::byte> src(size_t(src_elems * eb));
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(uint8_t(i * 131 + (i >> 8) * 7 + 1));
  std::vector<std::byte> ref(size_t(dst_elems * eb), std::byte{0x5a}), fast = ref;
  execute_copy(d, src.data(), ref.data(), eb);
  execute_copy_fast(d, src.data(), fast.data(), eb);
  ASSERT_EQ(ref.size(), fast.size());
  auto bad = std::mismatch(ref.begin(), ref.end(), fast.begin());
  ASSERT_TRUE(bad.first == ref.end())
      << what << ": first differing byte " << (bad.first - ref.begin());
}

TEST(FastCopy, MatchesReferenceOnRandomChains) {
  std::mt19937_64 rng(777);
  const int64_t sizes[] = {1, 2, 4, 8, 6};
  int compared = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::vector<int64_t> shape = {int64_t(2 + rng() % 9), int64_t(2 + rng() % 40),
                                  int64_t(1 + rng() % 37)};
    SubView view = SubView::contiguous(shape);
    bool ok = true;
    for (int s = 0, steps = 1 + int(rng() % 6); s < steps && ok; ++s) {
      try {
        apply_op(view, random_op(rng, view.shape()));
      } catch (const ViewError&) {
        ok = false;
      }
    }
    if (!ok) continue;
    const int64_t eb = sizes[trial % 5], base = shape[0] * shape[1] * shape[2],
                  off = int64_t(rng() % 5);
    const std::string what = "trial " + std::to_string(trial) + " eb " + std::to_string(eb);
    expect_fast_matches_reference(make_pack_desc(view, off), eb, base, view.numel() + off,
                                  what + " pack");
    SubView packed = SubView::contiguous(view.shape());
    expect_fast_matches_reference(make_copy_desc(packed, view), eb, view.numel(), base,
                                  what + " unpack");
    ++compared;
  }
  EXPECT_GT(compared, 1200);
}

TEST(FastCopy, MatchesReferenceOnItsFastPaths) {
  // Streaming stores: 3 MiB rows at odd element offsets on both sides.
  for (int64_t eb : {1, 2, 4}) {
    SubView v = SubView::contiguous({3, (int64_t(1) << 20) / eb + 3});
    v.narrow(1, 1, v.shape()[1] - 2);
    expect_fast_matches_reference(make_pack_desc(v, 5), eb,
                                  v.shape()[0] * ((int64_t(1) << 20) / eb + 3), v.numel() + 5,
                                  "streaming eb " + std::to_string(eb));
  }
  // A transpose with ragged tiles, as Llama-4's experts are [E, hidden, 2*inter] transposed.
  for (int64_t eb : {1, 2, 4, 8}) {
    SubView v = SubView::contiguous({3, 77, 130});
    v.select(0, 1);
    v.transpose(0, 1);
    v.narrow(0, 33, 65);
    expect_fast_matches_reference(make_pack_desc(v, 1), eb, 3 * 77 * 130, v.numel() + 1,
                                  "transpose eb " + std::to_string(eb));
    SubView all = SubView::contiguous({5, 96, 64});
    all.permute({0, 2, 1});
    expect_fast_matches_reference(make_pack_desc(all, 0), eb, 5 * 96 * 64, all.numel(),
                                  "batched transpose eb " + std::to_string(eb));
    expect_fast_matches_reference(make_copy_desc(SubView::contiguous(all.shape()), all), eb,
                                  all.numel(), 5 * 96 * 64,
                                  "transposing unpack eb " + std::to_string(eb));
  }
  // A large transpose: streaming sizes do not change the transposing path's result.
  SubView big = SubView::contiguous({1024, 640});
  big.transpose(0, 1);
  expect_fast_matches_reference(make_pack_desc(big, 0), 2, 1024 * 640, big.numel(),
                                "large transpose");
}

TEST(FastCopy, TransposeTilesMatchReferenceWithEitherKernel) {
  // 16-bit transposes go through 32 x 64 or 32 x 128 tiles (AVX2 or SSE2 registers), leaving
  // ragged edges to 8 x 8 blocks; destination rows here are not 16-byte aligned, and the
  // larger copies (over 1 MiB) write the tiles with streaming stores.
  struct Case {
    int64_t rows, cols, first, count, offset;
  };
  const Case cases[] = {
      {333, 1000, 5, 990, 0},   // 990 x 333: ragged on both sides, odd destination rows
      {700, 1000, 0, 1000, 1},  // 1000 x 700 (1.4 MB, streaming), shifted by an element
      {650, 2048, 0, 2048, 0},  // whole tiles one way, 650 = 5 x 128 + 10 the other
      {127, 4096, 0, 4096, 3},  // too narrow for a tile: 8 x 8 blocks only
  };
  const bool avx2_before = fast_copy_allow_avx2(true);
  const int width_before = fast_copy_set_tile_width(0);
  for (int combo = 0; combo < 4; ++combo) {
    fast_copy_allow_avx2(combo & 1);
    fast_copy_set_tile_width(combo & 2 ? 64 : 128);
    for (const Case& c : cases) {
      SubView v = SubView::contiguous({2, c.rows, c.cols});
      v.select(0, 1);
      v.transpose(0, 1);
      v.narrow(0, c.first, c.count);
      const std::string what = fast_copy_transpose_kernel() + ": " + std::to_string(c.count) +
                               " x " + std::to_string(c.rows);
      // 256 elements of slack after each destination: a tile running past the end shows.
      expect_fast_matches_reference(make_pack_desc(v, c.offset), 2, 2 * c.rows * c.cols,
                                    v.numel() + c.offset + 256, what + " pack");
      expect_fast_matches_reference(make_copy_desc(SubView::contiguous(v.shape()), v), 2, v.numel(),
                                    2 * c.rows * c.cols + 256, what + " transposing unpack");
    }
  }
  fast_copy_allow_avx2(avx2_before);
  fast_copy_set_tile_width(width_before);
  EXPECT_THROW(fast_copy_set_tile_width(96), std::invalid_argument);
}

TEST(FastCopy, BatchTakesColumnsOfTheSameRowsTogether) {
  // A trainer's pack of one tensor for several TP consumers: column slices of the same rows,
  // given in shuffled order, next to copies that must not join them (another run length,
  // another row count, another source, a transpose, strided destinations).
  struct Slice {
    int src;  // 0: a (300 x 392), 1: b (same shape, other buffer), 2: c (2048 x 1536)
    int64_t row0, rows, col0, cols;
    bool transpose = false;
  };
  const int64_t shapes[3][2] = {{300, 392}, {300, 392}, {2048, 1536}};
  const std::vector<Slice> slices = {
      {0, 0, 300, 0, 96},       {0, 0, 300, 96, 96},
      {0, 0, 300, 192, 96},     {0, 0, 300, 288, 96},
      {0, 0, 300, 5, 96},    // overlaps the first one's columns: reads may overlap
      {0, 0, 300, 100, 50},  // another run length
      {0, 0, 100, 0, 96},    // another row count
      {1, 0, 300, 96, 96},   // another source
      {0, 10, 40, 7, 64, true}, {0, 0, 150, 0, 96},
      {0, 150, 150, 0, 96},  // the same columns of other rows: apart
      {2, 0, 2048, 0, 384},     {2, 0, 2048, 384, 384},
      {2, 0, 2048, 768, 384},   {2, 0, 2048, 1152, 384},  // streaming
      {2, 0, 2048, 384, 384},  // the same columns again (a tensor replicated on two ranks)
  };
  const int64_t in_group = 11;  // a's four slices, the overlapping one, the wide one; c's five
  std::mt19937_64 rng(99);
  for (int64_t eb : {1, 2, 4, 8}) {
    std::vector<std::vector<std::byte>> src(3);
    for (int k = 0; k < 3; ++k) {
      src[size_t(k)].resize(size_t(shapes[k][0] * shapes[k][1] * eb));
      for (size_t i = 0; i < src[size_t(k)].size(); ++i)
        src[size_t(k)][i] = std::byte(uint8_t(i * 131 + (i >> 8) * 7 + k));
    }
    std::vector<CopyDesc> descs;
    std::vector<int> of;
    int64_t at = 1;  // odd element offsets: destinations not 16-byte aligned
    for (const Slice& sl : slices) {
      SubView v = SubView::contiguous({shapes[sl.src][0], shapes[sl.src][1]});
      v.narrow(0, sl.row0, sl.rows);
      v.narrow(1, sl.col0, sl.cols);
      if (sl.transpose) v.transpose(0, 1);
      descs.push_back(make_pack_desc(v, at));
      of.push_back(sl.src);
      at += v.numel() + 3;
    }
    // An unpack into a wider matrix (strided destination rows) from the packed first slice.
    SubView wide = SubView::contiguous({300, 500});
    wide.narrow(1, 11, 96);
    descs.push_back(make_copy_desc(SubView::contiguous(wide.shape()), wide));
    descs.back().dst_offset += at;
    of.push_back(0);
    at += 300 * 500;
    // Columns of a's rows into a wider matrix: one of a's group, with strided destination rows.
    SubView cols = SubView::contiguous({300, 392});
    cols.narrow(1, 192, 96);
    descs.push_back(make_copy_desc(cols, wide));
    descs.back().dst_offset += at;
    of.push_back(0);
    at += 300 * 500;
    std::vector<std::byte> ref(size_t(at * eb), std::byte{0x5a}), fast = ref;
    std::vector<CopyTask> batch;
    for (size_t i = 0; i < descs.size(); ++i) {
      execute_copy(descs[i], src[size_t(of[i])].data(), ref.data(), eb);
      batch.push_back(CopyTask{&descs[i], src[size_t(of[i])].data(), fast.data(), eb});
    }
    std::shuffle(batch.begin(), batch.end(), rng);
    EXPECT_EQ(execute_copies_fast(batch), in_group) << "eb " << eb;
    auto bad = std::mismatch(ref.begin(), ref.end(), fast.begin());
    ASSERT_TRUE(bad.first == ref.end())
        << "eb " << eb << ": first differing byte " << (bad.first - ref.begin());
  }
}

}  // namespace
}  // namespace shardsync
