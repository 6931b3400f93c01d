#include "plan/plan.hpp"

#include <cstring>

#include "common/error.hpp"
#include "common/table.hpp"
#include "plan/loaders.hpp"
#include "tensor/recording_tensor.hpp"

namespace shardsync {

int64_t RankPlan::copy_bytes(const ModelSpec& m) const {
  int64_t n = 0;
  for (const auto& e : entries)
    if (!e.is_fill()) n += e.numel() * dtype_bytes(m.param(e.hf_param).dtype);
  return n;
}

int64_t RankPlan::num_copies() const {
  int64_t n = 0;
  for (const auto& e : entries) n += !e.is_fill();
  return n;
}

namespace {

class PlanRecorder : public RecordSink {
 public:
  PlanRecorder(const LoaderRank& r, RankPlan& plan) : r_(r), plan_(plan) {}

  void set_tensor(int32_t hf_idx) { hf_idx_ = hf_idx; }

  void on_copy(const RecordingTensor& src, const RecordingTensor& dst) override {
    PlanEntry e;
    e.hf_param = src.id();
    e.ops = src.ops();
    set_destination(e, dst);
    e.copy = make_copy_desc(src.view(), dst.view());
    plan_.entries.push_back(std::move(e));
  }

  void on_zero(const RecordingTensor& dst) override {
    PlanEntry e;
    set_destination(e, dst);
    e.copy = make_copy_desc(dst.view(), dst.view());
    for (auto& d : e.copy.dims) d.src_stride = 0;
    e.copy.src_offset = 0;
    plan_.entries.push_back(std::move(e));
  }

  std::string context() const override {
    return std::string("loader ") + r_.loader_name() + ", inference rank " + std::to_string(r_.rank) + ", tensor " +
           (hf_idx_ >= 0 ? r_.model->param(hf_idx_).name : std::string("?"));
  }

 private:
  void set_destination(PlanEntry& e, const RecordingTensor& dst) {
    if (!dst.view().is_simple())
      throw Error("recording (" + context() + "): destination view is not plainly strided");
    e.engine_param = dst.id();
    e.dst_offset = dst.view().offset();
    e.dst_shape = dst.view().shape();
    e.dst_strides = dst.view().simple_strides();
  }

  const LoaderRank& r_;
  RankPlan& plan_;
  int32_t hf_idx_ = -1;
};

}  // namespace

RankPlan record_rank_plan(const ModelSpec& model, const InferencePlacement& inf, int local_rank) {
  LoaderRank r(model, inf, local_rank);
  EngineParams params(model, inf, local_rank);
  RankPlan plan;
  plan.local_rank = local_rank;
  plan.coord = r.coord;
  plan.params = params.params();
  PlanRecorder rec(r, plan);
  ParamStore<RecordingTensor> store;
  store.params = &params;
  for (int32_t i = 0; i < int32_t(plan.params.size()); ++i) {
    const EngineParam& p = plan.params[size_t(i)];
    store.tensors.push_back(RecordingTensor::destination(&rec, i, p.dtype, p.shape));
  }
  for (int32_t i = 0; i < int32_t(model.params().size()); ++i) {
    const ParamMeta& p = model.param(i);
    if (!may_load(r, p)) continue;
    rec.set_tensor(i);
    load_weight(r, i, RecordingTensor::source(&rec, i, p.dtype, p.shape), store);
  }
  return plan;
}

std::vector<RankPlan> record_plans(const ModelSpec& model, const InferencePlacement& inf) {
  std::vector<RankPlan> plans;
  for (int r = 0; r < inf.layout().ranks_per_replica(); ++r) plans.push_back(record_rank_plan(model, inf, r));
  return plans;
}

namespace {

// The elements a strided destination (from a plan file: any values) can touch lie in
// [0, total), computed without overflow before any view arithmetic multiplies its sizes.
void check_destination_extent(const PlanEntry& e, int64_t total) {
  if (e.dst_shape.size() != e.dst_strides.size()) throw ViewError("destination shape and strides differ in rank");
  int64_t lo = e.dst_offset, hi = e.dst_offset, reach = 0;
  for (size_t d = 0; d < e.dst_shape.size(); ++d) {
    const int64_t n = e.dst_shape[d], st = e.dst_strides[d];
    if (n < 0) throw ViewError("destination dimension of negative size");
    if (n == 0) return;  // no element
    if (__builtin_mul_overflow(n - 1, st, &reach) || __builtin_add_overflow(st < 0 ? lo : hi, reach, st < 0 ? &lo : &hi))
      throw ViewError("destination extent overflows");
  }
  if (lo < 0 || hi >= total) throw ViewError("destination outside the engine parameter");
}

}  // namespace

CopyDesc compile_entry(const PlanEntry& e, const std::vector<int64_t>& hf_shape,
                       const std::vector<int64_t>& param_shape) {
  int64_t lo = 0, hi = 0, total = 1;
  for (int64_t s : param_shape) total *= s;
  check_destination_extent(e, total);
  SubView dst = SubView::strided(e.dst_offset, e.dst_shape, e.dst_strides);
  if (e.is_fill()) {
    CopyDesc d = make_copy_desc(dst, dst);
    for (auto& x : d.dims) x.src_stride = 0;
    d.src_offset = 0;
    dest_range(d, &lo, &hi);
    if (lo < 0 || hi > total) throw ViewError("fill destination outside the engine parameter");
    return d;
  }
  SubView src = SubView::contiguous(hf_shape);
  for (const Op& op : e.ops) apply_op(src, op);
  CopyDesc d = make_copy_desc(src, dst);
  dest_range(d, &lo, &hi);
  if (lo < 0 || hi > total)
    throw ViewError("destination [" + std::to_string(lo) + ", " + std::to_string(hi) + ") outside the engine parameter " +
                    fmt_shape(param_shape));
  return d;
}

void replay_entry(const PlanEntry& e, const void* hf_data, void* param_data, int64_t elem_bytes) {
  if (e.is_fill()) execute_fill(e.copy, param_data, elem_bytes);
  else execute_copy(e.copy, hf_data, param_data, elem_bytes);
}

void execute_fill(const CopyDesc& d, void* param_data, int64_t elem_bytes) {
  auto* base = static_cast<std::byte*>(param_data);
  for_each_index(d, [&](int64_t, int64_t t) { std::memset(base + t * elem_bytes, 0, size_t(elem_bytes)); });
}

}  // namespace shardsync
