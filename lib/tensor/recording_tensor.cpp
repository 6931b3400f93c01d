#include "tensor/recording_tensor.hpp"

#include "common/error.hpp"
#include "common/table.hpp"

namespace shardsync {

RecordingTensor RecordingTensor::source(RecordSink* sink, int32_t id, DType dtype, const std::vector<int64_t>& shape) {
  RecordingTensor t;
  t.sink_ = sink;
  t.id_ = id;
  t.dtype_ = dtype;
  t.view_ = SubView::contiguous(shape);
  return t;
}

RecordingTensor RecordingTensor::destination(RecordSink* sink, int32_t id, DType dtype,
                                             const std::vector<int64_t>& shape) {
  RecordingTensor t = source(sink, id, dtype, shape);
  t.destination_ = true;
  return t;
}

void RecordingTensor::fail(const std::string& what) const {
  throw Error("recording (" + (sink_ ? sink_->context() : std::string("no sink")) + "): " + what);
}

RecordingTensor RecordingTensor::apply(Op op) const {
  RecordingTensor t = *this;
  try {
    apply_op(t.view_, op);
  } catch (const ViewError& e) {
    fail(format_op(op) + " on shape " + fmt_shape(shape()) + ": " + e.what());
  }
  t.ops_.push_back(std::move(op));
  return t;
}

RecordingTensor RecordingTensor::narrow(int d, int64_t start, int64_t length) const {
  return apply({OpKind::kNarrow, {d, start, length}});
}
RecordingTensor RecordingTensor::select(int d, int64_t index) const { return apply({OpKind::kSelect, {d, index}}); }
RecordingTensor RecordingTensor::view(const std::vector<int64_t>& shape) const { return apply({OpKind::kView, shape}); }
RecordingTensor RecordingTensor::reshape(const std::vector<int64_t>& shape) const {
  return apply({OpKind::kReshape, shape});
}
RecordingTensor RecordingTensor::transpose(int d0, int d1) const { return apply({OpKind::kTranspose, {d0, d1}}); }
RecordingTensor RecordingTensor::permute(const std::vector<int64_t>& order) const {
  return apply({OpKind::kPermute, order});
}
RecordingTensor RecordingTensor::flatten(int start, int end) const { return apply({OpKind::kFlatten, {start, end}}); }
RecordingTensor RecordingTensor::unsqueeze(int d) const { return apply({OpKind::kUnsqueeze, {d}}); }
RecordingTensor RecordingTensor::squeeze(int d) const { return apply({OpKind::kSqueeze, {d}}); }
RecordingTensor RecordingTensor::contiguous() const { return apply({OpKind::kContiguous, {}}); }

std::vector<RecordingTensor> RecordingTensor::chunk(int64_t chunks, int d) const {
  std::vector<RecordingTensor> out;
  int64_t n = size(d);
  for (int64_t i = 0; i < chunks; ++i) {
    int64_t start = 0, len = 0;
    chunk_bounds(n, chunks, i, &start, &len);
    if (len > 0) out.push_back(apply({OpKind::kChunk, {chunks, d, i}}));
  }
  return out;
}

std::vector<RecordingTensor> RecordingTensor::split(int64_t split_size, int d) const {
  std::vector<RecordingTensor> out;
  for (int64_t i = 0; i * split_size < size(d); ++i) out.push_back(apply({OpKind::kSplit, {split_size, d, i}}));
  return out;
}

RecordingTensor RecordingTensor::index_select(int d, const std::vector<int64_t>& indices) const {
  for (size_t i = 1; i < indices.size(); ++i)
    if (indices[i] != indices[0] + int64_t(i))
      fail("index_select with non-consecutive indices (e.g. round-robin expert placement) is a gather, "
           "not a view; recordable ops: " + recordable_ops());
  if (indices.empty()) fail("index_select with no indices");
  return apply({OpKind::kIndexRange, {d, indices[0], int64_t(indices.size())}});
}

void RecordingTensor::copy_(const RecordingTensor& src) {
  if (!destination_) fail("copy_ into a tensor that is not an engine parameter");
  if (src.destination_) fail("copy_ from an engine parameter");
  if (src.shape() != shape())
    fail("copy_ from shape " + fmt_shape(src.shape()) + " into shape " + fmt_shape(shape()));
  if (src.dtype_ != dtype_) fail("copy_ between dtypes (a cast reads values)");
  sink_->on_copy(src, *this);
}

void RecordingTensor::zero_() {
  if (!destination_) fail("zero_ on a tensor that is not an engine parameter");
  sink_->on_zero(*this);
}

bool RecordingTensor::any_nonzero() const {
  fail("any_nonzero reads tensor values; a loader that inspects values cannot be recorded (recordable ops: " +
       recordable_ops() + ")");
}

}  // namespace shardsync
