// Chunk scheduling: how a copy is cut into pieces that fit a chunk.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/schedule.hpp"
#include "tensor/view.hpp"

namespace shardsync {
namespace {

// The pieces, run one after another, write what the whole copy writes, and no element twice.
void expect_pieces_cover(const CopyDesc& whole, int64_t max_elems, int64_t src_elems, int64_t dst_elems,
                         const std::string& what) {
  std::vector<uint16_t> src(static_cast<size_t>(src_elems));
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t(i * 40503u + 7);
  std::vector<uint16_t> want(size_t(dst_elems), 0xffff), got = want;
  execute_copy(whole, src.data(), want.data(), 2);
  int64_t numel = 0;
  for (const CopyDesc& p : split_copy(whole, max_elems)) {
    EXPECT_LE(p.numel, max_elems) << what;
    numel += p.numel;
    execute_copy(p, src.data(), got.data(), 2);
  }
  EXPECT_EQ(numel, whole.numel) << what;
  EXPECT_EQ(want, got) << what;
}

TEST(Schedule, SplitCopyPiecesCoverTheCopyOnce) {
  // A Llama-4-like transposing pack (rows of a fused expert tensor's columns), a column
  // slice (rows of short runs), and a contiguous run, each cut at several chunk sizes.
  SubView t = SubView::contiguous({3, 300, 520});
  t.select(0, 1);
  t.transpose(0, 1);
  t.narrow(0, 100, 260);
  SubView cols = SubView::contiguous({700, 384});
  cols.narrow(1, 96, 96);
  SubView run = SubView::contiguous({5000});
  for (int64_t max_elems : {int64_t(700), int64_t(9000), int64_t(40000), int64_t(1) << 20}) {
    const std::string at = " at " + std::to_string(max_elems);
    expect_pieces_cover(make_pack_desc(t, 3), max_elems, 3 * 300 * 520, t.numel() + 3, "transpose" + at);
    expect_pieces_cover(make_pack_desc(cols, 0), max_elems, 700 * 384, cols.numel(), "columns" + at);
    expect_pieces_cover(make_pack_desc(run, 1), max_elems, 5000, 5001, "run" + at);
  }
}

TEST(Schedule, SplitCopyCutsWholeMultiplesOf128Rows) {
  SubView t = SubView::contiguous({50, 1000});
  t.transpose(0, 1);  // 1000 rows of 50 (a column of the source each), packed
  const CopyDesc d = make_pack_desc(t, 0);
  ASSERT_EQ(d.dims.size(), 2u);
  ASSERT_EQ(d.dims[0].size, 1000);
  // 409 rows fit a piece: pieces of 384, the last holds the rest.
  std::vector<CopyDesc> pieces = split_copy(d, 409 * 50);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].dims[0].size, 384);
  EXPECT_EQ(pieces[1].dims[0].size, 384);
  EXPECT_EQ(pieces[2].dims[0].size, 1000 - 2 * 384);
  // Fewer than 128 rows fit: pieces as large as fit.
  pieces = split_copy(d, 100 * 50);
  ASSERT_EQ(pieces.size(), 10u);
  EXPECT_EQ(pieces[0].dims[0].size, 100);
}

// Each piece packed into its chunk and unpacked from it (with the CPU device's copy) writes
// what the piece writes straight from the source; the pack fills its chunk exactly.
void expect_round_trip(const CopyDesc& whole, int64_t max_elems, int64_t src_elems, int64_t dst_elems,
                       const std::string& what) {
  std::vector<uint16_t> src(static_cast<size_t>(src_elems));
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t((i * 40503u + 7) % 65521);  // never 0xffff
  for (const CopyDesc& p : split_copy(whole, max_elems)) {
    std::vector<uint16_t> want(size_t(dst_elems), 0xffff), got = want, chunk(size_t(p.numel) + 8, 0xffff);
    execute_copy(p, src.data(), want.data(), 2);
    execute_copy_fast(pack_copy(p), src.data(), chunk.data(), 2);
    for (size_t i = 0; i < chunk.size(); ++i)
      ASSERT_EQ(chunk[i] == 0xffff, i >= size_t(p.numel)) << what << ": chunk element " << i;
    execute_copy_fast(unpack_copy(p), chunk.data(), got.data(), 2);
    EXPECT_EQ(want, got) << what;
  }
}

TEST(Schedule, TransposesHappenInTheUnpackFromTheDenseChunk) {
  SubView t = SubView::contiguous({3, 300, 520});  // as above: rows of a fused expert's columns
  t.select(0, 1);
  t.transpose(0, 1);
  t.narrow(0, 100, 260);
  SubView cols = SubView::contiguous({700, 384});
  cols.narrow(1, 96, 96);
  const CopyDesc d = make_pack_desc(t, 3), c = make_pack_desc(cols, 0);
  for (int64_t max_elems : {int64_t(700), int64_t(9000), int64_t(1) << 20}) {
    const std::string at = " at " + std::to_string(max_elems);
    expect_round_trip(d, max_elems, 3 * 300 * 520, t.numel() + 3, "transpose" + at);
    expect_round_trip(c, max_elems, 700 * 384, cols.numel(), "columns" + at);
  }
  // The transpose's pack reads runs of source rows (a source row's 260 elements, 520 apart)
  // into the chunk in source order; its unpack walks the chunk 260 apart into runs of the
  // destination.
  const CopyDesc pack = pack_copy(d), unpack = unpack_copy(d);
  ASSERT_EQ(pack.dims.size(), 2u);
  EXPECT_EQ(pack.dims[0].size, 300);
  EXPECT_EQ(pack.dims[0].src_stride, 520);
  EXPECT_EQ(pack.dims[0].dst_stride, 260);
  EXPECT_EQ(pack.dims[1].src_stride, 1);
  EXPECT_EQ(pack.dims[1].dst_stride, 1);
  EXPECT_EQ(pack.dst_offset, 0);
  ASSERT_EQ(unpack.dims.size(), 2u);
  EXPECT_EQ(unpack.dims[1].dst_stride, 1);
  EXPECT_EQ(unpack.dims[1].src_stride, 260);
  EXPECT_EQ(unpack.dims[0].src_stride, 1);
  EXPECT_EQ(unpack.src_offset, 0);
  EXPECT_EQ(unpack.dst_offset, d.dst_offset);
  // Other copies keep the destination's order in the chunk: the unpack reads it front to back.
  const CopyDesc cu = unpack_copy(c);
  EXPECT_EQ(cu.dims.back().src_stride, 1);
  EXPECT_EQ(cu.dims.front().src_stride, cols.shape()[1]);
  EXPECT_EQ(pack_copy(c).dims.front().dst_stride, cols.shape()[1]);
}

}  // namespace
}  // namespace shardsync
