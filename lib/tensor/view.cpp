#include "tensor/view.hpp"

#include <cstring>
#include <deque>

#include "common/table.hpp"

namespace shardsync {

namespace {

int64_t product(const std::vector<SubDim>& subs) {
  int64_t n = 1;
  for (const auto& s : subs) n *= s.size;
  return n;
}

void drop_unit_subs(std::vector<SubDim>& subs) {
  std::erase_if(subs, [](const SubDim& s) { return s.size == 1; });
}

// Narrows a factored dimension to [start, start + len) when the result is a strided view.
void narrow_subs(std::vector<SubDim>& subs, int64_t start, int64_t len, int64_t& offset) {
  if (len == 0) {
    subs = {SubDim{0, 1}};
    return;
  }
  if (subs.empty()) return;  // size-1 dimension, start 0, len 1
  if (subs.size() == 1) {
    offset += start * subs[0].stride;
    subs[0].size = len;
    drop_unit_subs(subs);
    return;
  }
  int64_t inner = 1;
  for (size_t i = 1; i < subs.size(); ++i) inner *= subs[i].size;
  if (start % inner == 0 && len % inner == 0) {
    offset += (start / inner) * subs[0].stride;
    subs[0].size = len / inner;
    drop_unit_subs(subs);
    return;
  }
  if (start / inner == (start + len - 1) / inner) {
    offset += (start / inner) * subs[0].stride;
    subs.erase(subs.begin());
    narrow_subs(subs, start % inner, len, offset);
    return;
  }
  throw ViewError("narrow [" + std::to_string(start) + ", " + std::to_string(start + len) +
                  ") crosses the factors of a reshaped dimension and is not a strided view");
}

}  // namespace

SubView SubView::contiguous(const std::vector<int64_t>& shape, int64_t offset) {
  SubView v;
  v.offset_ = offset;
  int64_t stride = 1;
  v.dims_.resize(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] < 0) throw ViewError("negative size in shape " + fmt_shape(shape));
    if (shape[i] != 1) v.dims_[i] = {SubDim{shape[i], stride}};
    stride *= shape[i];
  }
  return v;
}

SubView SubView::strided(int64_t offset, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (shape.size() != strides.size()) throw ViewError("shape and strides differ in length");
  if (offset < 0) throw ViewError("negative offset");
  SubView v;
  v.offset_ = offset;
  v.dims_.resize(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0 || strides[i] < 0) throw ViewError("negative size or stride");
    if (shape[i] != 1) v.dims_[i] = {SubDim{shape[i], strides[i]}};
  }
  return v;
}

int SubView::normalize_dim(int dim, int ndim_plus) const {
  int n = ndim() + ndim_plus;
  int d = dim < 0 ? dim + n : dim;
  if (d < 0 || d >= std::max(n, 1))
    throw ViewError("dimension " + std::to_string(dim) + " out of range for a " + std::to_string(ndim()) +
                    "-d tensor");
  return d;
}

int64_t SubView::size(int dim) const { return product(dims_[size_t(normalize_dim(dim))]); }

std::vector<int64_t> SubView::shape() const {
  std::vector<int64_t> s;
  for (const auto& d : dims_) s.push_back(product(d));
  return s;
}

int64_t SubView::numel() const {
  int64_t n = 1;
  for (const auto& d : dims_) n *= product(d);
  return n;
}

bool SubView::is_simple() const {
  for (const auto& d : dims_)
    if (d.size() > 1) return false;
  return true;
}

std::vector<int64_t> SubView::simple_strides() const {
  if (!is_simple()) throw ViewError("view has factored dimensions; no plain strides");
  // Size-1 dimensions get the stride a contiguous layout would give them (irrelevant to addressing).
  std::vector<int64_t> strides(dims_.size(), 1);
  int64_t next = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    if (dims_[i].empty()) {
      strides[i] = next;
    } else {
      strides[i] = dims_[i][0].stride;
      next = dims_[i][0].stride * dims_[i][0].size;
    }
  }
  return strides;
}

void SubView::narrow(int dim, int64_t start, int64_t length) {
  int d = normalize_dim(dim);
  int64_t n = size(d);
  if (start < 0 || length < 0 || start > n || length > n - start)  // no overflow for any start, length
    throw ViewError("narrow(" + std::to_string(dim) + ", " + std::to_string(start) + ", " + std::to_string(length) +
                    ") outside dimension of size " + std::to_string(n));
  narrow_subs(dims_[size_t(d)], start, length, offset_);
}

void SubView::select(int dim, int64_t index) {
  int d = normalize_dim(dim);
  int64_t n = size(d);
  if (index < 0) index += n;
  if (index < 0 || index >= n)
    throw ViewError("select index " + std::to_string(index) + " outside dimension of size " + std::to_string(n));
  narrow(d, index, 1);
  dims_.erase(dims_.begin() + d);
}

void SubView::transpose(int d0, int d1) {
  std::swap(dims_[size_t(normalize_dim(d0))], dims_[size_t(normalize_dim(d1))]);
}

void SubView::permute(const std::vector<int64_t>& order) {
  if (int(order.size()) != ndim()) throw ViewError("permute needs " + std::to_string(ndim()) + " dimensions");
  std::vector<bool> seen(order.size(), false);
  std::vector<std::vector<SubDim>> out;
  for (int64_t o : order) {
    int d = normalize_dim(int(o));
    if (seen[size_t(d)]) throw ViewError("permute repeats dimension " + std::to_string(o));
    seen[size_t(d)] = true;
    out.push_back(dims_[size_t(d)]);
  }
  dims_ = std::move(out);
}

void SubView::reshape(std::vector<int64_t> shape) {
  int64_t total = numel(), known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw ViewError("reshape with more than one -1");
      infer = int(i);
    } else if (shape[i] < 0) {
      throw ViewError("reshape to negative size");
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      throw ViewError("reshape to a size that overflows");
    }
  }
  if (infer >= 0) {
    if (known == 0 || total % known) throw ViewError("reshape: cannot infer -1 for " + std::to_string(total) + " elements");
    shape[size_t(infer)] = total / known;
    known = total;
  }
  if (known != total)
    throw ViewError("reshape to " + fmt_shape(shape) + " (" + std::to_string(known) + " elements) of a tensor with " +
                    std::to_string(total) + " elements");
  // Flatten to one queue of sub-dimensions, merging those that are contiguous together.
  std::deque<SubDim> q;
  for (const auto& d : dims_)
    for (const auto& s : d) {
      if (s.size == 1) continue;
      if (!q.empty() && q.back().stride == s.size * s.stride) {
        q.back() = SubDim{q.back().size * s.size, s.stride};
      } else {
        q.push_back(s);
      }
    }
  std::vector<std::vector<SubDim>> out;
  for (int64_t want : shape) {
    std::vector<SubDim> parts;
    if (want == 0) parts.push_back(SubDim{0, 1});
    int64_t need = want;
    while (need > 1) {
      if (q.empty()) throw ViewError("reshape ran out of elements");
      SubDim f = q.front();
      if (f.size <= need) {
        if (need % f.size) throw ViewError("reshape to " + fmt_shape(shape) + " splits a non-contiguous dimension unevenly (not a strided view)");
        parts.push_back(f);
        need /= f.size;
        q.pop_front();
      } else {
        if (f.size % need) throw ViewError("reshape to " + fmt_shape(shape) + " splits a non-contiguous dimension unevenly (not a strided view)");
        parts.push_back(SubDim{need, f.stride * (f.size / need)});
        q.front() = SubDim{f.size / need, f.stride};
        need = 1;
      }
    }
    out.push_back(std::move(parts));
  }
  dims_ = std::move(out);
}

void SubView::unsqueeze(int dim) {
  int d = normalize_dim(dim, 1);
  dims_.insert(dims_.begin() + d, std::vector<SubDim>{});
}

void SubView::squeeze(int dim) {
  int d = normalize_dim(dim);
  if (size(d) == 1) dims_.erase(dims_.begin() + d);
}

CopyDesc make_copy_desc(const SubView& src, const SubView& dst) {
  if (src.shape() != dst.shape())
    throw ViewError("copy between shapes " + fmt_shape(src.shape()) + " and " + fmt_shape(dst.shape()));
  CopyDesc c;
  c.src_offset = src.offset();
  c.dst_offset = dst.offset();
  c.numel = src.numel();
  std::vector<CopyDim> dims;
  for (int d = 0; d < src.ndim(); ++d) {
    std::deque<SubDim> a, b;
    for (const auto& s : src.subs(d)) if (s.size != 1) a.push_back(s);
    for (const auto& s : dst.subs(d)) if (s.size != 1) b.push_back(s);
    while (!a.empty() && !b.empty()) {
      SubDim x = a.front(), y = b.front();
      if (x.size == y.size) {
        dims.push_back({x.size, x.stride, y.stride});
        a.pop_front();
        b.pop_front();
      } else if (x.size > y.size) {
        if (x.size % y.size) throw ViewError("copy between incompatibly factored views");
        dims.push_back({y.size, x.stride * (x.size / y.size), y.stride});
        a.front() = SubDim{x.size / y.size, x.stride};
        b.pop_front();
      } else {
        if (y.size % x.size) throw ViewError("copy between incompatibly factored views");
        dims.push_back({x.size, x.stride, y.stride * (y.size / x.size)});
        b.front() = SubDim{y.size / x.size, y.stride};
        a.pop_front();
      }
    }
  }
  c.dims = std::move(dims);
  coalesce(c);
  return c;
}

void coalesce(CopyDesc& c) {
  std::vector<CopyDim> merged;
  for (const auto& d : c.dims) {
    if (d.size == 1) continue;
    if (!merged.empty() && merged.back().src_stride == d.size * d.src_stride &&
        merged.back().dst_stride == d.size * d.dst_stride) {
      merged.back() = CopyDim{merged.back().size * d.size, d.src_stride, d.dst_stride};
    } else {
      merged.push_back(d);
    }
  }
  if (c.numel == 0) merged = {CopyDim{0, 1, 1}};
  else if (merged.empty()) merged = {CopyDim{1, 1, 1}};
  c.dims = std::move(merged);
}

CopyDesc make_pack_desc(const SubView& src, int64_t dst_offset) {
  return make_copy_desc(src, SubView::contiguous(src.shape(), dst_offset));
}

namespace {

template <class E>
void copy_strided_inner(const CopyDim& d, const std::byte* s, std::byte* t) {
  const E* sp = reinterpret_cast<const E*>(s);
  E* tp = reinterpret_cast<E*>(t);
  for (int64_t i = 0; i < d.size; ++i) tp[i * d.dst_stride] = sp[i * d.src_stride];
}

}  // namespace

void copy_strided_run(const CopyDim& in, const std::byte* s, std::byte* t, int64_t eb) {
  switch (eb) {
    case 1: copy_strided_inner<uint8_t>(in, s, t); break;
    case 2: copy_strided_inner<uint16_t>(in, s, t); break;
    case 4: copy_strided_inner<uint32_t>(in, s, t); break;
    case 8: copy_strided_inner<uint64_t>(in, s, t); break;
    default:
      for (int64_t i = 0; i < in.size; ++i) std::memcpy(t + i * in.dst_stride * eb, s + i * in.src_stride * eb, size_t(eb));
  }
}

bool copy_transposes(const CopyDesc& d) {
  const size_t n = d.dims.size();
  return n >= 2 && d.dims[n - 1].dst_stride == 1 && d.dims[n - 1].src_stride != 1 && d.dims[n - 2].src_stride == 1;
}

void execute_copy(const CopyDesc& d, const void* src, void* dst, int64_t eb) {
  if (d.numel == 0) return;
  const auto* s0 = static_cast<const std::byte*>(src);
  auto* t0 = static_cast<std::byte*>(dst);
  const CopyDim& in = d.dims.back();
  size_t outer_n = d.dims.size() - 1;
  std::vector<int64_t> idx(outer_n, 0);
  int64_t outer_total = d.numel / in.size;
  for (int64_t n = 0; n < outer_total; ++n) {
    int64_t so = d.src_offset, to = d.dst_offset;
    for (size_t k = 0; k < outer_n; ++k) {
      so += idx[k] * d.dims[k].src_stride;
      to += idx[k] * d.dims[k].dst_stride;
    }
    const std::byte* s = s0 + so * eb;
    std::byte* t = t0 + to * eb;
    if (in.src_stride == 1 && in.dst_stride == 1) {
      std::memcpy(t, s, size_t(in.size * eb));
    } else {
      copy_strided_run(in, s, t, eb);
    }
    for (size_t k = outer_n; k-- > 0;) {
      if (++idx[k] < d.dims[k].size) break;
      idx[k] = 0;
    }
  }
}

void source_range(const CopyDesc& d, int64_t* lo, int64_t* hi) {
  int64_t span = 0;
  for (const auto& x : d.dims) span += (x.size - 1) * x.src_stride;
  *lo = d.src_offset;
  *hi = d.numel == 0 ? d.src_offset : d.src_offset + span + 1;
}

void dest_range(const CopyDesc& d, int64_t* lo, int64_t* hi) {
  int64_t span = 0;
  for (const auto& x : d.dims) span += (x.size - 1) * x.dst_stride;
  *lo = d.dst_offset;
  *hi = d.numel == 0 ? d.dst_offset : d.dst_offset + span + 1;
}

}  // namespace shardsync
