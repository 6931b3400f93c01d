// shardsync-kernel-bench: pack and unpack of one weight group's real plan entries against a
// plain copy of the same bytes on the same device (CPU or GPU).
//
//   shardsync-kernel-bench --model qwen3-8b --inference tp2 --device cuda --layers 4
//
// pack:   full HF tensors (as a trainer holds them after its gather) -> one contiguous buffer
// unpack: that buffer -> the rank's engine parameters (strided destinations)
// memcpy: the same number of bytes, one contiguous device-to-device (or host) copy
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/table.hpp"
#include "device/device.hpp"
#include "engine/schedule.hpp"
#include "engine/synthetic.hpp"
#include "layout/parse.hpp"
#include "plan/plan.hpp"

using namespace shardsync;

namespace {

struct Options {
  std::string model = "qwen3-8b";
  std::string inference = "tp2";
  int rank = 0;
  std::string device = "cpu";
  int layers = 1;
  int reps = 10;
  std::string json;
};

double time_it(Device& dev, int reps, const std::function<void()>& f) {
  f();
  dev.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  dev.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

int run(const Options& o) {
  ModelSpec m = load_model(o.model);
  InferenceLayout l = parse_inference_spec(o.inference);
  l.replicas = 1;
  InferencePlacement inf(m, l);
  RankPlan plan = record_rank_plan(m, inf, o.rank);
  auto dev = o.device == "cuda" ? make_cuda_device(0) : make_cpu_device();
  // The first `layers` transformer blocks this rank holds.
  std::vector<int32_t> groups;
  for (const EngineParam& p : plan.params)
    if (p.layer >= 0 && (groups.empty() || groups.back() != p.group) && int(groups.size()) < o.layers) groups.push_back(p.group);
  std::vector<DeviceBuffer> hf(m.params().size());
  std::vector<DeviceBuffer> params;
  params.resize(plan.params.size());
  int64_t bytes = 0;
  std::vector<CopyJob> pack, unpack;
  DeviceBuffer packed;
  std::vector<std::pair<const PlanEntry*, int64_t>> placed;
  for (const PlanEntry& e : plan.entries) {
    if (e.is_fill() || std::find(groups.begin(), groups.end(), plan.params[size_t(e.engine_param)].group) == groups.end())
      continue;
    placed.emplace_back(&e, bytes);
    bytes += (e.numel() * dtype_bytes(m.param(e.hf_param).dtype) + 15) / 16 * 16;
  }
  if (placed.empty()) throw Error("no plan entries in the chosen layers");
  packed = DeviceBuffer(dev.get(), bytes);
  DeviceBuffer other(dev.get(), bytes);
  for (size_t i = 0; i < plan.params.size(); ++i)
    if (std::find(groups.begin(), groups.end(), plan.params[i].group) != groups.end())
      params[i] = DeviceBuffer(dev.get(), plan.params[i].bytes());
  for (auto [e, off] : placed) {
    const ParamMeta& p = m.param(e->hf_param);
    if (!hf[size_t(e->hf_param)].data()) {
      hf[size_t(e->hf_param)] = DeviceBuffer(dev.get(), p.bytes());
      dev->synth({SynthJob{hf[size_t(e->hf_param)].data(), synth_seed(e->hf_param, 1),
                           make_pack_desc(SubView::contiguous(p.shape), 0), int32_t(dtype_bytes(p.dtype)), false}});
    }
    int32_t eb = int32_t(dtype_bytes(p.dtype));
    CopyDesc to_buf = pack_copy(e->copy);  // HF tensor -> packed at 0
    CopyDesc from_buf = unpack_copy(e->copy);  // packed at 0 -> engine parameter
    pack.push_back(CopyJob{hf[size_t(e->hf_param)].data(), packed.data() + off, to_buf, eb});
    unpack.push_back(CopyJob{packed.data() + off, params[size_t(e->engine_param)].data(), from_buf, eb});
  }
  int64_t moved = 0;
  for (auto [e, off] : placed) moved += e->numel() * dtype_bytes(m.param(e->hf_param).dtype);
  // Real bytes everywhere before timing (untouched pages read as zeros, faster than data).
  dev->copy(pack);
  dev->memcpy(other.data(), packed.data(), moved);
  dev->copy(unpack);
  double t_copy = time_it(*dev, o.reps, [&] { dev->memcpy(other.data(), packed.data(), moved); });
  double t_pack = time_it(*dev, o.reps, [&] { dev->copy(pack); });
  double t_unpack = time_it(*dev, o.reps, [&] { dev->copy(unpack); });
  // Check once: pack then unpack equals a direct replay.
  dev->copy(pack);
  dev->copy(unpack);
  std::vector<SynthJob> check;
  for (auto [e, off] : placed)
    check.push_back(SynthJob{params[size_t(e->engine_param)].data(), synth_seed(e->hf_param, 1), e->copy,
                             int32_t(dtype_bytes(m.param(e->hf_param).dtype)), false});
  dev->synchronize();
  int64_t wrong = dev->verify(check).mismatches;

  auto gbps = [&](double t) { return 2.0 * double(moved) / t / 1e9; };  // read + write
  Table t({{"op", "", true}, {"jobs", ""}, {"bytes", "B"}, {"time", "us"}, {"bw_rw", "GB/s"}, {"of_copy", "%"}, {"#wrong", ""}});
  t.add_title(m.name() + " inference " + o.inference + " rank " + std::to_string(o.rank) + ", " + std::to_string(groups.size()) +
              " weight group(s), device " + dev->describe() + ", " + std::to_string(o.reps) + " reps; bandwidth counts bytes read + written");
  t.add_row({"memcpy", "1", fmt_int(moved), fmt_fixed(t_copy * 1e6, 1), fmt_fixed(gbps(t_copy), 1), "100.0", "-"});
  t.add_row({"pack", fmt_int(int64_t(pack.size())), fmt_int(moved), fmt_fixed(t_pack * 1e6, 1), fmt_fixed(gbps(t_pack), 1),
             fmt_fixed(100 * t_copy / t_pack, 1), "-"});
  t.add_row({"unpack", fmt_int(int64_t(unpack.size())), fmt_int(moved), fmt_fixed(t_unpack * 1e6, 1),
             fmt_fixed(gbps(t_unpack), 1), fmt_fixed(100 * t_copy / t_unpack, 1), fmt_int(wrong)});
  t.print(std::cout);
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", m.name()}, {"inference", o.inference}, {"rank", o.rank}, {"device", dev->describe()},
                        {"groups", groups.size()}, {"bytes", moved}, {"reps", o.reps},
                        {"memcpy_s", t_copy}, {"pack_s", t_pack}, {"unpack_s", t_unpack},
                        {"pack_of_copy", t_copy / t_pack}, {"unpack_of_copy", t_copy / t_unpack}, {"wrong", wrong}};
    std::ofstream(o.json) << j.dump(1) << "\n";
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pack/unpack of real plan entries vs a plain copy of the same bytes"};
  Options o;
  app.add_option("--model,-m", o.model, "Bundled model or config.json")->capture_default_str();
  app.add_option("--inference,-i", o.inference, "Inference layout (one replica)")->capture_default_str();
  app.add_option("--rank", o.rank, "Inference rank whose plan is used")->capture_default_str();
  app.add_option("--device", o.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  app.add_option("--layers", o.layers, "Weight groups (transformer blocks) in the batch")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--reps", o.reps, "Timed repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--json", o.json, "Write the numbers to this JSON file");
  try {
    app.parse(argc, argv);
    return run(o);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "shardsync-kernel-bench: error: " << e.what() << "\n";
    return 2;
  }
}
