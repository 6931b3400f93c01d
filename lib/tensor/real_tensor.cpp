#include "tensor/real_tensor.hpp"

#include <cstring>
#include <optional>

#include "common/error.hpp"
#include "common/table.hpp"
#include "tensor/ops.hpp"

namespace shardsync {

namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(shape[i], 1);
  return s;
}

// PyTorch's rule for view(): the new strides, or nothing when the view needs a copy.
std::optional<std::vector<int64_t>> view_strides(const std::vector<int64_t>& old_shape,
                                                 const std::vector<int64_t>& old_strides,
                                                 const std::vector<int64_t>& new_shape) {
  std::vector<int64_t> out(new_shape.size(), 1);
  int64_t numel = 1;
  for (int64_t s : old_shape) numel *= s;
  if (numel == 0 || old_shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base = old_strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t td = int64_t(old_shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_shape[size_t(td)];
    if (td == 0 || (old_shape[size_t(td) - 1] != 1 && old_strides[size_t(td) - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[size_t(view_d)] == 1)) {
        out[size_t(view_d)] = view_numel * chunk_base;
        view_numel *= new_shape[size_t(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base = old_strides[size_t(td) - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

RealTensor RealTensor::zeros(DType dtype, const std::vector<int64_t>& shape) {
  RealTensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.storage_ = std::make_shared<std::vector<std::byte>>(size_t(t.numel() * dtype_bytes(dtype)), std::byte{0});
  return t;
}

int64_t RealTensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

bool RealTensor::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

int RealTensor::norm(int d, int extra) const {
  int n = dim() + extra;
  int r = d < 0 ? d + n : d;
  if (r < 0 || r >= std::max(n, 1)) throw Error("dimension " + std::to_string(d) + " out of range for shape " + fmt_shape(shape_));
  return r;
}

RealTensor RealTensor::narrow(int d, int64_t start, int64_t length) const {
  int k = norm(d);
  if (start < 0 || length < 0 || start + length > shape_[size_t(k)])
    throw Error("narrow outside shape " + fmt_shape(shape_));
  RealTensor t = *this;
  t.offset_ += start * strides_[size_t(k)];
  t.shape_[size_t(k)] = length;
  return t;
}

RealTensor RealTensor::select(int d, int64_t index) const {
  int k = norm(d);
  if (index < 0) index += shape_[size_t(k)];
  RealTensor t = narrow(k, index, 1);
  t.shape_.erase(t.shape_.begin() + k);
  t.strides_.erase(t.strides_.begin() + k);
  return t;
}

std::vector<int64_t> RealTensor::resolve_shape(std::vector<int64_t> shape) const {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) infer = int(i);
    else known *= shape[i];
  }
  if (infer >= 0 && known > 0) shape[size_t(infer)] = numel() / known;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n != numel()) throw Error("shape " + fmt_shape(shape) + " is invalid for " + std::to_string(numel()) + " elements");
  return shape;
}

RealTensor RealTensor::view(const std::vector<int64_t>& shape) const {
  std::vector<int64_t> s = resolve_shape(shape);
  auto strides = view_strides(shape_, strides_, s);
  if (!strides) throw Error("view " + fmt_shape(s) + " of non-contiguous data; use reshape");
  RealTensor t = *this;
  t.shape_ = s;
  t.strides_ = *strides;
  return t;
}

RealTensor RealTensor::reshape(const std::vector<int64_t>& shape) const {
  std::vector<int64_t> s = resolve_shape(shape);
  if (view_strides(shape_, strides_, s)) return view(s);
  return contiguous().view(s);
}

RealTensor RealTensor::transpose(int d0, int d1) const {
  RealTensor t = *this;
  int a = norm(d0), b = norm(d1);
  std::swap(t.shape_[size_t(a)], t.shape_[size_t(b)]);
  std::swap(t.strides_[size_t(a)], t.strides_[size_t(b)]);
  return t;
}

RealTensor RealTensor::permute(const std::vector<int64_t>& order) const {
  if (int(order.size()) != dim()) throw Error("permute order has the wrong length");
  RealTensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    int k = norm(int(order[i]));
    t.shape_[i] = shape_[size_t(k)];
    t.strides_[i] = strides_[size_t(k)];
  }
  return t;
}

RealTensor RealTensor::flatten(int start, int end) const {
  int s = norm(start), e = norm(end);
  std::vector<int64_t> out;
  int64_t n = 1;
  for (int i = 0; i < dim(); ++i) {
    if (i < s || i > e) out.push_back(shape_[size_t(i)]);
    else n *= shape_[size_t(i)];
    if (i == e) out.push_back(n);
  }
  return reshape(out);
}

RealTensor RealTensor::unsqueeze(int d) const {
  int k = norm(d, 1);
  RealTensor t = *this;
  int64_t stride = k < dim() ? strides_[size_t(k)] * shape_[size_t(k)] : 1;
  t.shape_.insert(t.shape_.begin() + k, 1);
  t.strides_.insert(t.strides_.begin() + k, stride);
  return t;
}

RealTensor RealTensor::squeeze(int d) const {
  int k = norm(d);
  if (shape_[size_t(k)] != 1) return *this;
  RealTensor t = *this;
  t.shape_.erase(t.shape_.begin() + k);
  t.strides_.erase(t.strides_.begin() + k);
  return t;
}

std::vector<RealTensor> RealTensor::chunk(int64_t chunks, int d) const {
  int k = norm(d);
  std::vector<RealTensor> out;
  for (int64_t i = 0; i < chunks; ++i) {
    int64_t start = 0, len = 0;
    chunk_bounds(shape_[size_t(k)], chunks, i, &start, &len);
    if (len > 0) out.push_back(narrow(k, start, len));
  }
  return out;
}

std::vector<RealTensor> RealTensor::split(int64_t split_size, int d) const {
  int k = norm(d);
  std::vector<RealTensor> out;
  for (int64_t i = 0; i * split_size < shape_[size_t(k)]; ++i) {
    int64_t start = 0, len = 0;
    split_bounds(shape_[size_t(k)], split_size, i, &start, &len);
    out.push_back(narrow(k, start, len));
  }
  return out;
}

template <class F>
void RealTensor::for_each_offset(F&& f) const {
  int64_t n = numel();
  std::vector<int64_t> idx(shape_.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = offset_;
    for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * strides_[k];
    f(i, off);
    for (size_t k = idx.size(); k-- > 0;) {
      if (++idx[k] < shape_[k]) break;
      idx[k] = 0;
    }
  }
}

RealTensor RealTensor::contiguous() const {
  if (is_contiguous()) return *this;
  RealTensor t = zeros(dtype_, shape_);
  t.copy_(*this);
  return t;
}

RealTensor RealTensor::index_select(int d, const std::vector<int64_t>& indices) const {
  int k = norm(d);
  std::vector<int64_t> shape = shape_;
  shape[size_t(k)] = int64_t(indices.size());
  RealTensor out = zeros(dtype_, shape);
  for (size_t i = 0; i < indices.size(); ++i)
    out.narrow(k, int64_t(i), 1).copy_(narrow(k, indices[i], 1));
  return out;
}

void RealTensor::copy_(const RealTensor& src) {
  if (src.shape_ != shape_) throw Error("copy_ from shape " + fmt_shape(src.shape_) + " into " + fmt_shape(shape_));
  if (src.dtype_ != dtype_) throw Error("copy_ between dtypes");
  int64_t eb = dtype_bytes(dtype_);
  std::vector<int64_t> src_offsets(static_cast<size_t>(numel()));
  src.for_each_offset([&](int64_t i, int64_t off) { src_offsets[size_t(i)] = off; });
  const std::byte* s = src.storage_->data();
  std::byte* t = storage_->data();
  for_each_offset([&](int64_t i, int64_t off) { std::memcpy(t + off * eb, s + src_offsets[size_t(i)] * eb, size_t(eb)); });
}

void RealTensor::zero_() {
  int64_t eb = dtype_bytes(dtype_);
  std::byte* t = storage_->data();
  for_each_offset([&](int64_t, int64_t off) { std::memset(t + off * eb, 0, size_t(eb)); });
}

bool RealTensor::any_nonzero() const {
  int64_t eb = dtype_bytes(dtype_);
  const std::byte* s = storage_->data();
  bool any = false;
  for_each_offset([&](int64_t, int64_t off) {
    for (int64_t b = 0; b < eb; ++b) any = any || s[off * eb + b] != std::byte{0};
  });
  return any;
}

}  // namespace shardsync
