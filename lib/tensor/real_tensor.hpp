// A strided tensor over real bytes with PyTorch's semantics: narrow, select, transpose,
// permute, unsqueeze, squeeze and chunk are views; view() fails unless the strides allow
// it; reshape() and contiguous() copy when they must. Running the loaders on it gives the
// reference result that recorded plans are checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/dtype.hpp"

namespace shardsync {

class RealTensor {
 public:
  RealTensor() = default;
  static RealTensor zeros(DType dtype, const std::vector<int64_t>& shape);
  // Fills every element from f(linear index) as raw bits (low dtype_bytes bytes).
  template <class F>
  static RealTensor generate(DType dtype, const std::vector<int64_t>& shape, F&& f) {
    RealTensor t = zeros(dtype, shape);
    int64_t eb = dtype_bytes(dtype);
    for (int64_t i = 0; i < t.numel(); ++i) {
      uint64_t bits = f(i);
      std::byte* p = t.storage_->data() + i * eb;
      for (int64_t b = 0; b < eb; ++b) p[b] = std::byte((bits >> (8 * b)) & 0xff);
    }
    return t;
  }

  DType dtype() const { return dtype_; }
  int dim() const { return int(shape_.size()); }
  int64_t size(int d) const { return shape_[size_t(norm(d))]; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t numel() const;
  bool is_contiguous() const;
  const std::byte* storage() const { return storage_->data(); }
  std::byte* storage() { return storage_->data(); }
  int64_t storage_bytes() const { return int64_t(storage_->size()); }

  RealTensor narrow(int d, int64_t start, int64_t length) const;
  RealTensor select(int d, int64_t index) const;
  RealTensor view(const std::vector<int64_t>& shape) const;
  RealTensor reshape(const std::vector<int64_t>& shape) const;
  RealTensor transpose(int d0, int d1) const;
  RealTensor t() const { return transpose(0, 1); }
  RealTensor permute(const std::vector<int64_t>& order) const;
  RealTensor flatten(int start, int end) const;
  RealTensor unsqueeze(int d) const;
  RealTensor squeeze(int d) const;
  std::vector<RealTensor> chunk(int64_t chunks, int d) const;
  std::vector<RealTensor> split(int64_t split_size, int d) const;
  RealTensor contiguous() const;
  RealTensor index_select(int d, const std::vector<int64_t>& indices) const;

  // Sinks: write through this view.
  void copy_(const RealTensor& src);
  void zero_();
  // An op that reads values (not recordable).
  bool any_nonzero() const;

 private:
  int norm(int d, int extra = 0) const;
  std::vector<int64_t> resolve_shape(std::vector<int64_t> shape) const;
  template <class F>
  void for_each_offset(F&& f) const;

  std::shared_ptr<std::vector<std::byte>> storage_;
  DType dtype_ = DType::kBF16;
  int64_t offset_ = 0;
  std::vector<int64_t> shape_, strides_;
};

}  // namespace shardsync
