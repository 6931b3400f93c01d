// A tensor that holds no data: it reports shape and dtype, and every view op appends to an
// op chain (and updates the factored view that replays it). copy_() into a destination
// records (source chain, destination view) with the sink; ops outside the allowlist, or
// ops that would read values, fail at record time naming the loader and tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/dtype.hpp"
#include "tensor/ops.hpp"
#include "tensor/view.hpp"

namespace shardsync {

class RecordingTensor;

// Receives what the loaders do. The plan recorder implements it.
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void on_copy(const RecordingTensor& src, const RecordingTensor& dst) = 0;
  virtual void on_zero(const RecordingTensor& dst) = 0;
  // Where recording is, for error messages: "loader qwen3_moe, tensor model.layers.0...".
  virtual std::string context() const = 0;
};

class RecordingTensor {
 public:
  RecordingTensor() = default;
  // An HF tensor (source) or an engine parameter (destination), identified by index.
  static RecordingTensor source(RecordSink* sink, int32_t id, DType dtype, const std::vector<int64_t>& shape);
  static RecordingTensor destination(RecordSink* sink, int32_t id, DType dtype, const std::vector<int64_t>& shape);

  DType dtype() const { return dtype_; }
  int dim() const { return view_.ndim(); }
  int64_t size(int d) const { return view_.size(d); }
  std::vector<int64_t> shape() const { return view_.shape(); }
  int64_t numel() const { return view_.numel(); }
  int32_t id() const { return id_; }
  bool is_destination() const { return destination_; }
  const std::vector<Op>& ops() const { return ops_; }
  const SubView& view() const { return view_; }

  RecordingTensor narrow(int d, int64_t start, int64_t length) const;
  RecordingTensor select(int d, int64_t index) const;
  RecordingTensor view(const std::vector<int64_t>& shape) const;
  RecordingTensor reshape(const std::vector<int64_t>& shape) const;
  RecordingTensor transpose(int d0, int d1) const;
  RecordingTensor t() const { return transpose(0, 1); }
  RecordingTensor permute(const std::vector<int64_t>& order) const;
  RecordingTensor flatten(int start, int end) const;
  RecordingTensor unsqueeze(int d) const;
  RecordingTensor squeeze(int d) const;
  std::vector<RecordingTensor> chunk(int64_t chunks, int d) const;
  std::vector<RecordingTensor> split(int64_t split_size, int d) const;
  RecordingTensor contiguous() const;
  // Recordable only when the indices are consecutive (a range); otherwise it fails.
  RecordingTensor index_select(int d, const std::vector<int64_t>& indices) const;

  void copy_(const RecordingTensor& src);
  void zero_();
  // Reads values: never recordable.
  bool any_nonzero() const;

 private:
  RecordingTensor apply(Op op) const;
  [[noreturn]] void fail(const std::string& what) const;

  RecordSink* sink_ = nullptr;
  int32_t id_ = -1;
  bool destination_ = false;
  DType dtype_ = DType::kBF16;
  std::vector<Op> ops_;
  SubView view_;
};

}  // namespace shardsync
