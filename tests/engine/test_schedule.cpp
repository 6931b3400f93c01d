// Chunk scheduling: how a copy is cut into pieces that fit a chunk.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "device/fast_copy.hpp"
#include "engine/schedule.hpp"
#include "model/catalog.hpp"
#include "plan/quant.hpp"

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

// The pieces packed into one chunk in one launch and unpacked from it in another, as the CPU
// device runs them (execute_copies_fast: pieces reading the same source rows go row by row
// together), write what the whole copy writes, with every transpose kernel and tile width;
// the pack writes each piece's span of the chunk and nothing else.
void expect_round_trip(const CopyDesc& whole, int64_t max_elems, int64_t src_elems, int64_t dst_elems,
                       const std::string& what) {
  std::vector<uint16_t> src(static_cast<size_t>(src_elems));
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint16_t((i * 40503u + 7) % 65521);  // never 0xffff
  std::vector<uint16_t> want(size_t(dst_elems), 0xffff);
  execute_copy(whole, src.data(), want.data(), 2);
  const std::vector<CopyDesc> pieces = split_copy(whole, max_elems);
  std::vector<CopyDesc> packs, unpacks;
  std::vector<int64_t> at;  // each piece's chunk offset, 16-byte aligned with a gap
  int64_t n = 0;
  for (const CopyDesc& p : pieces) {
    packs.push_back(pack_copy(p));
    unpacks.push_back(unpack_copy(p));
    at.push_back(n);
    n += (p.numel + 7) / 8 * 8 + 8;
  }
  std::vector<bool> covered(size_t(n), false);
  for (size_t k = 0; k < pieces.size(); ++k)
    for (int64_t e = 0; e < pieces[k].numel; ++e) covered[size_t(at[k] + e)] = true;
  const bool avx2_before = fast_copy_allow_avx2(true);
  const int width_before = fast_copy_set_tile_width(0);
  for (int combo = 0; combo < 4; ++combo) {
    fast_copy_allow_avx2(combo & 1);
    fast_copy_set_tile_width(combo & 2 ? 64 : 128);
    const std::string how = what + ((combo & 1) ? ", avx2 " : ", sse2 ") + ((combo & 2) ? "64" : "128");
    std::vector<uint16_t> chunk(size_t(n), 0xffff), got(size_t(dst_elems), 0xffff);
    std::vector<CopyTask> pack, unpack;
    for (size_t k = 0; k < pieces.size(); ++k) {
      pack.push_back(CopyTask{&packs[k], src.data(), chunk.data() + at[k], 2});
      unpack.push_back(CopyTask{&unpacks[k], chunk.data() + at[k], got.data(), 2});
    }
    execute_copies_fast(pack);
    int64_t wrong = 0;
    for (size_t i = 0; i < chunk.size(); ++i) wrong += (chunk[i] != 0xffff) != covered[i];
    EXPECT_EQ(wrong, 0) << how << ": chunk elements written outside the pieces' spans or left unwritten";
    execute_copies_fast(unpack);
    EXPECT_EQ(want, got) << how;
  }
  fast_copy_allow_avx2(avx2_before);
  fast_copy_set_tile_width(width_before);
}

TEST(Schedule, TransposesHappenInTheUnpackFromTheDenseChunk) {
  SubView t = SubView::contiguous({3, 300, 520});  // as above: rows of a fused expert's columns
  t.select(0, 1);
  t.transpose(0, 1);
  t.narrow(0, 100, 260);
  SubView experts = SubView::contiguous({3, 300, 520});  // every expert's, three loops
  experts.transpose(1, 2);
  experts.narrow(1, 100, 260);
  SubView cols = SubView::contiguous({700, 384});
  cols.narrow(1, 96, 96);
  const CopyDesc d = make_pack_desc(t, 3), e = make_pack_desc(experts, 5), c = make_pack_desc(cols, 0);
  ASSERT_EQ(e.dims.size(), 3u);
  // Pieces of 2, 30, 128 and all 260 destination rows (the last three reach the tiles).
  for (int64_t max_elems : {int64_t(700), int64_t(9000), int64_t(128 * 300), int64_t(1) << 20}) {
    const std::string at = " at " + std::to_string(max_elems);
    expect_round_trip(d, max_elems, 3 * 300 * 520, t.numel() + 3, "transpose" + at);
    expect_round_trip(e, max_elems, 3 * 300 * 520, experts.numel() + 5, "experts" + at);
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

// FP8 on the wire: a piece of a quantized tensor travels as its codes (one byte an element)
// and, 16-byte aligned after them, the fp32 scales of its 128 x 128 blocks; pieces are cut at
// multiples of 128 rows so every piece is whole blocks of the source. A source of 1000 x 384
// (the last block row partial), as one tensor's gathered slab.
TEST(Schedule, Fp8PiecesAreWholeBlocksOfCodesAndScales) {
  const ModelSpec model = load_model("qwen3-8b");
  int32_t hf = -1;
  for (int32_t i = 0; i < int32_t(model.params().size()) && hf < 0; ++i)
    if (fp8_quantized_hf(model.param(i))) hf = i;
  ASSERT_GE(hf, 0);
  std::vector<Fp8Source> fp8(model.params().size());
  fp8[size_t(hf)] = Fp8Source{1000, 384};
  auto piece = [&](int64_t src_offset, std::vector<CopyDim> dims) {
    ChunkPiece p;
    p.hf = hf;
    p.copy.src_offset = src_offset;
    p.copy.numel = 1;
    for (const CopyDim& d : dims) p.copy.numel *= d.size;
    p.copy.dims = std::move(dims);
    return p;
  };
  // Every row, one contiguous run; chunks that hold two block rows (and not three).
  const int64_t two_rows = 2 * (128 * 384 + 4 * 3);
  std::vector<Chunk> chunks = make_chunks(model, {piece(0, {CopyDim{1000 * 384, 1, 1}})}, two_rows + 15, &fp8);
  ASSERT_EQ(chunks.size(), 4u);
  int64_t codes = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    ASSERT_EQ(chunks[k].pieces.size(), 1u);
    const ChunkPiece& p = chunks[k].pieces[0];
    EXPECT_TRUE(p.fp8);
    ASSERT_EQ(p.copy.dims.size(), 2u);  // rows, then a run: what the quantizer takes
    const int64_t rows = k < 3 ? 256 : 1000 - 768;
    EXPECT_EQ(p.copy.dims[0].size, rows);
    EXPECT_EQ(p.copy.dims[0].src_stride, 384);
    EXPECT_EQ(p.copy.src_offset, int64_t(k) * 256 * 384);
    EXPECT_EQ(p.copy.dst_offset, int64_t(k) * 256 * 384);
    EXPECT_EQ(fp8_scales_at(p), (rows * 384 + 15) / 16 * 16);
    EXPECT_EQ(p.bytes, fp8_scales_at(p) + 4 * ((rows + 127) / 128) * 3);
    codes += p.copy.numel;
  }
  EXPECT_EQ(codes, 1000 * 384);
  // A tensor of whole blocks costs what the simulator's fp8_wire_bytes counts.
  std::vector<Fp8Source> whole = fp8;
  whole[size_t(hf)] = Fp8Source{1024, 384};
  int64_t bytes = 0;
  for (const Chunk& c : make_chunks(model, {piece(0, {CopyDim{1024 * 384, 1, 1}})}, 4 << 20, &whole))
    for (const ChunkPiece& p : c.pieces) bytes += p.bytes;
  EXPECT_EQ(bytes, fp8_wire_bytes(1024 * 384));
  // A box of columns [128, 384) of rows [128, 640): its own blocks.
  chunks = make_chunks(model, {piece(128 * 384 + 128, {CopyDim{512, 384, 256}, CopyDim{256, 1, 1}})}, 4 << 20, &fp8);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].pieces[0].bytes, 512 * 256 + 4 * 4 * 2);
  // Refused: a box that starts inside a block, in either dimension; a copy that is no box;
  // a chunk smaller than 128 rows of codes and scales.
  auto refused = [&](const ChunkPiece& p, int64_t chunk, const std::string& says) {
    try {
      make_chunks(model, {p}, chunk, &fp8);
      ADD_FAILURE() << "not refused: " << says;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(piece(64 * 384, {CopyDim{128, 384, 384}, CopyDim{384, 1, 1}}), 4 << 20, "covers rows [64, 192) of 1000");
  refused(piece(100, {CopyDim{128, 384, 200}, CopyDim{200, 1, 1}}), 4 << 20, "covers columns [100, 300) of 384");
  refused(piece(0, {CopyDim{384, 1, 128}, CopyDim{128, 384, 1}}), 4 << 20, "is not a box of rows and columns");
  refused(piece(0, {CopyDim{1000 * 384, 1, 1}}), 128 * 384, "--chunk");
  // Without an FP8 source the same copy is a bf16 piece.
  chunks = make_chunks(model, {piece(0, {CopyDim{1024, 1, 1}})}, 4 << 20, nullptr);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_FALSE(chunks[0].pieces[0].fp8);
  EXPECT_EQ(chunks[0].pieces[0].bytes, 2048);
}

}  // namespace
}  // namespace shardsync
