// shardsync-kernel-bench: pack and unpack of one weight group's real plan entries against a
// plain copy of the same bytes on the same device (CPU or GPU).
//
//   shardsync-kernel-bench --model qwen3-8b --inference tp2 --device cuda --layers 4
//
// pack:   full HF tensors (as a trainer holds them after its gather) -> one contiguous buffer
// unpack: that buffer -> the rank's engine parameters (strided destinations)
// memcpy: the same number of bytes, one contiguous device-to-device (or host) copy
//
// Both: the pack's strided pieces alone (runs shorter than the tensor: row-parallel slices).
// --align: where the HF tensors and the packed pieces start (default 256 bytes).
//
// direct: each piece copied straight from its HF tensor into its engine parameter (a one-pass
// read); direct+hash: the same copy hashing what it moves (--checksum's receiver side, the
// hash inside the copy); hash: those pieces hashed where they lie (--checksum's trainer side).
// The sums of direct+hash are checked against hash's.
//
// --ipc (cuda): the HF tensors live in a child process and are read through a CUDA IPC
// mapping, as a one-pass read does; rows for a contiguous copy of the same bytes over the
// mapping (the batched kernel), the pack, and the pack's strided pieces alone (runs shorter
// than the tensor: row-parallel slices), each against that contiguous copy (of_ipc).
#include <CLI/CLI.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "git_sha.hpp"  // SHARDSYNC_GIT_SHA
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
  bool ipc = false;
  int64_t align = 256;  // bytes: where each HF tensor and each packed piece starts
  std::string json;
};

// The child of --ipc: holds the HF tensors (synthesized) and exports them by one CUDA IPC
// handle, written to `out`; exits when `in` closes or says so.
[[noreturn]] void ipc_child(int64_t bytes, const std::vector<std::pair<int32_t, int64_t>>& tensors, const ModelSpec& m,
                            int in, int out) {
  int status = 0;
  try {
    auto dev = make_cuda_device(0);
    DeviceBuffer hf(dev.get(), bytes);
    for (auto [p, off] : tensors) {
      const ParamMeta& meta = m.param(p);
      dev->synth({SynthJob{hf.data() + off, synth_seed(p, 1), make_pack_desc(SubView::contiguous(meta.shape), 0),
                           int32_t(dtype_bytes(meta.dtype)), false}});
    }
    dev->synchronize();
    std::vector<uint8_t> h = dev->ipc_handle(hf.data());
    if (write(out, h.data(), h.size()) != ssize_t(h.size())) status = 1;
    char c = 0;
    if (read(in, &c, 1) < 0) status = 1;
  } catch (const std::exception& e) {
    std::cerr << "shardsync-kernel-bench: error: the --ipc source process: " << e.what() << "\n";
    status = 1;
  }
  _exit(status);
}

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
  // The first `layers` transformer blocks this rank holds.
  std::vector<int32_t> groups;
  for (const EngineParam& p : plan.params)
    if (p.layer >= 0 && (groups.empty() || groups.back() != p.group) && int(groups.size()) < o.layers) groups.push_back(p.group);
  auto in_groups = [&](const PlanEntry& e) {
    return !e.is_fill() && std::find(groups.begin(), groups.end(), plan.params[size_t(e.engine_param)].group) != groups.end();
  };
  // --ipc: the HF tensors' places in the child's allocation (decided before the fork, so
  // both processes agree; no CUDA call before it).
  std::vector<int64_t> hf_offset(m.params().size(), -1);
  std::vector<std::pair<int32_t, int64_t>> hf_places;
  int64_t hf_bytes = 0;
  for (const PlanEntry& e : plan.entries)
    if (in_groups(e) && hf_offset[size_t(e.hf_param)] < 0) {
      hf_offset[size_t(e.hf_param)] = hf_bytes;
      hf_places.emplace_back(e.hf_param, hf_bytes);
      hf_bytes += (m.param(e.hf_param).bytes() + o.align - 1) / o.align * o.align;
    }
  int to_child[2] = {-1, -1}, to_parent[2] = {-1, -1};
  pid_t child = -1;
  if (o.ipc) {
    if (o.device != "cuda") throw Error("--ipc needs --device cuda");
    if (pipe(to_child) || pipe(to_parent)) throw Error("--ipc: pipe() failed");
    child = fork();
    if (child < 0) throw Error("--ipc: fork() failed");
    if (child == 0) {  // the child keeps only its ends: its read sees EOF when the parent closes
      close(to_child[1]);
      close(to_parent[0]);
      ipc_child(hf_bytes, hf_places, m, to_child[0], to_parent[1]);
    }
    close(to_child[0]);
    close(to_parent[1]);
  }
  auto dev = o.device == "cuda" ? make_cuda_device(0) : make_cpu_device();
  uint8_t* mapped = nullptr;
  if (o.ipc) {
    std::vector<uint8_t> h(64);  // cudaIpcMemHandle_t
    ssize_t got = read(to_parent[0], h.data(), h.size());
    if (got != ssize_t(h.size())) throw Error("--ipc: the source process sent no IPC handle");
    mapped = dev->ipc_open(h);
  }
  std::vector<DeviceBuffer> hf(m.params().size());
  std::vector<DeviceBuffer> params;
  params.resize(plan.params.size());
  int64_t bytes = 0;
  std::vector<CopyJob> pack, unpack, direct;
  DeviceBuffer packed;
  std::vector<std::pair<const PlanEntry*, int64_t>> placed;
  for (const PlanEntry& e : plan.entries) {
    if (!in_groups(e)) continue;
    placed.emplace_back(&e, bytes);
    bytes += (e.numel() * dtype_bytes(m.param(e.hf_param).dtype) + o.align - 1) / o.align * o.align;
  }
  if (placed.empty()) throw Error("no plan entries in the chosen layers");
  packed = DeviceBuffer(dev.get(), bytes);
  DeviceBuffer other(dev.get(), bytes);
  for (size_t i = 0; i < plan.params.size(); ++i)
    if (std::find(groups.begin(), groups.end(), plan.params[i].group) != groups.end())
      params[i] = DeviceBuffer(dev.get(), plan.params[i].bytes());
  std::vector<CopyJob> strided;  // pack jobs that are more than one run (--ipc rows)
  int64_t strided_bytes = 0;
  for (auto [e, off] : placed) {
    const ParamMeta& p = m.param(e->hf_param);
    const uint8_t* src = nullptr;
    if (mapped) {
      src = mapped + hf_offset[size_t(e->hf_param)];
    } else {
      if (!hf[size_t(e->hf_param)].data()) {
        hf[size_t(e->hf_param)] = DeviceBuffer(dev.get(), p.bytes());
        dev->synth({SynthJob{hf[size_t(e->hf_param)].data(), synth_seed(e->hf_param, 1),
                             make_pack_desc(SubView::contiguous(p.shape), 0), int32_t(dtype_bytes(p.dtype)), false}});
      }
      src = hf[size_t(e->hf_param)].data();
    }
    int32_t eb = int32_t(dtype_bytes(p.dtype));
    CopyDesc to_buf = pack_copy(e->copy);  // HF tensor -> packed at 0
    CopyDesc from_buf = unpack_copy(e->copy);  // packed at 0 -> engine parameter
    pack.push_back(CopyJob{src, packed.data() + off, to_buf, eb});
    unpack.push_back(CopyJob{packed.data() + off, params[size_t(e->engine_param)].data(), from_buf, eb});
    direct.push_back(CopyJob{src, params[size_t(e->engine_param)].data(), e->copy, eb, e->hf_param, &e->copy});
    if (to_buf.dims.size() > 1) {
      strided.push_back(pack.back());
      strided_bytes += e->numel() * eb;
    }
  }
  int64_t moved = 0;
  for (auto [e, off] : placed) moved += e->numel() * dtype_bytes(m.param(e->hf_param).dtype);
  // --ipc: the same bytes as one contiguous copy over the mapping (the batched kernel).
  std::vector<CopyJob> ipc_copy;
  const int64_t ipc_bytes = std::min(moved, hf_bytes) / 16 * 16;  // within the mapping
  if (mapped) {
    CopyDesc d;
    d.numel = ipc_bytes / 2;
    d.dims = {CopyDim{ipc_bytes / 2, 1, 1}};
    ipc_copy.push_back(CopyJob{mapped, other.data(), d, 2});
  }
  // Real bytes everywhere before timing (untouched pages read as zeros, faster than data).
  dev->copy(pack);
  dev->memcpy(other.data(), packed.data(), moved);
  dev->copy(unpack);
  double t_copy = time_it(*dev, o.reps, [&] { dev->memcpy(other.data(), packed.data(), moved); });
  double t_pack = time_it(*dev, o.reps, [&] { dev->copy(pack); });
  double t_unpack = time_it(*dev, o.reps, [&] { dev->copy(unpack); });
  // --checksum's two sides on the direct pieces, their sums compared.
  std::vector<CopyJob> direct_plain = direct;
  for (CopyJob& j : direct_plain) j.hash_tensor = -1;
  std::vector<HashJob> at_source;
  for (const CopyJob& j : direct) at_source.push_back(HashJob{j.src, j.desc, j.elem_bytes, j.hash_tensor, 0, true});
  std::vector<uint64_t> landed_sums;
  double t_direct = time_it(*dev, o.reps, [&] { dev->copy(direct_plain); });
  double t_direct_hash = time_it(*dev, o.reps, [&] { landed_sums = dev->sums(dev->copy_hashed(direct)); });
  std::vector<uint64_t> source_sums;
  double t_hash = time_it(*dev, o.reps, [&] { source_sums = dev->checksum(at_source); });
  int64_t sums_wrong = 0;
  for (size_t i = 0; i < direct.size(); ++i) sums_wrong += landed_sums.at(i) != source_sums.at(i);
  double t_ipc = 0, t_strided = 0;
  int64_t ipc_wrong = 0;
  if (!strided.empty()) t_strided = time_it(*dev, o.reps, [&] { dev->copy(strided); });
  if (mapped) {
    t_ipc = time_it(*dev, o.reps, [&] { dev->copy(ipc_copy); });
    // The contiguous copy checked against the source's bytes, tensor by tensor.
    std::vector<SynthJob> check_ipc;
    for (auto [p, off] : hf_places) {
      const ParamMeta& meta = m.param(p);
      if (off + meta.bytes() > ipc_bytes) break;
      const int64_t eb = dtype_bytes(meta.dtype);
      check_ipc.push_back(SynthJob{other.data() + off, synth_seed(p, 1),
                                   make_pack_desc(SubView::contiguous(meta.shape), 0), int32_t(eb), false});
    }
    dev->synchronize();
    ipc_wrong = dev->verify(check_ipc).mismatches;
  }
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
  t.add_row({"direct", fmt_int(int64_t(direct.size())), fmt_int(moved), fmt_fixed(t_direct * 1e6, 1),
             fmt_fixed(gbps(t_direct), 1), fmt_fixed(100 * t_copy / t_direct, 1), "-"});
  t.add_row({"direct+hash", fmt_int(int64_t(direct.size())), fmt_int(moved), fmt_fixed(t_direct_hash * 1e6, 1),
             fmt_fixed(gbps(t_direct_hash), 1), fmt_fixed(100 * t_copy / t_direct_hash, 1), fmt_int(sums_wrong)});
  t.add_row({"hash", fmt_int(int64_t(direct.size())), fmt_int(moved), fmt_fixed(t_hash * 1e6, 1),
             fmt_fixed(double(moved) / t_hash / 1e9, 1), fmt_fixed(100 * t_copy / t_hash, 1), "-"});
  auto bw = [](int64_t b, double s) { return 2.0 * double(b) / s / 1e9; };
  if (!mapped && !strided.empty())
    t.add_row({"strided", fmt_int(int64_t(strided.size())), fmt_int(strided_bytes), fmt_fixed(t_strided * 1e6, 1),
               fmt_fixed(bw(strided_bytes, t_strided), 1), fmt_fixed(100 * bw(strided_bytes, t_strided) / gbps(t_copy), 1), "-"});
  if (mapped) {
    const double ref = bw(ipc_bytes, t_ipc);
    t.add_row({"copy-ipc", "1", fmt_int(ipc_bytes), fmt_fixed(t_ipc * 1e6, 1), fmt_fixed(ref, 1),
               fmt_fixed(100 * ref / gbps(t_copy), 1), fmt_int(ipc_wrong)});
    t.add_row({"pack-ipc", fmt_int(int64_t(pack.size())), fmt_int(moved), fmt_fixed(t_pack * 1e6, 1),
               fmt_fixed(gbps(t_pack), 1), fmt_fixed(100 * t_copy / t_pack, 1), "-"});
    if (!strided.empty())
      t.add_row({"strided-ipc", fmt_int(int64_t(strided.size())), fmt_int(strided_bytes), fmt_fixed(t_strided * 1e6, 1),
                 fmt_fixed(bw(strided_bytes, t_strided), 1), fmt_fixed(100 * bw(strided_bytes, t_strided) / gbps(t_copy), 1), "-"});
    std::cout << "# --ipc: pack reads the HF tensors through a CUDA IPC mapping of another process's memory; of the "
                 "contiguous copy over the mapping (copy-ipc): pack "
              << fmt_fixed(100 * gbps(t_pack) / ref, 1) << "%"
              << (strided.empty() ? std::string() : ", strided pieces alone " + fmt_fixed(100 * bw(strided_bytes, t_strided) / ref, 1) + "%")
              << "\n";
  }
  t.print(std::cout);
  std::cout << "# --checksum: the copy that hashes what it moves takes " << fmt_fixed(100 * (t_direct_hash / t_direct - 1), 1)
            << "% longer than the plain copy (direct+hash vs direct); hashing the pieces where they lie takes "
            << fmt_fixed(100 * t_hash / t_direct, 1) << "% of the plain copy's time (hash reads only: its bw column)\n";
  if (!o.json.empty()) {
    nlohmann::json j = {{"model", m.name()}, {"inference", o.inference}, {"rank", o.rank}, {"device", dev->describe()},
                        {"groups", groups.size()}, {"bytes", moved}, {"reps", o.reps},
                        {"memcpy_s", t_copy}, {"pack_s", t_pack}, {"unpack_s", t_unpack},
                        {"pack_of_copy", t_copy / t_pack}, {"unpack_of_copy", t_copy / t_unpack}, {"wrong", wrong},
                        {"align", o.align}, {"strided_jobs", strided.size()}, {"strided_bytes", strided_bytes},
                        {"strided_s", t_strided},
                        {"strided_of_copy", strided.empty() ? 0.0 : bw(strided_bytes, t_strided) / gbps(t_copy)},
                        {"direct_s", t_direct}, {"direct_hash_s", t_direct_hash}, {"hash_s", t_hash},
                        {"hashed_copy_overhead", t_direct_hash / t_direct - 1}, {"sums_wrong", sums_wrong},
                        {"commit", SHARDSYNC_GIT_SHA}};
    if (mapped) {
      j["ipc"] = {{"copy_s", t_ipc}, {"copy_wrong", ipc_wrong}, {"pack_of_ipc_copy", gbps(t_pack) / bw(ipc_bytes, t_ipc)},
                  {"strided_of_ipc_copy", strided.empty() ? 0.0 : bw(strided_bytes, t_strided) / bw(ipc_bytes, t_ipc)},
                  {"copy_bytes", ipc_bytes}};
    }
    std::ofstream(o.json) << j.dump(1) << "\n";
  }
  if (mapped) {
    dev->ipc_close(mapped);
    close(to_child[1]);  // the source process exits
    int st = 0;
    waitpid(child, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) throw Error("--ipc: the source process failed");
  }
  return wrong == 0 && ipc_wrong == 0 && sums_wrong == 0 ? 0 : 1;
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
  app.add_flag("--ipc", o.ipc,
               "cuda: read the HF tensors through a CUDA IPC mapping of a child process's memory (the "
               "one-pass path), with a contiguous copy over the mapping and the strided pieces alone");
  app.add_option("--align", o.align,
                 "Bytes: each HF tensor starts at a multiple of this in the source, each piece in the packed buffer")
      ->check(CLI::Range(int64_t(16), int64_t(1) << 30))
      ->capture_default_str();
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
