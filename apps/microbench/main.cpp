// shardsync-microbench: Google Benchmark micro-benchmarks of the pieces a weight sync is made
// of, for the performance gate (scripts/perf-check.py) and for anyone tuning them.
//
//   shardsync-microbench [--benchmark_filter=Copy] [--benchmark_out=mb.json --benchmark_out_format=json]
//   mpirun -np 2 shardsync-microbench            # the engine benchmarks (many tiny tensors)
//   shardsync-microbench --no-avx2 --tile-width=128  # transpose kernel and tile other than the default
//   mpirun -np 2 shardsync-microbench --transport=mpi  # the engine benchmarks over a named transport
//
// One process: pack and unpack of real plan entries (every rank of one replica; packed in
// one launch, as the engines do, and one launch per rank) against memcpy of the same bytes
// (BM_Copy/<case>/<op>), plan recording per rank (BM_PlanRecord) and plan file loading
// (BM_PlanLoad). Under mpirun (2 ranks: trainer TP1, inference TP1): one sync of each engine on a model of thousands
// of tiny tensors (BM_EngineSync/<engine>), every byte verified, with the per-tensor cost.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "device/device.hpp"
#include "device/fast_copy.hpp"
#include "engine/engine.hpp"
#include "engine/schedule.hpp"
#include "layout/parse.hpp"
#include "plan/plan.hpp"
#include "plan/store.hpp"
#include "transport/transport.hpp"

using namespace shardsync;

namespace {

// ---- pack / unpack of real plan entries ---------------------------------------------------

// Bytes of entries per case: well above the last-level cache, so memory bandwidth is measured.
constexpr int64_t kCaseBytes = int64_t(64) << 20;

struct CopyCase {
  const char* name;
  const char* model;
  const char* inference;
  const char* within;                // HF names taken contain this ("" for any)...
  std::vector<const char*> any_of;   // ... and one of these
  const char* what;
};

const std::vector<CopyCase>& copy_cases() {
  static const std::vector<CopyCase> cases = {
      {"qkv_gqa", "qwen3-235b-a22b", "tp8", "self_attn.", {"q_proj", "k_proj", "v_proj"},
       "QKV column-parallel, 4 KV heads replicated over TP8"},
      {"expert_w13", "qwen3-235b-a22b", "tp4", "experts.", {"gate_proj", "up_proj"},
       "expert gate/up, MoE-TP4 narrow on dim 0"},
      {"expert_w2", "qwen3-235b-a22b", "tp4", "experts.", {"down_proj"}, "expert down, MoE-TP4 narrow on dim 1"},
      {"row_parallel", "qwen3-235b-a22b", "tp4", "self_attn.", {"o_proj"}, "o_proj row-parallel, narrow on dim 1"},
      {"llama4_transpose", "llama-4-scout-17b-16e", "tp4", "feed_forward.experts.", {""},
       "Llama-4 fused experts: chunk, transpose, TP narrow"},
  };
  return cases;
}

bool matches(const CopyCase& c, const std::string& name) {
  return name.find(c.within) != std::string::npos &&
         std::any_of(c.any_of.begin(), c.any_of.end(), [&](const char* t) { return name.find(t) != std::string::npos; });
}

// The entries of every rank of one replica (the consumers one trainer rank packs for), a
// source buffer per HF tensor holding just the span they touch (a Llama-4 fused expert
// tensor is 2.7 GB; one expert's slice is enough), a destination buffer per entry.
struct CopySet {
  std::unique_ptr<Device> dev = make_cpu_device();
  std::vector<DeviceBuffer> src, dst;
  DeviceBuffer packed, other;
  std::vector<CopyJob> pack, unpack;      // pack: one launch for all ranks, as the engines' rounds
  std::vector<std::vector<CopyJob>> pack_each;  // one launch per rank
  std::vector<CopyDesc> direct;           // source -> destination, for the check
  std::vector<size_t> direct_src;         // its source buffer
  std::vector<int32_t> direct_eb;         // its element size
  int64_t bytes = 0;
  int ranks = 0;
};

// Cuts the outermost loops of a copy until it moves at most `cap` bytes (a contiguous copy,
// one loop, gets shorter). A transpose keeps its two loops whole: cutting them would narrow
// the source rows it reads, which slows it, unlike the plan's entries (Llama-4: one expert's
// 2048 columns of 5120 rows).
CopyDesc trim(CopyDesc d, int64_t eb, int64_t cap) {
  const size_t cuttable = d.dims.size() - (copy_transposes(d) ? 2 : 0);
  for (size_t k = 0; k < cuttable && d.numel * eb > cap; ++k) {
    const int64_t inner = d.numel / d.dims[k].size;
    d.dims[k].size = std::max<int64_t>(1, cap / (inner * eb));
    d.numel = inner * d.dims[k].size;
  }
  return d;
}

// Elements a copy touches on one side, from offset 0 (source_range of the view algebra; the
// destination side is the source side of the reversed copy).
int64_t extent(const CopyDesc& d, bool src) {
  CopyDesc e = d;
  if (!src) {
    e.src_offset = d.dst_offset;
    for (CopyDim& k : e.dims) k.src_stride = k.dst_stride;
  }
  int64_t lo = 0, hi = 0;
  source_range(e, &lo, &hi);
  return hi;
}

CopySet build_copy_set(const CopyCase& c) {
  ModelSpec m = load_model(c.model);
  InferenceLayout l = parse_inference_spec(c.inference);
  l.replicas = 1;
  InferencePlacement inf(m, l);
  CopySet s;
  s.ranks = inf.world_size();
  // Per rank, its matching entries by HF tensor; tensors taken in rank 0's order until the
  // case has its bytes (each rank's entry cut to an equal share of half of them; a transpose
  // stays whole: Llama-4 takes one expert's gate_up of each of the four ranks, 80 MiB).
  std::vector<std::map<int32_t, std::vector<CopyDesc>>> by_rank(size_t(s.ranks));
  std::vector<int32_t> order;
  for (int r = 0; r < s.ranks; ++r)
    for (const PlanEntry& e : record_rank_plan(m, inf, r).entries) {
      if (e.is_fill() || !matches(c, m.param(e.hf_param).name)) continue;
      const int64_t eb = dtype_bytes(m.param(e.hf_param).dtype);
      auto& v = by_rank[size_t(r)][e.hf_param];
      if (r == 0 && v.empty()) order.push_back(e.hf_param);
      v.push_back(trim(e.copy, eb, kCaseBytes / 2 / s.ranks));
    }
  struct Picked {
    CopyDesc d;
    int rank;
    size_t src;
  };
  std::vector<Picked> picked;
  std::vector<int32_t> src_eb;
  for (int32_t hf : order) {
    if (s.bytes >= kCaseBytes) break;
    const int64_t eb = dtype_bytes(m.param(hf).dtype);
    // The k-th entry of every rank, while the case is short of its bytes.
    const size_t first = picked.size();
    for (size_t k = 0; s.bytes < kCaseBytes; ++k) {
      bool any = false;
      for (int r = 0; r < s.ranks; ++r) {
        const auto& v = by_rank[size_t(r)][hf];
        if (k >= v.size()) continue;
        picked.push_back(Picked{v[k], r, s.src.size()});
        s.bytes += v[k].numel * eb;
        any = true;
      }
      if (!any) break;
    }
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (size_t i = first; i < picked.size(); ++i) {
      int64_t a = 0, b = 0;
      source_range(picked[i].d, &a, &b);
      lo = std::min(lo, a);
      hi = std::max(hi, b);
    }
    for (size_t i = first; i < picked.size(); ++i) {
      picked[i].d.src_offset -= lo;
      picked[i].d.dst_offset = 0;
    }
    s.src.emplace_back(s.dev.get(), (hi - lo) * eb);
    uint8_t* p = s.src.back().data();
    for (int64_t i = 0; i < (hi - lo) * eb; ++i) p[i] = uint8_t(i * 151 + (i >> 9) + hf);  // real pages
    src_eb.push_back(int32_t(eb));
  }
  if (picked.empty()) throw Error(std::string("microbench case ") + c.name + ": no plan entries matched");
  s.packed = DeviceBuffer(s.dev.get(), s.bytes);
  s.other = DeviceBuffer(s.dev.get(), s.bytes);
  s.pack_each.resize(size_t(s.ranks));
  int64_t off = 0;
  const int64_t chunk_bytes = SyncOptions{}.chunk_bytes;
  for (const Picked& k : picked) {
    const int32_t eb = src_eb[k.src];
    s.dst.emplace_back(s.dev.get(), extent(k.d, false) * eb);
    std::memset(s.dst.back().data(), 0, size_t(s.dst.back().size()));
    s.direct.push_back(k.d);
    s.direct_src.push_back(k.src);
    s.direct_eb.push_back(eb);
    // In the pieces the engines cut an entry into for chunks of the default size.
    for (const CopyDesc& part : split_copy(k.d, chunk_bytes / eb)) {
      const CopyJob pack{s.src[k.src].data(), s.packed.data() + off, pack_copy(part), eb};
      s.pack.push_back(pack);
      s.pack_each[size_t(k.rank)].push_back(pack);
      s.unpack.push_back(CopyJob{s.packed.data() + off, s.dst.back().data(), unpack_copy(part), eb});
      off += part.numel * eb;
    }
  }
  std::memset(s.packed.data(), 0, size_t(s.bytes));
  std::memset(s.other.data(), 0, size_t(s.bytes));
  return s;
}

// Pack then unpack must give what the reference copy (execute_copy) gives straight from the
// source: the engines' tests verify every byte; this keeps the benchmark from timing a
// broken copy.
void check_round_trip(CopySet& s, const char* name) {
  for (bool each : {false, true}) {
    std::memset(s.packed.data(), 0, size_t(s.bytes));
    for (DeviceBuffer& d : s.dst) std::memset(d.data(), 0, size_t(d.size()));
    if (each)
      for (const auto& jobs : s.pack_each) s.dev->copy(jobs);
    else
      s.dev->copy(s.pack);
    s.dev->copy(s.unpack);
    s.dev->synchronize();
    for (size_t i = 0; i < s.direct.size(); ++i) {
      const int64_t eb = s.direct_eb[i];
      std::vector<uint8_t> want(size_t(extent(s.direct[i], false) * eb), 0);
      execute_copy(s.direct[i], s.src[s.direct_src[i]].data(), want.data(), eb);
      if (std::memcmp(want.data(), s.dst[i].data(), want.size()) != 0)
        throw Error(std::string("microbench case ") + name + ": " + (each ? "pack_each" : "pack") +
                    " + unpack of entry " + std::to_string(i) + " differs from the reference copy");
    }
  }
}

// One op (pack, pack_each, unpack, or memcpy itself) per iteration; the iteration's time is the
// op's. For the kernels, each iteration also runs memcpy of the same bytes right before, and
// the counter vs_memcpy is the median over iterations of memcpy time / op time: a ratio of two
// copies taken milliseconds apart, so a machine that slows down for a while (a shared VM)
// slows both (what the performance gate compares).
void BM_Copy(benchmark::State& st, const CopyCase* c, const std::string& op) {
  static std::map<std::string, std::unique_ptr<CopySet>> sets;  // built once per case
  auto& set = sets[c->name];
  if (!set) {
    set = std::make_unique<CopySet>(build_copy_set(*c));
    check_round_trip(*set, c->name);
  }
  CopySet& s = *set;
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  std::vector<double> ratios;
  for (auto _ : st) {
    double memcpy_s = 0;
    if (op != "memcpy") {
      const auto m0 = Clock::now();
      s.dev->memcpy(s.other.data(), s.packed.data(), s.bytes);
      s.dev->synchronize();
      memcpy_s = seconds(m0, Clock::now());
    }
    const auto t0 = Clock::now();
    if (op == "memcpy") s.dev->memcpy(s.other.data(), s.packed.data(), s.bytes);
    else if (op == "pack_each")
      for (const auto& jobs : s.pack_each) s.dev->copy(jobs);
    else s.dev->copy(op == "pack" ? s.pack : s.unpack);
    s.dev->synchronize();
    const double op_s = seconds(t0, Clock::now());
    st.SetIterationTime(op_s);
    if (op != "memcpy" && op_s > 0) ratios.push_back(memcpy_s / op_s);
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * s.bytes);
  st.counters["entries"] = double(s.direct.size());
  st.counters["pieces"] = double(s.pack.size());
  st.counters["ranks"] = double(s.ranks);
  if (!ratios.empty()) {
    std::nth_element(ratios.begin(), ratios.begin() + ptrdiff_t(ratios.size() / 2), ratios.end());
    st.counters["vs_memcpy"] = ratios[ratios.size() / 2];
  }
  st.SetLabel(c->what);
}

// ---- plans ----------------------------------------------------------------------------------

struct PlanCase {
  const char* model;
  const char* inference;
};
const PlanCase kPlanCases[] = {{"kimi-k2-instruct", "tp32,ep32"}, {"qwen3-235b-a22b", "dp16,ep16"}};

void BM_PlanRecord(benchmark::State& st, const PlanCase* c) {
  ModelSpec m = load_model(c->model);
  InferenceLayout l = parse_inference_spec(c->inference);
  l.replicas = 1;
  InferencePlacement inf(m, l);
  int64_t entries = 0;
  for (auto _ : st) {
    RankPlan p = record_rank_plan(m, inf, 0);
    entries = int64_t(p.entries.size());
    benchmark::DoNotOptimize(p.entries.data());
  }
  st.counters["entries"] = double(entries);
}

void BM_PlanLoad(benchmark::State& st, const PlanCase* c) {
  ModelSpec m = load_model(c->model);
  InferenceLayout l = parse_inference_spec(c->inference);
  l.replicas = 1;
  InferencePlacement inf(m, l);
  const char* tmp = std::getenv("TMPDIR");
  std::filesystem::path file = std::filesystem::path(tmp ? tmp : "/tmp") /
                               ("shardsync-microbench-" + std::to_string(::getpid()) + "-" + c->model + ".h5");
  write_plans(file.string(), m, inf, record_plans(m, inf));
  int64_t entries = 0;
  for (auto _ : st) {
    PlanFile f = read_plans(file.string(), m, inf);
    entries = 0;
    for (const RankPlan& p : f.plans) entries += int64_t(p.entries.size());
  }
  st.counters["entries"] = double(entries);
  st.counters["file_MiB"] = double(std::filesystem::file_size(file)) / double(1 << 20);
  std::filesystem::remove(file);
}

// ---- engines: per-tensor control cost (mpirun) --------------------------------------------

// Thousands of tiny tensors (so moving the bytes costs nothing next to handling the tensor):
// many-tiny-moe, trainer EP2 (2 ranks) -> one inference replica of DP2/EP2 (2 ranks).
struct EngineSetup {
  ModelSpec model = load_model("many-tiny-moe");
  TrainerPlacement trainer{model, parse_trainer_spec("tp1")};
  InferencePlacement inference{model, [] {
                                 InferenceLayout l = parse_inference_spec("tp1");
                                 l.replicas = 1;
                                 return l;
                               }()};
  std::vector<RankPlan> plans = record_plans(model, inference);
  World world;
  std::unique_ptr<Engines> engines;
  int sync_index = 0;
  uint64_t version = 1;
};
EngineSetup* g_engine = nullptr;

void BM_EngineSync(benchmark::State& st, EngineKind kind) {
  EngineSetup& e = *g_engine;
  const double tensors = double(e.model.params().size());
  double total = 0;
  for (auto _ : st) {
    RankStats mine = e.engines->sync(kind, e.sync_index++, e.version++);
    std::vector<RankStats> all = e.engines->collect(mine);
    double t = mine.total_s;
    int64_t wrong = 0;
    for (const RankStats& r : all) {
      t = std::max(t, r.total_s);
      wrong += r.mismatches;
    }
    if (wrong > 0) {  // a benchmark of a wrong copy measures nothing: end the job
      std::cerr << "shardsync-microbench: error: " << engine_name(kind) << ": " << wrong << " mismatched elements\n";
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    st.SetIterationTime(t);  // the slowest rank (rank 0 holds every rank's stats)
    total += t;
  }
  st.counters["tensors"] = tensors;
  st.counters["us_per_tensor"] = total / double(st.iterations()) / tensors * 1e6;
}

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun: the engine benchmarks on every rank, reported by rank 0. Otherwise the
  // single-process benchmarks, without initializing MPI.
  const bool mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  int rank = 0, size = 1, status = 0;
  std::vector<char*> args;
  std::string transport;  // --transport=NAME for the engine benchmarks; default: as shardsync sync chooses
  for (int k = 0; k < argc; ++k) {
    // --no-avx2: transpose with the SSE2 kernel; --tile-width=64|128: the transpose tile
    // (both to compare with the default: AVX2 where the CPU has it, 64).
    if (std::strcmp(argv[k], "--no-avx2") == 0) fast_copy_allow_avx2(false);
    else if (std::strncmp(argv[k], "--tile-width=", 13) == 0) {
      const std::string w = argv[k] + 13;
      if (w != "64" && w != "128") {
        std::cerr << "shardsync-microbench: error: --tile-width=" << w << ": expected 64 or 128\n";
        return 2;  // before MPI starts: every rank stops here alike
      }
      fast_copy_set_tile_width(std::stoi(w));
    } else if (std::strncmp(argv[k], "--transport=", 12) == 0) {
      transport = argv[k] + 12;
      const auto& reg = transport_registry();
      if (std::none_of(reg.begin(), reg.end(), [&](const TransportInfo& t) { return t.name == transport; })) {
        std::cerr << "shardsync-microbench: error: --transport=" << transport << ": expected one of this build's "
                  << "transports (shardsync info)\n";
        return 2;
      }
    } else {
      args.push_back(argv[k]);
    }
  }
  try {
    benchmark::AddCustomContext("copy_transpose_kernel", fast_copy_transpose_kernel());
    if (mpi) {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank);
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      g_engine = new EngineSetup;
      const int need = g_engine->trainer.world_size() + g_engine->inference.world_size();
      if (size != need) {
        if (rank == 0) std::cerr << "shardsync-microbench: error: mpirun -np " << size << ": the engine benchmarks need " << need << " ranks\n";
        MPI_Finalize();
        return 2;
      }
      g_engine->world = World::create(MPI_COMM_WORLD, g_engine->trainer, g_engine->inference);
      set_idle_sleep_allowed(unsigned(size) > std::max(1u, std::thread::hardware_concurrency()));
      SyncOptions so;
      so.transport = transport.empty() ? choose_transport(MemKind::kHost, true) : transport;
      g_engine->engines = std::make_unique<Engines>(g_engine->world, g_engine->model, g_engine->trainer,
                                                    g_engine->inference, g_engine->plans, so);
      g_engine->engines->bootstrap();
      for (const EngineSpec& e : engine_table())
        benchmark::RegisterBenchmark((std::string("BM_EngineSync/") + e.name).c_str(), BM_EngineSync, e.kind)
            ->Iterations(5)
            ->Repetitions(5)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      // Only rank 0 writes results: the other ranks drop --benchmark_out.
      if (rank != 0)
        args.erase(std::remove_if(args.begin() + 1, args.end(),
                                  [](char* a) { return std::strncmp(a, "--benchmark_out", 15) == 0; }),
                   args.end());
    } else {
      for (const CopyCase& c : copy_cases())
        for (const char* op : {"memcpy", "pack", "pack_each", "unpack"})
          benchmark::RegisterBenchmark((std::string("BM_Copy/") + c.name + "/" + op).c_str(), BM_Copy, &c, std::string(op))
              ->Unit(benchmark::kMillisecond)
              ->UseManualTime()
              ->Iterations(15);
      for (const PlanCase& c : kPlanCases) {
        benchmark::RegisterBenchmark((std::string("BM_PlanRecord/") + c.model).c_str(), BM_PlanRecord, &c)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark((std::string("BM_PlanLoad/") + c.model).c_str(), BM_PlanLoad, &c)
            ->Unit(benchmark::kMillisecond);
      }
    }
    int n = int(args.size());
    benchmark::Initialize(&n, args.data());
    // Every rank sees the same arguments, so every rank stops here alike (and shuts down).
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) status = 2;
    else if (rank == 0) benchmark::RunSpecifiedBenchmarks();
    else {
      NullReporter quiet;
      benchmark::RunSpecifiedBenchmarks(&quiet);
    }
    benchmark::Shutdown();
  } catch (const std::exception& e) {
    std::cerr << "shardsync-microbench: error: " << e.what() << "\n";
    if (mpi) MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  }
  if (mpi) {
    g_engine->engines->finish();
    g_engine->engines->shutdown();
    g_engine->engines.reset();
    delete g_engine;
    MPI_Finalize();
  }
  return status;
}
