#include "plan/box_copy.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace shardsync {

namespace {

// Row-major strides (elements) of a shape.
std::vector<int64_t> row_major(const std::vector<int64_t>& shape) {
  std::vector<int64_t> p(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;) p[k - 1] = p[k] * shape[k];
  return p;
}

// The mixed-radix digits of a flat index or step: coordinates for an index; for a step, the
// per-dimension increments it makes where nothing wraps (dim 0 takes what is left).
std::vector<int64_t> digits(int64_t x, const std::vector<int64_t>& shape,
                            const std::vector<int64_t>& p) {
  std::vector<int64_t> a(shape.size(), 0);
  for (size_t k = 0; k < shape.size(); ++k) {
    a[k] = k == 0 ? x / p[0] : (x / p[k]) % shape[k];
  }
  return a;
}

class Splitter {
 public:
  explicit Splitter(const std::vector<int64_t>& shape) : shape_(shape), p_(row_major(shape)) {}

  // The copy as coordinates if it is carry-free.
  bool coords(const CopyDesc& d, CoordCopy* out) const {
    CoordCopy c;
    c.flat = d;
    c.base = digits(d.src_offset, shape_, p_);
    std::vector<int64_t> reach = c.base;
    for (const CopyDim& l : d.dims) {
      if (l.src_stride < 0) throw Error("box copy: negative source stride");
      c.steps.push_back(digits(l.src_stride, shape_, p_));
      for (size_t k = 0; k < shape_.size(); ++k) reach[k] += (l.size - 1) * c.steps.back()[k];
    }
    for (size_t k = 1; k < shape_.size(); ++k)
      if (reach[k] >= shape_[k]) return false;
    // The digits of each step and of the base reproduce the flat indices only without wraps,
    // which the check above rules out; dim 0 must stay inside the tensor too.
    if (!shape_.empty() && reach[0] >= shape_[0])
      throw Error("box copy: source outside the tensor");
    *out = std::move(c);
    return true;
  }

  // Iterations after which a loop of this step wraps its dimension, where the step is a
  // single digit (of a dimension other than the first) dividing that dimension; else 0.
  int64_t period(int64_t stride) const {
    if (stride <= 0 || shape_.size() < 2) return 0;
    std::vector<int64_t> a = digits(stride, shape_, p_);
    size_t k = shape_.size() - 1;
    while (k > 0 && a[k] == 0) --k;
    if (k == 0 || stride != a[k] * p_[k] || shape_[k] % a[k] != 0) return 0;
    return shape_[k] / a[k];
  }

  // Factors one coalesced loop that walks a dimension past its end into (wraps, per wrap),
  // where its step is a single digit dividing that dimension and the walk holds whole wraps.
  bool factor(CopyDesc& d) const {
    for (size_t m = d.dims.size(); m-- > 0;) {
      const CopyDim l = d.dims[m];
      if (l.size <= 1) continue;
      const int64_t per = period(l.src_stride);
      if (per == 0 || l.size <= per || l.size % per != 0) continue;
      CopyDim outer{l.size / per, l.src_stride * per, l.dst_stride * per};
      CopyDim inner{per, l.src_stride, l.dst_stride};
      d.dims[m] = inner;
      d.dims.insert(d.dims.begin() + long(m), outer);
      return true;
    }
    return false;
  }

  void split(CopyDesc d, std::vector<CoordCopy>& out) const {
    for (;;) {
      CoordCopy c;
      if (coords(d, &c)) {
        out.push_back(std::move(c));
        return;
      }
      if (!factor(d)) break;
    }
    // Cut the outermost loop into runs of iterations: each run the longest carry-free one
    // from its start (after factoring), or the longest of whole wraps that factors.
    size_t m = 0;
    while (m < d.dims.size() && d.dims[m].size <= 1) ++m;
    if (m == d.dims.size()) throw Error("box copy: a single element that wraps");
    const CopyDim l = d.dims[m];
    auto part = [&](int64_t from, int64_t count) {
      CopyDesc s = d;
      s.src_offset += from * l.src_stride;
      s.dst_offset += from * l.dst_stride;
      s.dims[m].size = count;
      s.numel = d.numel / l.size * count;
      if (count == 1 && s.dims.size() > 1) s.dims.erase(s.dims.begin() + long(m));
      return s;
    };
    auto plain = [&](int64_t from, int64_t count) {
      CoordCopy c;
      return coords(part(from, count), &c);
    };
    auto factors = [&](int64_t from, int64_t count) {
      CopyDesc s = part(from, count);
      for (;;) {
        CoordCopy c;
        if (coords(s, &c)) return true;
        if (!factor(s)) return false;
      }
    };
    const int64_t period = this->period(l.src_stride);
    int64_t i = 0;
    while (i < l.size) {
      const int64_t left = l.size - i;
      // The longest run from i that is carry-free as it is (monotone in its length)...
      int64_t lo = 0, hi = left;
      while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (plain(i, mid))
          lo = mid;
        else
          hi = mid - 1;
      }
      // ... or, if longer, the whole wraps from i that factor into one.
      if (period > 0 && left >= period && left / period * period > lo &&
          factors(i, left / period * period))
        lo = left / period * period;
      if (lo == 0) {  // even one iteration wraps inside: split it further
        split(part(i, 1), out);
        ++i;
        continue;
      }
      split(part(i, lo), out);
      i += lo;
    }
  }

 private:
  std::vector<int64_t> shape_, p_;
};

}  // namespace

Box CoordCopy::bounds() const {
  Box b;
  b.start = base;
  b.length.assign(base.size(), 1);
  for (size_t m = 0; m < steps.size(); ++m)
    for (size_t k = 0; k < base.size(); ++k) b.length[k] += (flat.dims[m].size - 1) * steps[m][k];
  if (flat.numel == 0) std::fill(b.length.begin(), b.length.end(), 0);
  return b;
}

CoordCopy CoordCopy::slice(size_t loop, int64_t from, int64_t count) const {
  CoordCopy c = *this;
  const CopyDim l = flat.dims[loop];
  c.flat.src_offset += from * l.src_stride;
  c.flat.dst_offset += from * l.dst_stride;
  c.flat.dims[loop].size = count;
  c.flat.numel = flat.numel / l.size * count;
  for (size_t k = 0; k < base.size(); ++k) c.base[k] += from * steps[loop][k];
  if (count == 1 && c.flat.dims.size() > 1) {
    c.flat.dims.erase(c.flat.dims.begin() + long(loop));
    c.steps.erase(c.steps.begin() + long(loop));
  }
  return c;
}

std::vector<CoordCopy> to_coords(const CopyDesc& d, const std::vector<int64_t>& shape) {
  std::vector<CoordCopy> out;
  if (d.numel == 0) return out;
  Splitter(shape).split(d, out);
  return out;
}

CopyDesc rebase_into(const CoordCopy& c, const Box& box) {
  std::vector<int64_t> q = row_major(box.length);
  CopyDesc d = c.flat;
  d.src_offset = 0;
  for (size_t k = 0; k < box.start.size(); ++k) {
    if (c.base[k] < box.start[k]) throw Error("box copy: part starts outside the box");
    d.src_offset += (c.base[k] - box.start[k]) * q[k];
  }
  for (size_t m = 0; m < d.dims.size(); ++m) {
    int64_t s = 0;
    for (size_t k = 0; k < q.size(); ++k) s += c.steps[m][k] * q[k];
    d.dims[m].src_stride = s;
  }
  coalesce(d);
  return d;
}

}  // namespace shardsync
