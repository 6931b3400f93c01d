// An FP8 inference target on the consumer (issue 20): the live FP8 weights (e4m3fn codes and
// fp32 scales of every quantized parameter, plan/quant.hpp), the process step that quantizes
// a weight group's bf16 values into them, and their verification.
//
// The bf16 values land as for any target (in place in `live`, or in a group's layerwise
// buffer); the process step quantizes each HF tensor's piece of each quantized parameter
// (Device::quantize_fp8: the CUDA kernel on GPUs, the CPU twin otherwise) into `fp8`.
// Verification: every byte of the bf16 values as for any target, then every code and scale
// against a quantization of the expected bf16 values, synthesized apart from the pulled ones.
#include <cstring>

#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

void Engines::Impl::setup_quant() {
  ConsumerSide& cs = consumer_side;
  cs.quant = quant_params(model, inference, cs.plan->params);
  cs.quant_of_param.assign(cs.plan->params.size(), -1);
  int64_t off = 0;
  auto take = [&](int64_t bytes) {
    const int64_t at = off;
    off += (bytes + 255) & ~int64_t(255);
    return at;
  };
  for (size_t i = 0; i < cs.quant.size(); ++i) {
    const QuantParam& q = cs.quant[i];
    cs.quant_of_param[size_t(q.param)] = int32_t(i);
    cs.codes_offset.push_back(take(q.matrices * q.rows * q.cols));
    cs.scale_offset.push_back(take(4 * q.scale_numel()));
  }
  if (off > 0) cs.fp8 = DeviceBuffer(device.get(), off);
}

std::vector<QuantJob> Engines::Impl::quant_jobs(int32_t group, const uint8_t* bf16, int64_t bf16_offset, uint8_t* codes,
                                                uint8_t* scales, int32_t only_param) const {
  const ConsumerSide& cs = consumer_side;
  std::vector<QuantJob> jobs;
  for (size_t i = 0; i < cs.quant.size(); ++i) {
    const QuantParam& q = cs.quant[i];
    if ((group >= 0 && cs.group_of_param[size_t(q.param)] != group) || (only_param >= 0 && q.param != only_param))
      continue;
    const uint8_t* src = bf16 + (cs.param_offset[size_t(q.param)] - bf16_offset);
    uint8_t* c = codes ? codes : cs.fp8.data() + cs.codes_offset[i];
    auto* s = reinterpret_cast<float*>(scales ? scales : cs.fp8.data() + cs.scale_offset[i]);
    for (const QuantRegion& r : q.regions) {
      const int64_t first = (r.matrix * q.rows + r.row0) * q.cols;
      jobs.push_back(QuantJob{src + 2 * first, q.cols, c + first, q.cols,
                              s + (r.matrix * q.scale_rows() + r.scale_row0) * q.scale_cols(), q.scale_cols(), r.rows,
                              q.cols});
    }
  }
  return jobs;
}

void Engines::Impl::quantize_group(int32_t group, const uint8_t* bf16, int64_t bf16_offset, Lane lane,
                                   RankStats& st) {
  if (consumer_side.quant.empty() || consumer_side.fp8_arrived) return;  // FP8 on the wire: placed as it landed
  PhaseTimer t(st.quantize_s);  // the launches; in place, the caller waits for them in its own timer
  std::vector<QuantJob> jobs = quant_jobs(group, bf16, bf16_offset, nullptr, nullptr);
  if (!jobs.empty()) device->quantize_fp8(jobs, lane);
}

void Engines::Impl::verify_fp8(uint64_t version, RankStats& st) {
  const ConsumerSide& cs = consumer_side;
  if (cs.quant.empty()) return;  // (timed by verify(), which calls this)
  // One quantized parameter at a time: its expected bf16 values synthesized into a scratch
  // buffer from the plan's entries, quantized there, compared byte for byte on the host.
  int64_t most = 0, most_scales = 0;
  for (const QuantParam& q : cs.quant) {
    most = std::max(most, q.matrices * q.rows * q.cols);
    most_scales = std::max(most_scales, q.scale_numel());
  }
  DeviceBuffer scratch(device.get(), 2 * most), codes(device.get(), most), scales(device.get(), 4 * most_scales);
  std::vector<uint8_t> want(size_t(std::max(most, 4 * most_scales))), got(want.size());
  for (size_t i = 0; i < cs.quant.size(); ++i) {
    const QuantParam& q = cs.quant[i];
    std::vector<SynthJob> expected;
    for (const PlanEntry& e : cs.plan->entries)
      if (e.engine_param == q.param)
        expected.push_back(SynthJob{scratch.data(), e.is_fill() ? SynthKey(0) : weight_key(model, e.hf_param, version, opt.updates),
                                    e.copy, 2, e.is_fill()});
    device->synth(expected);
    device->quantize_fp8(quant_jobs(-1, scratch.data(), cs.param_offset[size_t(q.param)], codes.data(), scales.data(), q.param));
    device->synchronize();
    auto compare = [&](const uint8_t* actual, const uint8_t* expect, int64_t bytes, int64_t elem) {
      device->to_host(got.data(), actual, bytes);
      device->to_host(want.data(), expect, bytes);
      if (std::memcmp(got.data(), want.data(), size_t(bytes)) == 0) return;
      for (int64_t k = 0; k < bytes; ++k)
        if (got[size_t(k)] != want[size_t(k)]) {
          if (st.mismatches == 0) {
            st.bad_param = q.param;
            st.bad_index = elem < 0 ? -1 - k / 4 : k;  // a scale: -1 - its index
          }
          ++st.mismatches;
          if (elem < 0) k |= 3;  // a scale counts once
        }
    };
    compare(cs.fp8.data() + cs.codes_offset[i], codes.data(), q.matrices * q.rows * q.cols, 0);
    compare(cs.fp8.data() + cs.scale_offset[i], scales.data(), 4 * q.scale_numel(), -1);
  }
}

}  // namespace shardsync
