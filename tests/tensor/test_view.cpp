// The view algebra (SubView + CopyDesc, used to replay plans) against RealTensor, which
// follows PyTorch's semantics op by op, on random op chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>

#include "tensor/ops.hpp"
#include "tensor/real_tensor.hpp"
#include "tensor/recording_tensor.hpp"
#include "tensor/view.hpp"

namespace shardsync {
namespace {

RealTensor iota(const std::vector<int64_t>& shape) {
  return RealTensor::generate(DType::kF32, shape, [](int64_t i) {
    float f = float(i);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return uint64_t(bits);
  });
}

// Applies the same op to a RealTensor (PyTorch semantics) and returns it.
RealTensor apply_real(const RealTensor& t, const Op& op) {
  const auto& a = op.args;
  switch (op.kind) {
    case OpKind::kNarrow: return t.narrow(int(a[0]), a[1], a[2]);
    case OpKind::kSelect: return t.select(int(a[0]), a[1]);
    case OpKind::kView: return t.view(a);
    case OpKind::kReshape: return t.reshape(a);
    case OpKind::kTranspose: return t.transpose(int(a[0]), int(a[1]));
    case OpKind::kPermute: return t.permute(a);
    case OpKind::kFlatten: return t.flatten(int(a[0]), int(a[1]));
    case OpKind::kUnsqueeze: return t.unsqueeze(int(a[0]));
    case OpKind::kSqueeze: return t.squeeze(int(a[0]));
    case OpKind::kChunk: return t.chunk(a[0], int(a[1]))[size_t(a[2])];
    case OpKind::kSplit: return t.split(a[0], int(a[1]))[size_t(a[2])];
    case OpKind::kContiguous: return t.contiguous();
    case OpKind::kIndexRange: return t.narrow(int(a[0]), a[1], a[2]);
  }
  return t;
}

Op random_op(std::mt19937_64& rng, const std::vector<int64_t>& shape) {
  auto pick = [&](int64_t n) { return int64_t(rng() % uint64_t(std::max<int64_t>(n, 1))); };
  int nd = int(shape.size());
  std::vector<int64_t> divisible_dims;
  for (int d = 0; d < nd; ++d)
    if (shape[size_t(d)] % 2 == 0 && shape[size_t(d)] > 1) divisible_dims.push_back(d);
  switch (rng() % 8) {
    case 0: {
      int d = int(pick(nd));
      int64_t n = shape[size_t(d)];
      int64_t start = pick(n), len = 1 + pick(n - start);
      return {OpKind::kNarrow, {d, start, len}};
    }
    case 1:
      if (nd >= 2) return {OpKind::kTranspose, {pick(nd), pick(nd)}};
      return {OpKind::kContiguous, {}};
    case 2: {  // reshape: split a divisible dim in two
      if (divisible_dims.empty()) return {OpKind::kContiguous, {}};
      int d = int(divisible_dims[size_t(pick(int64_t(divisible_dims.size())))]);
      std::vector<int64_t> s;
      for (int i = 0; i < nd; ++i) {
        if (i == d) {
          s.push_back(2);
          s.push_back(shape[size_t(i)] / 2);
        } else {
          s.push_back(shape[size_t(i)]);
        }
      }
      return {OpKind::kReshape, s};
    }
    case 3:
      if (nd >= 2) {
        int s = int(pick(nd - 1));
        return {OpKind::kFlatten, {s, s + 1}};
      }
      return {OpKind::kUnsqueeze, {0}};
    case 4: {
      std::vector<int64_t> order(static_cast<size_t>(nd));
      for (int i = 0; i < nd; ++i) order[size_t(i)] = i;
      std::shuffle(order.begin(), order.end(), rng);
      return {OpKind::kPermute, order};
    }
    case 5:
      if (!divisible_dims.empty()) {
        int d = int(divisible_dims[0]);
        return {OpKind::kChunk, {2, d, pick(2)}};
      }
      return {OpKind::kUnsqueeze, {int64_t(pick(nd + 1))}};
    case 6:
      if (nd >= 2) return {OpKind::kSelect, {pick(nd), 0}};
      return {OpKind::kContiguous, {}};
    default:
      return {OpKind::kSplit, {2, pick(nd), 0}};
  }
}

TEST(View, RandomChainsMatchPyTorchSemantics) {
  std::mt19937_64 rng(12345);
  int compared = 0, inexpressible = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<int64_t> shape = {int64_t(2 + rng() % 5), int64_t(2 + rng() % 6), int64_t(1 + rng() % 4)};
    RealTensor base = iota(shape);
    RealTensor real = base;
    SubView view = SubView::contiguous(shape);
    bool ok = true;
    int steps = 1 + int(rng() % 6);
    for (int s = 0; s < steps && ok; ++s) {
      Op op = random_op(rng, real.shape());
      try {
        apply_op(view, op);
      } catch (const ViewError&) {
        ok = false;  // not a strided view (documented limit); skip this chain
        ++inexpressible;
        break;
      }
      real = apply_real(real, op);
      ASSERT_EQ(view.shape(), real.shape()) << format_op(op);
    }
    if (!ok) continue;
    // Pack the view contiguously with the compiled descriptor; compare with real.contiguous().
    std::vector<float> packed(size_t(view.numel()));
    CopyDesc d = make_pack_desc(view, 0);
    execute_copy(d, base.storage(), packed.data(), 4);
    RealTensor c = real.contiguous();
    const float* expect = reinterpret_cast<const float*>(c.storage()) + c.offset();
    for (size_t i = 0; i < packed.size(); ++i) ASSERT_EQ(packed[i], expect[i]) << "trial " << trial;
    ++compared;
  }
  EXPECT_GT(compared, 2500);
  EXPECT_LT(inexpressible, 500);
}

// execute_copy_fast (what the CPU device runs) against the reference execute_copy: pack and
// unpack descriptors of random chains at every element size, then the cases its fast paths
// take (streaming stores at unaligned offsets, tiled transposes with ragged edges).
void expect_fast_matches_reference(const CopyDesc& d, int64_t eb, int64_t src_elems, int64_t dst_elems,
                                   const std::string& what) {
  std::vector<std::byte> src(size_t(src_elems * eb));
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(uint8_t(i * 131 + (i >> 8) * 7 + 1));
  std::vector<std::byte> ref(size_t(dst_elems * eb), std::byte{0x5a}), fast = ref;
  execute_copy(d, src.data(), ref.data(), eb);
  execute_copy_fast(d, src.data(), fast.data(), eb);
  ASSERT_EQ(ref.size(), fast.size());
  auto bad = std::mismatch(ref.begin(), ref.end(), fast.begin());
  ASSERT_TRUE(bad.first == ref.end()) << what << ": first differing byte " << (bad.first - ref.begin());
}

TEST(View, FastCopyMatchesReferenceOnRandomChains) {
  std::mt19937_64 rng(777);
  const int64_t sizes[] = {1, 2, 4, 8, 6};
  int compared = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    std::vector<int64_t> shape = {int64_t(2 + rng() % 9), int64_t(2 + rng() % 40), int64_t(1 + rng() % 37)};
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
    const int64_t eb = sizes[trial % 5], base = shape[0] * shape[1] * shape[2], off = int64_t(rng() % 5);
    const std::string what = "trial " + std::to_string(trial) + " eb " + std::to_string(eb);
    expect_fast_matches_reference(make_pack_desc(view, off), eb, base, view.numel() + off, what + " pack");
    SubView packed = SubView::contiguous(view.shape());
    expect_fast_matches_reference(make_copy_desc(packed, view), eb, view.numel(), base, what + " unpack");
    ++compared;
  }
  EXPECT_GT(compared, 1200);
}

TEST(View, FastCopyMatchesReferenceOnItsFastPaths) {
  // Streaming stores: 3 MiB rows at odd element offsets on both sides.
  for (int64_t eb : {1, 2, 4}) {
    SubView v = SubView::contiguous({3, (int64_t(1) << 20) / eb + 3});
    v.narrow(1, 1, v.shape()[1] - 2);
    expect_fast_matches_reference(make_pack_desc(v, 5), eb, v.shape()[0] * ((int64_t(1) << 20) / eb + 3),
                                  v.numel() + 5, "streaming eb " + std::to_string(eb));
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
    expect_fast_matches_reference(make_copy_desc(SubView::contiguous(all.shape()), all), eb, all.numel(),
                                  5 * 96 * 64, "transposing unpack eb " + std::to_string(eb));
  }
  // A large transpose: streaming sizes do not change the transposing path's result.
  SubView big = SubView::contiguous({1024, 640});
  big.transpose(0, 1);
  expect_fast_matches_reference(make_pack_desc(big, 0), 2, 1024 * 640, big.numel(), "large transpose");
}

TEST(View, FastCopyTransposeTilesMatchReferenceWithEitherKernel) {
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
      const std::string what = fast_copy_transpose_kernel() + ": " + std::to_string(c.count) + " x " + std::to_string(c.rows);
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

TEST(View, BatchedFastCopyTakesColumnsOfTheSameRowsTogether) {
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
      {0, 0, 300, 0, 96},   {0, 0, 300, 96, 96},   {0, 0, 300, 192, 96}, {0, 0, 300, 288, 96},
      {0, 0, 300, 5, 96},   // overlaps the first one's columns: reads may overlap
      {0, 0, 300, 100, 50}, // another run length
      {0, 0, 100, 0, 96},   // another row count
      {1, 0, 300, 96, 96},  // another source
      {0, 10, 40, 7, 64, true},
      {0, 0, 150, 0, 96},   {0, 150, 150, 0, 96},  // the same columns of other rows: apart
      {2, 0, 2048, 0, 384}, {2, 0, 2048, 384, 384}, {2, 0, 2048, 768, 384}, {2, 0, 2048, 1152, 384},  // streaming
      {2, 0, 2048, 384, 384},  // the same columns again (a tensor replicated on two ranks)
  };
  const int64_t in_group = 11;  // a's four slices, the overlapping one, the wide one; c's five
  std::mt19937_64 rng(99);
  for (int64_t eb : {1, 2, 4, 8}) {
    std::vector<std::vector<std::byte>> src(3);
    for (int k = 0; k < 3; ++k) {
      src[size_t(k)].resize(size_t(shapes[k][0] * shapes[k][1] * eb));
      for (size_t i = 0; i < src[size_t(k)].size(); ++i) src[size_t(k)][i] = std::byte(uint8_t(i * 131 + (i >> 8) * 7 + k));
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
    ASSERT_TRUE(bad.first == ref.end()) << "eb " << eb << ": first differing byte " << (bad.first - ref.begin());
  }
}

TEST(View, Llama4RopePermutationStaysAView) {
  // view(heads, hd/2, 2, h).transpose(1, 2).reshape(heads*hd, h), then a TP narrow of whole heads.
  const int64_t heads = 4, hd = 8, h = 3;
  RealTensor w = iota({heads * hd, h});
  RealTensor real = w.view({heads, hd / 2, 2, h}).transpose(1, 2).reshape({heads * hd, h}).narrow(0, hd * 2, hd * 2);
  SubView v = SubView::contiguous({heads * hd, h});
  v.reshape({heads, hd / 2, 2, h});
  v.transpose(1, 2);
  v.reshape({heads * hd, h});
  v.narrow(0, hd * 2, hd * 2);
  std::vector<float> packed(size_t(v.numel()));
  execute_copy(make_pack_desc(v, 0), w.storage(), packed.data(), 4);
  RealTensor c = real.contiguous();
  EXPECT_EQ(std::memcmp(packed.data(), c.storage() + c.offset() * 4, packed.size() * 4), 0);
  // Within a head, new row j is old row 2j (j < hd/2) and 2(j - hd/2) + 1 otherwise.
  EXPECT_EQ(packed[size_t(1 * h)], float((2 * hd + 2) * h));
  EXPECT_EQ(packed[size_t((hd / 2) * h)], float((2 * hd + 1) * h));
}

TEST(View, CoalescesContiguousRuns) {
  SubView v = SubView::contiguous({8, 16});
  v.narrow(0, 2, 4);
  CopyDesc d = make_pack_desc(v, 0);
  ASSERT_EQ(d.dims.size(), 1u);  // whole rows are one run
  EXPECT_EQ(d.dims[0].size, 64);
  EXPECT_EQ(d.src_offset, 32);
  SubView c = SubView::contiguous({8, 16});
  c.narrow(1, 4, 4);
  CopyDesc dc = make_pack_desc(c, 0);
  ASSERT_EQ(dc.dims.size(), 2u);  // column slice: 8 runs of 4
  EXPECT_EQ(dc.dims[0], (CopyDim{8, 16, 4}));
  EXPECT_EQ(dc.dims[1], (CopyDim{4, 1, 1}));
}

TEST(View, InexpressibleNarrowIsReported) {
  SubView v = SubView::contiguous({4, 6});
  v.transpose(0, 1);
  v.reshape({24});  // factored: (6, stride 1), (4, stride 6)
  EXPECT_THROW(v.narrow(0, 1, 5), ViewError);
  EXPECT_NO_THROW(v.narrow(0, 4, 8));
}

class FailingSink : public RecordSink {
 public:
  void on_copy(const RecordingTensor&, const RecordingTensor&) override { ++copies; }
  void on_zero(const RecordingTensor&) override {}
  std::string context() const override { return "loader test_loader, tensor model.x.weight"; }
  int copies = 0;
};

TEST(RecordingTensor, RecordsChainsAndRefusesValueOps) {
  FailingSink sink;
  RecordingTensor w = RecordingTensor::source(&sink, 7, DType::kBF16, {16, 4});
  RecordingTensor p = RecordingTensor::destination(&sink, 0, DType::kBF16, {8, 4});
  RecordingTensor piece = w.narrow(0, 8, 8);
  ASSERT_EQ(piece.ops().size(), 1u);
  EXPECT_EQ(format_op(piece.ops()[0]), "narrow(0, 8, 8)");
  p.copy_(piece);
  EXPECT_EQ(sink.copies, 1);
  try {
    (void)w.any_nonzero();
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("test_loader"), std::string::npos) << m;
    EXPECT_NE(m.find("model.x.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("reads tensor values"), std::string::npos) << m;
  }
  EXPECT_THROW(w.index_select(0, {0, 2}), Error);   // a gather
  EXPECT_NO_THROW(w.index_select(0, {3, 4, 5}));    // a range
  EXPECT_THROW(p.copy_(w), Error);                  // shape mismatch
  EXPECT_THROW(w.narrow(0, 10, 10), Error);         // out of range, with context
}

}  // namespace
}  // namespace shardsync
