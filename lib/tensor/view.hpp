// Strided views with factored dimensions: the algebra that turns a recorded op chain into
// one address computation. Each logical dimension is a list of (size, stride) sub-dimensions
// in row-major order, so reshape of a transposed view (Llama-4's q/k permutation) stays a
// view: nothing is ever copied to evaluate a chain. An op that cannot be expressed throws
// ViewError with the reason.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace shardsync {

class ViewError : public Error {
 public:
  using Error::Error;
};

struct SubDim {
  int64_t size = 1;
  int64_t stride = 0;
  bool operator==(const SubDim&) const = default;
};

class SubView {
 public:
  SubView() = default;
  static SubView contiguous(const std::vector<int64_t>& shape, int64_t offset = 0);
  // A plain strided view (one sub-dimension per dimension); strides must be >= 0.
  static SubView strided(int64_t offset, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);

  int64_t offset() const { return offset_; }
  int ndim() const { return int(dims_.size()); }
  int64_t size(int dim) const;
  std::vector<int64_t> shape() const;
  int64_t numel() const;
  // The sub-dimensions of one logical dimension.
  std::vector<SubDim> subs(int dim) const { return dims_[size_t(dim)]; }
  // Plain strides, valid only when every dimension is a single sub-dimension.
  bool is_simple() const;
  std::vector<int64_t> simple_strides() const;

  void narrow(int dim, int64_t start, int64_t length);
  void select(int dim, int64_t index);
  void transpose(int d0, int d1);
  void permute(const std::vector<int64_t>& order);
  void reshape(std::vector<int64_t> shape);  // one -1 allowed
  void unsqueeze(int dim);
  void squeeze(int dim);
  int normalize_dim(int dim, int ndim_plus = 0) const;  // python-style negative dims

 private:
  int64_t offset_ = 0;
  std::vector<std::vector<SubDim>> dims_;  // outer to inner sub-dimensions per dimension
};

// A copy between two views of equal shape, flattened to (size, src_stride, dst_stride)
// loops, coalesced, outermost first. Element units; the caller scales by dtype size.
struct CopyDim {
  int64_t size = 1;
  int64_t src_stride = 0;
  int64_t dst_stride = 0;
  bool operator==(const CopyDim&) const = default;
};

struct CopyDesc {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t numel = 0;
  std::vector<CopyDim> dims;
  bool operator==(const CopyDesc&) const = default;
};

CopyDesc make_copy_desc(const SubView& src, const SubView& dst);
// Merges an outer loop into its inner one where it steps exactly over it on both sides,
// and drops loops of one iteration (an empty copy keeps one loop of 0, a single element one
// of 1).
void coalesce(CopyDesc& d);
// Packed destination: the source view written contiguously at dst_offset.
CopyDesc make_pack_desc(const SubView& src, int64_t dst_offset);

// Whether the copy's two innermost loops transpose: the destination runs along the last, the
// source along the one before (what the CPU and GPU copies move in tiles).
bool copy_transposes(const CopyDesc& d);

// CPU execution of a copy descriptor: the twin that defines the GPU kernels' semantics.
void execute_copy(const CopyDesc& d, const void* src, void* dst, int64_t elem_bytes);
// One innermost loop of a copy with strides other than 1 (elements of eb bytes).
void copy_strided_run(const CopyDim& in, const std::byte* src, std::byte* dst, int64_t eb);
// Visits every (src_index, dst_index) pair in row-major order of the destination.
template <class F>
void for_each_index(const CopyDesc& d, F&& f) {
  std::vector<int64_t> idx(d.dims.size(), 0);
  if (d.numel == 0) return;
  for (int64_t n = 0; n < d.numel; ++n) {
    int64_t s = d.src_offset, t = d.dst_offset;
    for (size_t k = 0; k < d.dims.size(); ++k) {
      s += idx[k] * d.dims[k].src_stride;
      t += idx[k] * d.dims[k].dst_stride;
    }
    f(s, t);
    for (size_t k = d.dims.size(); k-- > 0;) {
      if (++idx[k] < d.dims[k].size) break;
      idx[k] = 0;
    }
  }
}
// Visits the innermost runs: f(src_start, dst_start, length, src_stride, dst_stride).
template <class F>
void for_each_run(const CopyDesc& d, F&& f) {
  if (d.numel == 0) return;
  const CopyDim& in = d.dims.back();
  size_t outer = d.dims.size() - 1;
  std::vector<int64_t> idx(outer, 0);
  int64_t runs = d.numel / in.size;
  for (int64_t r = 0; r < runs; ++r) {
    int64_t s = d.src_offset, t = d.dst_offset;
    for (size_t k = 0; k < outer; ++k) {
      s += idx[k] * d.dims[k].src_stride;
      t += idx[k] * d.dims[k].dst_stride;
    }
    f(s, t, in.size, in.src_stride, in.dst_stride);
    for (size_t k = outer; k-- > 0;) {
      if (++idx[k] < d.dims[k].size) break;
      idx[k] = 0;
    }
  }
}
// The [lo, hi) range of source element indices a descriptor reads.
void source_range(const CopyDesc& d, int64_t* lo, int64_t* hi);
void dest_range(const CopyDesc& d, int64_t* lo, int64_t* hi);

}  // namespace shardsync
