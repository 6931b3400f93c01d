// Test helpers shared by the view and fast-copy tests: an iota tensor, PyTorch-semantics
// application of one op to a RealTensor, and random op chains.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

#include "tensor/ops.hpp"
#include "tensor/real_tensor.hpp"
#include "tensor/view.hpp"

namespace shardsync {
namespace test {

inline RealTensor iota(const std::vector<int64_t>& shape) {
  return RealTensor::generate(DType::kF32, shape, [](int64_t i) {
    float f = float(i);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return uint64_t(bits);
  });
}

// Applies the same op to a RealTensor (PyTorch semantics) and returns it.
inline RealTensor apply_real(const RealTensor& t, const Op& op) {
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

inline Op random_op(std::mt19937_64& rng, const std::vector<int64_t>& shape) {
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

}  // namespace test
}  // namespace shardsync
