#include "sync_runner.hpp"

#include <unistd.h>

#include <thread>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "common/error.hpp"
#include "common/table.hpp"
#include "device/device.hpp"
#include "engine/checksum.hpp"
#include "plan/store.hpp"
#include "report/result.hpp"

namespace shardsync {

void progress_line(const std::string& line) {
  std::cerr << line + "\n" << std::flush;
}

void add_data_path_options(CLI::App* app, SyncRunOptions* o) {
  add_layout_options(app, &o->setup);
  app->add_option("--memory", o->memory,
                  "Where weights and buffers live: host, or cuda (one GPU per rank where "
                  "there are enough; trainers on the first half of a node's GPUs)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  app->add_option("--plans", o->plans_file,
                  "Load plans from this HDF5 file (shardsync plan record) instead of recording");
  app->add_option("--send-buffer", o->engine.send_buffer_bytes,
                  "Trainer's registered send buffer (e.g. 64M)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app->add_option("--recv-buffer", o->engine.recv_buffer_bytes,
                  "Inference rank's registered receive buffer (e.g. 16M)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app->add_option("--chunk", o->engine.chunk_bytes,
                  "Largest packed chunk (capped at half of each buffer)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app->add_flag("!--no-verify", o->engine.verify,
                "Skip verification (pure timing; never the default)");
  app->add_flag("--checksum", o->engine.checksum,
                "Pull engines: the trainer hashes each piece where it lies, the receiver where it landed (right "
                "after its copy), and the sums are compared; a difference names the tensor, the parameter's "
                "elements and the trainer. The trainers' hashing time is reported apart (hash_s). The broadcast "
                "is not checksummed; not with --wire fp8 or --dedupe-node. Synthetic values are still verified");
  add_update_options(app, &o->engine.updates);
  app->add_flag("--delta", o->engine.delta,
                "Pull engines: each packed chunk travels as what changed since it was last sent (a bitmap of "
                "changed 16-bit words and their values), compared by the trainer with its copy of the chunk as "
                "last sent; every piece is packed. Host or GPU memory (records built and applied on the device)");
  app->add_option("--anchor-every", o->engine.anchor_every,
                  "With --delta: every Nth sync of an engine sends every chunk whole (an anchor), as does "
                  "any sync a replacement rank joins at")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app->add_flag("--dedupe-node", o->engine.dedupe_node,
                "Pull engines: a piece that several inference ranks of one replica on one node need identically "
                "crosses the network once; one of them (balanced) pulls it, the others copy it from its live "
                "weights inside the node when its sync is complete. Nodes are host names "
                "(SHARDSYNC_FAKE_HOSTS=N pretends N ranks a host). Not with --rendezvous");
  app->add_option("--json", o->json_out, "Write results with provenance to this JSON file");
  app->add_flag("--quiet,-q", o->quiet, "No progress lines on stderr");
  app->add_option("--rendezvous", o->engine.rendezvous,
                  "Directory (shared by the job's nodes) where trainer ranks publish how to reach "
                  "them, so that a "
                  "replacement process (shardsync join) can take a dead inference rank's place; "
                  "needs the ucx transport");
}

void add_sync_run_options(CLI::App* app, SyncRunOptions* o,
                          const std::vector<EngineKind>& default_engines) {
  add_data_path_options(app, o);
  add_engine_option(app, &o->engines, default_engines);
  std::string transports;
  for (const auto& t : transport_registry())
    transports += (transports.empty() ? "" : ", ") + t.name;
  app->add_option("--syncs,-n", o->syncs, "Timed syncs per engine")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app->add_option("--warmup,-w", o->warmup,
                  "Warm-up syncs per engine, excluded from averages (the first is cold)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app->add_option(
         "--transport", o->transport,
         "Transport for pulls and control messages: auto (cuda_ipc for GPU memory, else the first "
         "built), or one of: " +
             transports)
      ->capture_default_str();
  app->add_option("--measure-link", o->link_iters,
                  "Before the engines, time reads of trainer rank 0's send buffer by inference rank 0 "
                  "over the same transport (the path's raw copy bandwidth): a 25 ms warm-up, then three "
                  "rounds of this many reads, the fastest round reported")
      ->check(CLI::Range(0, 100000));
  app->add_option("--measure-copy", o->copy_iters,
                  "Before the engines, time this many 256 MiB copies within trainer rank 0's device (memory "
                  "bandwidth, bytes read plus written): a 25 ms warm-up, the fastest of three rounds")
      ->check(CLI::Range(0, 100000));
  app->add_option("--bucket", o->engine.bucket_bytes, "Broadcast bucket size")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app->add_option("--inflight", o->engine.inflight,
                  "Pipelined engines (v3, v4): weight groups a trainer rank may work on at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("--one-pass", o->engine.one_pass,
                  "Pull engines: inference ranks read pieces of the trainers' own shards straight "
                  "from their weights into the live weights where the transport allows (CUDA IPC: "
                  "any piece; gets: pieces that are one run on both sides); off: every piece is "
                  "packed into the send buffer")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"on", true}, {"off", false}}))
      ->option_text("on|off (default: on)");
  app->add_option("--min-get", o->engine.min_get_bytes,
                  "One pass over gets (UCX, MPI; not a CUDA IPC mapping): pieces smaller than this "
                  "stay packed, a get costing a round trip")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app->add_option("--wire", o->engine.wire_fp8,
                  "With --quant fp8-block128, what pull engines send of the quantized weights: bf16 "
                  "(inference ranks quantize in their process step) or fp8 (trainers quantize each piece "
                  "of whole 128 x 128 blocks as they pack it; e4m3fn codes and fp32 scales travel, about "
                  "half the bytes). The broadcast baseline always sends bf16")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"bf16", false}, {"fp8", true}}))
      ->option_text("bf16|fp8 (default: bf16)");
  app->add_flag("--layerwise", o->engine.layerwise,
                "vLLM's layerwise reload: pieces land in a buffer per weight group, which is "
                "processed and copied into the live weights when complete (every piece packed); "
                "default: written in place, the process being a copy");
  app->add_option(
         "--failure-timeout", o->engine.failure_timeout_s,
         "Seconds of silence from a rank's heartbeats (sent every tenth of this, at most 0.5 s, by a "
         "thread that no copy, quantize or verification blocks) after which it is lost; a rank whose "
         "process is gone is lost at once. A busy rank is never lost")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app->add_option("--stall-timeout", o->engine.stall_timeout_s,
                  "Seconds without progress after which a rank inside the run exits (status 4) with "
                  "one line naming the phase and the peer it waited for, instead of hanging (a peer "
                  "alive but stuck); 0: never")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app->add_option("--inject-corrupt", o->engine.corrupt_at_sync,
                  "Test hook: flip one received bit at this sync")
      ->group("Testing");
  app->add_option("--inject-corrupt-in", o->engine.corrupt_in,
                  "Test hook: where --inject-corrupt flips its bit: the first byte of the first chunk "
                  "landed (any), or of the first FP8 piece's codes or scales (--wire fp8)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, SyncOptions::CorruptIn>{
          {"any", SyncOptions::CorruptIn::kAny}, {"fp8-code", SyncOptions::CorruptIn::kFp8Code},
           {"fp8-scale", SyncOptions::CorruptIn::kFp8Scale}}))
      ->option_text("any|fp8-code|fp8-scale (default: any)")
      ->group("Testing");
  app->add_option("--fail-at", o->fail_at,
                  "Test hook: sync=K,rank=R: inference world rank R kills itself mid-sync K")
      ->group("Testing");
  app->add_option("--failure-tolerance", o->failure_tolerance,
                  "on: a lost inference rank takes its replica down and the run goes on (needs "
                  "--transport ucx and Open MPI's recovery settings: README, failure model); off: any "
                  "lost rank ends the run, every survivor printing one line and exiting with status 5; "
                  "auto: on where the transport and mpirun allow it. A lost trainer rank, or a rank "
                  "lost during a broadcast, ends the run either way")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app->add_option("--stall-at", o->stall_at,
                  "Test hook: sync=K,rank=R,in=process|verify,s=S: at sync K of each engine, inference "
                  "world rank R sleeps S seconds in its process step or before its verification (busy, "
                  "not dead: its heartbeats go on, and its own stall watchdog counts the sleep as progress)")
      ->group("Testing");
  app->add_option("--slow-rank", o->engine.slow_rank,
                  "Test hook: this world rank sleeps after every chunk")
      ->group("Testing");
  app->add_option("--slow-ms", o->engine.slow_ms,
                  "Test hook: milliseconds the slow rank sleeps per chunk")
      ->group("Testing");
  app->add_option("--inject-stale", o->engine.stale_at_sync,
                  "Test hook: keep one trainer tensor stale at this sync")
      ->group("Testing");
}

namespace {

// Open MPI with its recovery settings (failure-tolerant runs) does not tear the job down on
// MPI_Abort: the calling rank then just exits, and the others end on their stall watchdog.
bool recovery_mode() {
  const char* v = std::getenv("OMPI_MCA_orte_enable_recovery");
  return v && std::strcmp(v, "1") == 0;
}

[[noreturn]] void abort_job(int code) {
  std::cout.flush();
  std::cerr.flush();
  if (recovery_mode()) std::_Exit(code);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

struct RankInfo {
  int32_t rank;
  int32_t trainer;
  int32_t replica, local, tp, pp, dp, ep;
  char host[64];
  char device[64];
};

// GPU of a rank: node-local trainers on the first half of the node's GPUs and inference
// ranks on the second half (all on GPU 0 when there is one), round-robin within each half.
int assign_gpu(const World& w) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(w.comm, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node));
  MPI_Comm role;
  MPI_CHECK(MPI_Comm_split(node, w.trainer ? 0 : 1, w.rank, &role));
  int index = 0;
  MPI_CHECK(MPI_Comm_rank(role, &index));
  MPI_CHECK(MPI_Comm_free(&role));
  MPI_CHECK(MPI_Comm_free(&node));
  int g = cuda_device_count();
  if (g <= 1) return 0;
  int half = g / 2;
  return w.trainer ? index % half : half + index % (g - half);
}

void print_rank_map(const World& w, const ResolvedSetup& s, const std::string& transport,
                    const std::string& device, MPI_Comm comm) {
  RankInfo mine{};
  std::snprintf(mine.device, sizeof mine.device, "%s", device.c_str());
  mine.rank = w.rank;
  mine.trainer = w.trainer;
  gethostname(mine.host, sizeof mine.host - 1);
  if (w.trainer) {
    mine.replica = -1;
    mine.local = -1;
    mine.tp = s.trainer->tp_rank_of(w.rank);
    mine.pp = s.trainer->pp_rank_of(w.rank);
    mine.dp = s.trainer->dp_rank_of(w.rank);
    mine.ep = s.trainer->ep_rank_of(w.rank);
  } else {
    InferenceCoord c = s.inference->coord(w.inference_rank);
    mine.replica = c.replica;
    mine.local = c.local;
    mine.tp = c.tp_rank;
    mine.pp = c.pp_rank;
    mine.dp = c.dp_rank;
    mine.ep = s.inference->ep() ? c.moe_rank : -1;
  }
  std::vector<RankInfo> all(size_t(w.rank == 0 ? w.size : 0));
  MPI_CHECK(MPI_Gather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, 0, comm));
  if (w.rank != 0) return;
  Table t({{"rank", ""},
           {"role", "", true},
           {"replica", ""},
           {"local", ""},
           {"tp", ""},
           {"pp", ""},
           {"dp", ""},
           {"ep", ""},
           {"host", "", true},
           {"device", "", true},
           {"transport", "", true}});
  t.add_title("rank map: trainer " + s.trainer->layout().describe() + " (" +
              std::to_string(s.trainer->world_size()) + " ranks) -> inference " +
              s.inference->layout().describe() + " (" + std::to_string(s.inference->world_size()) +
              " ranks)");
  for (const RankInfo& r : all) {
    auto opt = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
    t.add_row({fmt_int(r.rank), r.trainer ? "trainer" : "inference", opt(r.replica), opt(r.local),
               fmt_int(r.tp), fmt_int(r.pp), fmt_int(r.dp), opt(r.ep), r.host, r.device,
               transport});
  }
  t.print(std::cout);
  std::cout.flush();
}

// Names the first mismatch of a rank for the error message.
std::string describe_mismatch(const RankStats& r, const World& w, const ResolvedSetup& s,
                              const std::vector<RankPlan>& plans) {
  int inf_rank = r.rank - w.num_trainers;
  const RankPlan& p = plans[size_t(s.inference->coord(inf_rank).local)];
  std::string param = r.bad_param >= 0 ? p.params[size_t(r.bad_param)].name : "?";
  std::string hf = "(padding)";
  if (r.bad_index < 0 && r.bad_param >= 0)  // an FP8 target's scale (verify_fp8: -1 - its index)
    return "rank " + std::to_string(r.rank) + " (inference rank " + std::to_string(inf_rank) + "): " +
           std::to_string(r.mismatches) + " wrong elements; first in the FP8 scales of " + param +
           " (weight_scale_inv) at element " + std::to_string(-1 - r.bad_index);
  for (const PlanEntry& e : p.entries) {
    if (e.engine_param != r.bad_param) continue;
    bool hit = false;
    for_each_index(e.copy, [&](int64_t, int64_t d) { hit = hit || d == r.bad_index; });
    if (hit) hf = e.is_fill() ? "(padding)" : s.model->param(e.hf_param).name;
  }
  return "rank " + std::to_string(r.rank) + " (inference rank " + std::to_string(inf_rank) +
         "): " + std::to_string(r.mismatches) + " wrong elements; first in " + param + " (from " +
         hf + ") at element " + std::to_string(r.bad_index);
}

// Everything a run needs that every rank works out before the engines start.
struct RunSetup {
  ResolvedSetup s;
  std::vector<RankPlan> plans;
  SyncOptions engine;
  std::string transport;
  std::string tolerance_why;  // why failure tolerance is off ("" when on)
  double plan_s = 0;
};

// What rank 0 collects over the engines of a run.
struct RunLog {
  std::vector<EngineRun> runs;
  nlohmann::json events = nlohmann::json::array();  // failures and rejoins, in order
  std::vector<int> was_down;                        // replicas down after the last sync
  std::string failure;                              // the first verification failure
  uint64_t version = 1;                             // weights version of the next sync
};

bool all_on_one_node(int rank, int size) {
  char host[64] = {};
  std::snprintf(host, sizeof host, "%s", host_name(rank).c_str());
  std::vector<char> hosts(size_t(size) * sizeof host);
  MPI_CHECK(MPI_Allgather(host, sizeof host, MPI_CHAR, hosts.data(), sizeof host, MPI_CHAR,
                          MPI_COMM_WORLD));
  for (int r = 1; r < size; ++r)
    if (std::strncmp(hosts.data(), hosts.data() + r * sizeof host, sizeof host) != 0) return false;
  return true;
}

// Every rank parses, resolves and validates, then records (or loads) the plans; returns the
// error, "" when there is none.
std::string set_up(const SyncRunOptions& o, int rank, int size, RunSetup* rs) {
  rs->engine = o.engine;
  rs->engine.memory = o.memory == "cuda" ? MemKind::kCuda : MemKind::kHost;
  rs->transport = o.transport;
  const bool one_node = all_on_one_node(rank, size);
  try {
    if (rs->transport == "auto") rs->transport = choose_transport(rs->engine.memory, one_node);
    rs->engine.transport = rs->transport;
    rs->engine.check_sizes();
    rs->s = resolve_setup(o.setup);
    int need = rs->s.trainer->world_size() + rs->s.inference->world_size();
    if (size != need)
      throw InputError("mpirun", "-np " + std::to_string(size),
                       "the layouts need " + std::to_string(need) + " ranks: trainer " +
                           rs->s.trainer->layout().describe() + " = " +
                           std::to_string(rs->s.trainer->world_size()) + ", inference " +
                           rs->s.inference->layout().describe() + " = " +
                           std::to_string(rs->s.inference->world_size()));
    if (o.memory == "cuda") {
      if (!cuda_built()) throw InputError("--memory", "cuda", "this build has no CUDA support");
      if (const std::string broken = broken_gpu_setup(); !broken.empty())
        throw InputError("--memory", "cuda", "on " + where_am_i() + ": " + broken);
      if (cuda_device_count() == 0)
        throw InputError("--memory", "cuda", "no GPU is visible on " + where_am_i() + " (" + cuda_error() + ")");
    }
    auto probe_transport = make_transport(rs->transport);  // validates the name
    if (!o.engine.rendezvous.empty()) {
      if (!probe_transport->supports_rejoin())
        throw InputError("--rendezvous", o.engine.rendezvous,
                         "rejoin needs --transport ucx (this run uses " + rs->transport + ")");
      if (access(o.engine.rendezvous.c_str(), W_OK | X_OK) != 0)
        throw InputError(o.engine.rendezvous, "--rendezvous", "not a writable directory");
    }
    if (!o.fail_at.empty()) {  // its form first: a malformed value is wrong in every build
      int k = -1, r = -1;
      if (std::sscanf(o.fail_at.c_str(), "sync=%d,rank=%d", &k, &r) != 2 || k < 0 ||
          r < rs->s.trainer->world_size() || r >= size)
        throw InputError("--fail-at", o.fail_at,
                         "expected sync=K,rank=R with R an inference rank (" +
                             std::to_string(rs->s.trainer->world_size()) + ".." +
                             std::to_string(size - 1) + ")");
      if (!probe_transport->supports_rejoin())
        throw InputError(
            "--fail-at", o.fail_at,
            "surviving a failure needs --transport ucx (this run uses " + rs->transport + ")");
      rs->engine.fail_at_sync = k;
      rs->engine.fail_rank = r;
    }
    // Failure tolerance: the transport must survive a dead peer, and mpirun must let the job go on.
    const std::string missing = !probe_transport->supports_rejoin() ? "--transport ucx (this run uses " + rs->transport + ")"
                                : !launcher_survives_death()        ? std::string(kRecoverySettings)
                                                                    : "";
    if (o.failure_tolerance == "on" && !missing.empty())
      throw InputError("--failure-tolerance", "on", "needs " + missing);
    rs->engine.tolerate_failures = o.failure_tolerance != "off" && missing.empty();
    rs->tolerance_why = o.failure_tolerance == "off" ? "--failure-tolerance off" : missing.empty() ? "" : "it needs " + missing;
    if (!o.stall_at.empty()) {
      int k = -1, r = -1, n = 0;
      char in[16] = {};
      double secs = -1;
      if (std::sscanf(o.stall_at.c_str(), "sync=%d,rank=%d,in=%15[a-z],s=%lf%n", &k, &r, in, &secs, &n) != 4 ||
          size_t(n) != o.stall_at.size() || k < 0 || r < rs->s.trainer->world_size() || r >= size || secs < 0 ||
          secs > 3600 || (std::strcmp(in, "process") != 0 && std::strcmp(in, "verify") != 0))
        throw InputError("--stall-at", o.stall_at,
                         "expected sync=K,rank=R,in=process|verify,s=SECONDS with R an inference rank (" +
                             std::to_string(rs->s.trainer->world_size()) + ".." + std::to_string(size - 1) +
                             ") and 0 <= SECONDS <= 3600");
      rs->engine.stall_at_sync = k;
      rs->engine.stall_rank = r;
      rs->engine.stall_in = std::strcmp(in, "verify") == 0 ? SyncOptions::StallIn::kVerify : SyncOptions::StallIn::kProcess;
      rs->engine.stall_s = secs;
    }
    if (!o.json_out.empty() && rank == 0) {  // fail now, not after the run
      std::ofstream probe(o.json_out, std::ios::app);
      if (!probe)
        throw InputError(o.json_out, "(output)",
                         "cannot write the JSON result (directory missing or not writable)");
    }
    double t0 = MPI_Wtime();
    if (!o.plans_file.empty())
      rs->plans = read_plans(o.plans_file, *rs->s.model, *rs->s.inference).plans;
    else
      rs->plans = record_plans(*rs->s.model, *rs->s.inference);
    rs->plan_s = MPI_Wtime() - t0;
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Rank 0's header lines: set-up times, data path, buffers, failure tolerance.
void print_run_header(const SyncRunOptions& o, const RunSetup& rs, const Engines& engines,
                      double reg_s) {
  std::cout << "# model " << rs.s.model->name() << " ("
            << fmt_human_bytes(rs.s.model->total_bytes()) << "), plans "
            << (o.plans_file.empty() ? "recorded" : "loaded from " + o.plans_file) << " in "
            << fmt_fixed(rs.plan_s, 3) << " s, registration " << fmt_fixed(reg_s, 3)
            << " s, transport " << engines.transport_description() << ", collectives "
            << engines.collectives_description() << "\n# send buffer "
            << fmt_human_bytes(rs.engine.send_buffer_bytes) << ", receive buffer "
            << fmt_human_bytes(o.engine.recv_buffer_bytes) << ", chunk "
            << fmt_human_bytes(o.engine.effective_chunk_bytes()) << ", inflight "
            << o.engine.inflight << ", verify " << (o.engine.verify ? "on" : "OFF") << "\n# weights: "
            << o.engine.updates.describe()
            << (o.engine.delta ? "\n# delta: pull engines send what changed since each chunk was last sent; an anchor "
                                 "(every chunk whole) every " + std::to_string(o.engine.anchor_every) +
                                     " syncs of an engine and when a replacement joins"
                               : "")
            << (o.engine.dedupe_node ? "\n# dedupe-node: shared pieces cross the network once a node, copied inside it after"
                                     : "")
            << "\n# one pass: "
            << engines.one_pass_description() << "\n";
  if (rs.s.inference->layout().quant != Quant::kNone)
    std::cout << "# target " << quant_name(rs.s.inference->layout().quant) << ", wire "
              << (o.engine.wire_fp8 ? "fp8: trainers quantize each piece as they pack it, codes and scales travel"
                                    : "bf16: inference ranks quantize in their process step")
              << " (broadcast: bf16)\n";
  const std::string lost = "a rank is lost when its heartbeats stop for " + fmt_fixed(o.engine.failure_timeout_s, 1) +
                           " s (--failure-timeout) or its process is gone";
  std::cout << "# failure tolerance: "
            << (rs.engine.tolerate_failures
                    ? "on: " + lost + "; a lost inference rank takes its replica down (sharded engines)" +
                          (o.engine.rendezvous.empty() ? "" : "; replacements join through " + o.engine.rendezvous)
                    : "off (" + rs.tolerance_why + "): " + lost + "; a lost rank ends the run with one line on every survivor")
            << "\n";
}

// One engine's warm-up and timed syncs; rank 0 gathers every rank's stats, logs failures
// and rejoins, and prints progress.
void run_engine(EngineKind kind, const SyncRunOptions& o, Engines& engines, const World& w,
                const RunSetup& rs, RunLog& log) {
  const std::string name = engine_name(kind);
  EngineRun run;
  run.engine = name;
  run.warmup = o.warmup;
  for (int k = 0; k < o.warmup + o.syncs; ++k) {
    RankStats mine = engines.sync(kind, k, log.version++);
    std::vector<RankStats> all = engines.collect(mine);
    if (w.rank != 0) continue;  // a consumer whose replica is down keeps step, waiting
    std::string state;
    for (const RejoinEvent& ev : engines.last_rejoins()) {
      state += ", rank " + std::to_string(ev.rank) + " replaced" +
               (ev.replica_up ? " (replica " + std::to_string(ev.replica) + " up again)" : "");
      log.events.push_back({{"event", "rejoin"},
                            {"engine", name},
                            {"sync", k},
                            {"version", ev.version},
                            {"rank", ev.rank},
                            {"replica", ev.replica},
                            {"replica_up", ev.replica_up}});
    }
    std::vector<int> now_down = engines.down_replicas();
    for (int rep : now_down)
      if (std::find(log.was_down.begin(), log.was_down.end(), rep) == log.was_down.end())
        log.events.push_back({{"event", "replica_down"},
                              {"engine", name},
                              {"sync", k},
                              {"version", log.version - 1},
                              {"replica", rep}});
    log.was_down = now_down;
    for (int rep : now_down)
      state += (state.find("replicas down") == std::string::npos ? ", replicas down: " : ",") +
               std::to_string(rep);
    // --dedupe-node: bytes a rank could not copy because their puller died (not verified; the
    // puller's replica, which is that rank's, goes down).
    for (const RankStats& r : all)
      if (r.node_lost_bytes > 0) {
        state += ", rank " + std::to_string(r.rank) + " lost " + std::to_string(r.node_lost_bytes) +
                 " bytes to a dead puller in its node";
        log.events.push_back({{"event", "node_bytes_lost"},
                              {"engine", name},
                              {"sync", k},
                              {"rank", r.rank},
                              {"replica", r.replica},
                              {"bytes", r.node_lost_bytes}});
      }
    if (mine.skipped) {
      if (!o.quiet)
        progress_line("# " + name + " sync " + std::to_string(k + 1) + "/" +
                      std::to_string(o.warmup + o.syncs) +
                      ": skipped (a rank has died; a broadcast is a collective over every rank)" +
                      state);
      if (k < o.warmup) --run.warmup;
      continue;
    }
    double t = 0;
    int64_t wrong = 0, bad_sums = 0, sums = 0;
    for (const RankStats& r : all) {
      t = std::max(t, r.total_s);
      wrong += r.mismatches;
      if (!r.trainer) sums += r.checksum_pieces;
      bad_sums += r.checksum_bad;
      if (r.mismatches > 0 && log.failure.empty())
        log.failure = "verification failed in " + name + " sync " + std::to_string(k) +
                      " (weights version " + std::to_string(log.version - 1) +
                      "): " + describe_mismatch(r, w, rs.s, rs.plans);
      if (r.checksum_bad > 0 && log.failure.empty()) {
        const int inf_rank = r.rank - w.num_trainers;
        log.failure = "checksums failed in " + name + " sync " + std::to_string(k) + " (weights version " +
                      std::to_string(log.version - 1) + "): rank " + std::to_string(r.rank) + " (inference rank " +
                      std::to_string(inf_rank) + "): " +
                      describe_bad_sums(r, *rs.s.model, rs.plans[size_t(rs.s.inference->coord(inf_rank).local)]);
      }
    }
    const std::string checked =
        o.engine.checksum && name != "broadcast" ? ", " + std::to_string(bad_sums) + " of " + std::to_string(sums) + " checksums differ" : "";
    if (!o.quiet)
      progress_line("# " + name + " sync " + std::to_string(k + 1) + "/" +
                    std::to_string(o.warmup + o.syncs) + (k < o.warmup ? " (warm-up)" : "") + ": " +
                    fmt_fixed(t, 6) + " s, " + std::to_string(wrong) + " wrong" + checked + state);
    run.syncs.push_back(std::move(all));
    if (!log.failure.empty()) break;
  }

  if (w.rank == 0) {
    if (run.syncs.size() > size_t(std::max(run.warmup, 0)))
      log.runs.push_back(std::move(run));
    else
      std::cout << "# " << name
                << ": every sync skipped (a rank died before it; a broadcast needs every rank)\n";
  }
}

// Rank 0: replica completion, failures, the comparison table, the JSON result.
void report(const SyncRunOptions& o, const RunSetup& rs, Engines& engines, const RunLog& log,
            double link_gbps, double copy_gbps, double reg_s, int argc, char** argv, int size) {
  std::vector<EngineSummary> rows;
  for (const auto& r : log.runs) rows.push_back(summarize(r));
  auto is_down = [&](int rep) {
    for (int d : engines.down_replicas())
      if (d == rep) return true;
    return false;
  };
  for (const auto& r : log.runs) {
    std::string line;
    std::vector<double> rc = replica_completion(r, rs.s.trainer->world_size());
    for (size_t rep = 0; rep < rc.size(); ++rep)
      line += " r" + std::to_string(rep) + " " +
              (rc[rep] < 0 ? std::string("-") : fmt_fixed(rc[rep], 6)) +
              (is_down(int(rep)) ? " (before it went down)" : "");
    std::cout << "# " << r.engine << " replica completion (s, mean over timed syncs):" << line
              << "\n";
  }
  if (!log.events.empty()) {
    std::string list;
    for (const auto& ev : log.events)
      list +=
          std::string(list.empty() ? "" : "; ") +
          (ev["event"] == "rejoin"            ? "rank " + std::to_string(int(ev["rank"])) + " replaced"
           : ev["event"] == "node_bytes_lost" ? "rank " + std::to_string(int(ev["rank"])) + " lost " +
                                                    std::to_string(int64_t(ev["bytes"])) + " bytes of its node's copies"
                                              : "replica " + std::to_string(int(ev["replica"])) + " down") +
          " at " + std::string(ev["engine"]) + " sync " + std::to_string(int(ev["sync"]) + 1);
    auto d = engines.down_replicas();
    std::string down;
    for (int rep : d) down += (down.empty() ? "" : ",") + std::to_string(rep);
    std::cout << "# failures: " << list << "; "
              << (d.empty() ? "every replica up at the end"
                            : "replicas " + down + " down at the end")
              << "; every sync of every live replica verified\n";
  }
  if (link_gbps > 0)
    std::cout << "# pull path raw bandwidth (inference rank 0 reading trainer rank 0, "
              << rs.transport << "): " << fmt_fixed(link_gbps, 2) << " GB/s\n";
  print_summary_table(std::cout, rows,
                      "model " + rs.s.model->name() + ", " + std::to_string(o.syncs) +
                          " timed syncs after " + std::to_string(o.warmup) +
                          " warm-up, time = slowest rank per sync, averaged",
                      link_gbps);
  std::cout.flush();
  if (!o.json_out.empty()) {
    nlohmann::json j = provenance(argc, argv);
    j["config"] = {{"model", rs.s.model->name()},
                   {"model_source", rs.s.model->config().source},
                   {"layout", rs.s.layout_name},
                   {"trainer", rs.s.trainer->layout().describe()},
                   {"inference", rs.s.inference->layout().describe()},
                   {"replicas", rs.s.inference->layout().replicas},
                   {"quant", quant_name(rs.s.inference->layout().quant)},
                   {"wire", o.engine.wire_fp8 ? "fp8" : "bf16"},
                   {"ranks", size},
                   {"transport", engines.transport_description()},
                   {"memory", o.memory},
                   {"send_buffer_bytes", o.engine.send_buffer_bytes},
                   {"recv_buffer_bytes", o.engine.recv_buffer_bytes},
                   {"chunk_bytes", o.engine.effective_chunk_bytes()},
                   {"bucket_bytes", o.engine.bucket_bytes},
                   {"inflight", o.engine.inflight},
                   {"one_pass", engines.one_pass_description()},
                   {"min_get_bytes", o.engine.min_get_bytes},
                   {"layerwise", o.engine.layerwise},
                   {"verify", o.engine.verify},
                   {"checksum", o.engine.checksum},
                   {"update_density", o.engine.updates.density},
                   {"update_pattern", o.engine.updates.clustered ? "rows" : "uniform"},
                   {"delta", o.engine.delta},
                   {"anchor_every", o.engine.anchor_every},
                   {"dedupe_node", o.engine.dedupe_node},
                   {"syncs", o.syncs},
                   {"warmup", o.warmup},
                   {"plans", o.plans_file.empty() ? "recorded" : o.plans_file}};
    j["setup"] = {{"plan_s", rs.plan_s}, {"registration_s", reg_s}};
    j["replicas_down"] = engines.down_replicas();
    j["events"] = log.events;
    j["memory"] = o.memory;
    j["device_rank0"] = engines.device_description();
    j["collectives_rank0"] = engines.collectives_description();
    if (link_gbps > 0) j["link_gbps"] = link_gbps;
    if (copy_gbps > 0) j["copy_gbps"] = copy_gbps;
    j["model_bytes"] = rs.s.model->total_bytes();
    for (const auto& r : log.runs) j["engines"].push_back(run_json(r));
    if (!log.failure.empty()) j["failure"] = log.failure;
    std::ofstream out(o.json_out);
    out << j.dump(1) << "\n";
    if (!out) throw InputError(o.json_out, "(output)", "cannot write the JSON result");
  }
}

}  // namespace

int run_syncs(const SyncRunOptions& o, int argc, char** argv, int* world_rank) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (world_rank) *world_rank = rank;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  RunSetup rs;
  const std::string error = set_up(o, rank, size, &rs);
  int failed_rank = error.empty() ? size : rank, first_failed = size;
  MPI_Allreduce(&failed_rank, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first_failed < size) {  // every rank exits; the first that failed says why
    if (rank == first_failed) std::cerr << "shardsync: error: " << error << "\n";
    MPI_Finalize();
    return 2;
  }
  // The run: any error from here on aborts every rank.
  try {
    World w = World::create(MPI_COMM_WORLD, *rs.s.trainer, *rs.s.inference);
    allow_idle_sleep_where_oversubscribed(MPI_COMM_WORLD);
    if (rs.engine.memory == MemKind::kCuda) rs.engine.gpu = assign_gpu(w);
    Engines engines(w, *rs.s.model, *rs.s.trainer, *rs.s.inference, rs.plans, rs.engine);
    const double reg_s = engines.bootstrap();
    print_rank_map(w, rs.s, rs.transport, engines.device_description(), MPI_COMM_WORLD);
    const double link_gbps = o.link_iters > 0 ? engines.measure_link(o.link_iters) : 0;
    const double copy_gbps = o.copy_iters > 0 ? engines.measure_copy(o.copy_iters) : 0;
    if (rank == 0 && copy_gbps > 0)
      std::cout << "# device copy bandwidth (trainer rank 0, " << engines.device_description()
                << ", read + written): " << fmt_fixed(copy_gbps, 2) << " GB/s\n";
    if (rank == 0) print_run_header(o, rs, engines, reg_s);
    RunLog log;
    for (EngineKind kind : o.engines) {
      run_engine(kind, o, engines, w, rs, log);
      if (!log.failure.empty()) break;
    }
    if (rank == 0) {
      report(o, rs, engines, log, link_gbps, copy_gbps, reg_s, argc, argv, size);
      if (!log.failure.empty()) {
        std::cerr << "shardsync: error: " << log.failure << "\n";
        abort_job(3);
      }
    }
    // After a failure, only non-collective clean-up: a dead rank never joins a collective,
    // and MPI_Finalize's fence would wait for it, so survivors leave without it (mpirun
    // needs orte_allowed_exit_without_sync=1 to accept that; see README, failure model).
    if (engines.finish()) {
      std::cout.flush();
      std::cerr.flush();
      std::_Exit(0);
    }
    engines.shutdown();
  } catch (const std::exception& e) {
    std::cerr << "shardsync: error on rank " << rank << ": " << e.what() << "\n";
    abort_job(3);
  }
  MPI_Finalize();
  return 0;
}

}  // namespace shardsync
