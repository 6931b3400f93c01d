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
#include "view_chains.hpp"

namespace shardsync {
namespace {
using namespace test;

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
