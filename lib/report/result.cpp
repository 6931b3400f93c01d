#include "report/result.hpp"

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cstring>
#include <ctime>
#include <ostream>

#include "common/table.hpp"
#include "device/device.hpp"
#include "engine/collectives.hpp"
#include "transport/transport.hpp"

#include "git_sha.hpp"  // SHARDSYNC_GIT_SHA, written at build time (cmake/GitSha.cmake)

namespace shardsync {

namespace {

MinAvgMax reduce(const std::vector<double>& v) {
  MinAvgMax r;
  if (v.empty()) return r;
  r.min = *std::min_element(v.begin(), v.end());
  r.max = *std::max_element(v.begin(), v.end());
  double s = 0;
  for (double x : v) s += x;
  r.avg = s / double(v.size());
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  r.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  return r;
}

double mean(const std::vector<double>& v) { return v.empty() ? 0 : reduce(v).avg; }

}  // namespace

EngineSummary summarize(const EngineRun& run) {
  EngineSummary s;
  s.engine = run.engine;
  std::vector<double> times, gather, pack, transfer, process, quantize, quantize_tr, wait, verify, rank_bw, tpeak, cpeak;
  int64_t moved = 0, one_pass = 0, messages = 0, gets = 0;
  int64_t full = 0, index = 0, whole = 0, chunks = 0;
  int64_t network = 0, node = 0, lost = 0;
  std::map<int, int64_t> host_network;  // --dedupe-node: node -> network bytes, all timed syncs
  std::vector<double> detect, hash_tr, hash_in;
  for (size_t k = 0; k < run.syncs.size(); ++k) {
    const auto& ranks = run.syncs[k];
    for (const RankStats& r : ranks) {
      s.wrong += r.mismatches;
      if (!r.trainer) s.checksum_pieces += r.checksum_pieces;
      s.checksum_bad += r.checksum_bad;
    }
    if (int(k) < run.warmup) continue;
    ++s.timed_syncs;
    double t = 0;
    for (const RankStats& r : ranks) {
      if (!r.reported) continue;  // dead, or its replica down
      t = std::max(t, r.total_s);
      messages += r.messages;
      gets += r.gets;
      if (r.trainer) {
        gather.push_back(r.gather_s);
        pack.push_back(r.pack_s);
        if (r.quantize_s > 0) quantize_tr.push_back(r.quantize_s);  // FP8 on the wire: trainers quantize
        tpeak.push_back(double(r.peak_staging_bytes));
        detect.push_back(r.delta_detect_s);
        hash_tr.push_back(r.hash_s);
        s.trainer_kept_bytes = std::max(s.trainer_kept_bytes, r.delta_kept_bytes);
      } else {
        transfer.push_back(r.transfer_s);
        hash_in.push_back(r.hash_s);
        process.push_back(r.process_s);
        quantize.push_back(r.quantize_s);
        wait.push_back(r.wait_s);
        verify.push_back(r.verify_s);
        moved += r.bytes_in;
        one_pass += r.one_pass_bytes;
        if (r.total_s > 0) rank_bw.push_back(double(r.bytes_in) / r.total_s / 1e9);
        cpeak.push_back(double(r.peak_staging_bytes));
        full += r.delta_full_bytes;
        index += r.delta_index_bytes;
        whole += r.delta_whole_chunks;
        chunks += r.delta_chunks;
        s.consumer_kept_bytes = std::max(s.consumer_kept_bytes, r.delta_kept_bytes);
        network += r.network_bytes;
        node += r.node_bytes;
        lost += r.node_lost_bytes;
        if (r.host >= 0) host_network[r.host] += r.network_bytes;
      }
    }
    times.push_back(t);
  }
  int n = std::max(1, s.timed_syncs);
  s.time_s = reduce(times);
  s.gather_s = mean(gather);
  s.pack_s = mean(pack);
  s.transfer_s = mean(transfer);
  s.process_s = mean(process);
  s.quantize_s = quantize_tr.empty() ? mean(quantize) : mean(quantize_tr);
  s.wait_s = mean(wait);
  s.verify_s = mean(verify);
  s.bytes_moved = moved / n;
  s.one_pass_bytes = one_pass / n;
  s.aggregate_gbps = s.time_s.avg > 0 ? double(s.bytes_moved) / s.time_s.avg / 1e9 : 0;
  s.rank_gbps = reduce(rank_bw);
  s.trainer_peak_bytes = reduce(tpeak);
  s.consumer_peak_bytes = reduce(cpeak);
  s.messages = messages / n;
  s.gets = gets / n;
  s.delta_full_bytes = full / n;
  s.delta_index_bytes = index / n;
  s.delta_whole_chunks = whole / n;
  s.delta_chunks = chunks / n;
  s.delta_detect_s = mean(detect);
  s.trainer_hash_s = mean(hash_tr);
  s.inference_hash_s = mean(hash_in);
  s.network_bytes = network / n;
  s.node_bytes = node / n;
  s.node_lost_bytes = lost / n;
  for (const auto& [h, b] : host_network) s.host_network_bytes.emplace_back(h, b / n);
  return s;
}

void print_summary_table(std::ostream& os, const std::vector<EngineSummary>& rows, const std::string& title,
                         double link_gbps) {
  std::vector<Column> cols = {{"engine", "", true}, {"syncs", ""}, {"time", "s"}, {"min", "s"}, {"max", "s"},
                              {"gather", "s"}, {"pack", "s"}, {"transfer", "s"}, {"process", "s"}, {"moved", "MB"},
                              {"agg_bw", "GB/s"}, {"rank_bw", "GB/s"}, {"tr_peak", "MB"}, {"inf_peak", "MB"},
                              {"1pass", "%"}, {"msgs", ""}, {"#wrong", ""}, {"vs_bcast", "x"}};
  if (link_gbps > 0) cols.push_back({"of_link", "%"});
  // An FP8 target: its quantization (the process step's part), mean over consumers.
  const bool quantized = std::any_of(rows.begin(), rows.end(), [](const EngineSummary& r) { return r.quantize_s > 0; });
  if (quantized) cols.insert(cols.begin() + 9, Column{"quantize", "s"});
  // --delta: what a full sync moves, the records' index, the trainers' change detection.
  const bool delta = std::any_of(rows.begin(), rows.end(), [](const EngineSummary& r) { return r.delta_chunks > 0; });
  if (delta) {
    cols.push_back({"full", "MB"});
    cols.push_back({"of_full", "%"});
    cols.push_back({"index", "MB"});
    cols.push_back({"detect", "s"});
  }
  // --dedupe-node: the plan's bytes over the network and copied inside the nodes, and the
  // busiest node's network bytes.
  const bool dedupe = std::any_of(rows.begin(), rows.end(), [](const EngineSummary& r) { return !r.host_network_bytes.empty(); });
  if (dedupe) {
    cols.push_back({"network", "MB"});
    cols.push_back({"in_node", "MB"});
    cols.push_back({"node_max", "MB"});
  }
  Table t(cols);
  if (!title.empty()) t.add_title(title);
  double base = 0;
  for (const auto& r : rows)
    if (r.engine == "broadcast") base = r.time_s.avg;
  auto f = [](double v) { return fmt_fixed(v, 6); };
  for (const auto& r : rows) {
    std::vector<std::string> cells = {
        r.engine, fmt_int(r.timed_syncs), f(r.time_s.avg), f(r.time_s.min), f(r.time_s.max), f(r.gather_s),
        f(r.pack_s), f(r.transfer_s), f(r.process_s), fmt_fixed(double(r.bytes_moved) / 1e6, 3),
        fmt_fixed(r.aggregate_gbps, 3), fmt_fixed(r.rank_gbps.avg, 3), fmt_fixed(r.trainer_peak_bytes.max / 1e6, 3),
        fmt_fixed(r.consumer_peak_bytes.max / 1e6, 3),
        r.bytes_moved > 0 ? fmt_fixed(100.0 * double(r.one_pass_bytes) / double(r.bytes_moved), 1) : "-",
        fmt_int(r.messages), fmt_int(r.wrong),
        base > 0 && r.time_s.avg > 0 ? fmt_fixed(base / r.time_s.avg, 2) : "-"};
    if (link_gbps > 0) cells.push_back(fmt_fixed(100.0 * r.aggregate_gbps / link_gbps, 1));
    if (quantized) cells.insert(cells.begin() + 9, f(r.quantize_s));
    if (delta) {
      const bool d = r.delta_chunks > 0;
      cells.push_back(d ? fmt_fixed(double(r.delta_full_bytes) / 1e6, 3) : "-");
      cells.push_back(d && r.delta_full_bytes > 0 ? fmt_fixed(100.0 * double(r.bytes_moved) / double(r.delta_full_bytes), 2) : "-");
      cells.push_back(d ? fmt_fixed(double(r.delta_index_bytes) / 1e6, 3) : "-");
      cells.push_back(d ? f(r.delta_detect_s) : "-");
    }
    if (dedupe) {
      const bool d = !r.host_network_bytes.empty();
      int64_t busiest = 0;
      for (const auto& [h, b] : r.host_network_bytes) busiest = std::max(busiest, b);
      cells.push_back(d ? fmt_fixed(double(r.network_bytes) / 1e6, 3) : "-");
      cells.push_back(d ? fmt_fixed(double(r.node_bytes) / 1e6, 3) : "-");
      cells.push_back(d ? fmt_fixed(double(busiest) / 1e6, 3) : "-");
    }
    t.add_row(cells);
  }
  t.print(os);
}

nlohmann::json summary_json(const EngineSummary& s) {
  auto mam = [](const MinAvgMax& m) {
    return nlohmann::json{{"min", m.min}, {"avg", m.avg}, {"median", m.median}, {"max", m.max}};
  };
  return {{"engine", s.engine},
          {"timed_syncs", s.timed_syncs},
          {"time_s", mam(s.time_s)},
          {"gather_s", s.gather_s},
          {"pack_s", s.pack_s},
          {"transfer_s", s.transfer_s},
          {"process_s", s.process_s},
          {"quantize_s", s.quantize_s},
          {"wait_s", s.wait_s},
          {"verify_s", s.verify_s},
          {"bytes_moved", s.bytes_moved},
          {"one_pass_bytes", s.one_pass_bytes},
          {"aggregate_gbps", s.aggregate_gbps},
          {"rank_gbps", mam(s.rank_gbps)},
          {"trainer_peak_staging_bytes", mam(s.trainer_peak_bytes)},
          {"inference_peak_staging_bytes", mam(s.consumer_peak_bytes)},
          {"messages_per_sync", s.messages},
          {"gets_per_sync", s.gets},
          {"wrong", s.wrong},
          {"checksum", {{"pieces", s.checksum_pieces},
                        {"differ", s.checksum_bad},
                        {"trainer_hash_s", s.trainer_hash_s},
                        {"inference_hash_s", s.inference_hash_s}}},
          {"delta", {{"full_bytes", s.delta_full_bytes},
                     {"index_bytes", s.delta_index_bytes},
                     {"whole_chunks", s.delta_whole_chunks},
                     {"chunks", s.delta_chunks},
                     {"detect_s", s.delta_detect_s},
                     {"trainer_kept_bytes", s.trainer_kept_bytes},
                     {"inference_kept_bytes", s.consumer_kept_bytes}}},
          {"network_bytes", s.network_bytes},
          {"node_bytes", s.node_bytes},
          {"node_lost_bytes", s.node_lost_bytes},
          {"host_network_bytes", [&] {
             nlohmann::json h = nlohmann::json::array();
             for (const auto& [host, b] : s.host_network_bytes) h.push_back({{"host", host}, {"network_bytes", b}});
             return h;
           }()}};
}

nlohmann::json run_json(const EngineRun& run) {
  nlohmann::json syncs = nlohmann::json::array();
  for (size_t k = 0; k < run.syncs.size(); ++k) {
    nlohmann::json ranks = nlohmann::json::array();
    double t = 0;
    for (const RankStats& r : run.syncs[k]) {
      if (r.reported) t = std::max(t, r.total_s);
      ranks.push_back({{"rank", r.rank},
                       {"reported", r.reported != 0},
                       {"stood_down", r.stood_down != 0},
                       {"peers_lost", r.peers_lost},
                       {"role", r.trainer ? "trainer" : "inference"},
                       {"total_s", r.total_s},
                       {"gather_s", r.gather_s},
                       {"pack_s", r.pack_s},
                       {"transfer_s", r.transfer_s},
                       {"wait_s", r.wait_s},
                       {"process_s", r.process_s},
                       {"quantize_s", r.quantize_s},
                       {"verify_s", r.verify_s},
                       {"bytes_in", r.bytes_in},
                       {"one_pass_bytes", r.one_pass_bytes},
                       {"bytes_out", r.bytes_out},
                       {"messages", r.messages},
                       {"gets", r.gets},
                       {"chunks_packed", r.chunks_packed},
                       {"pack_launches", r.pack_launches},
                       {"pack_copies", r.pack_copies},
                       {"pack_copies_together", r.pack_copies_together},
                       {"peak_staging_bytes", r.peak_staging_bytes},
                       {"delta_full_bytes", r.delta_full_bytes},
                       {"delta_index_bytes", r.delta_index_bytes},
                       {"delta_whole_chunks", r.delta_whole_chunks},
                       {"delta_detect_s", r.delta_detect_s},
                       {"delta_kept_bytes", r.delta_kept_bytes},
                       {"network_bytes", r.network_bytes},
                       {"node_bytes", r.node_bytes},
                       {"node_lost_bytes", r.node_lost_bytes},
                       {"host", r.host},
                       {"mismatches", r.mismatches},
                       {"hash_s", r.hash_s},
                       {"checksum_pieces", r.checksum_pieces},
                       {"checksum_bad", r.checksum_bad}});
    }
    syncs.push_back({{"index", k}, {"warmup", int(k) < run.warmup}, {"time_s", t}, {"ranks", ranks}});
  }
  nlohmann::json j = summary_json(summarize(run));
  j["syncs"] = syncs;
  return j;
}

std::vector<double> replica_completion(const EngineRun& run, int first_inference_rank) {
  std::map<int, std::vector<double>> per;  // replica -> per timed sync max total_s
  for (size_t k = size_t(run.warmup); k < run.syncs.size(); ++k) {
    std::map<int, double> worst;
    for (const RankStats& r : run.syncs[k])
      if (!r.trainer && r.reported && r.rank >= first_inference_rank)
        worst[r.replica] = std::max(worst[r.replica], r.total_s);
    for (auto& [rep, t] : worst) per[rep].push_back(t);
  }
  std::vector<double> out;
  for (auto& [rep, v] : per) {
    if (int(out.size()) <= rep) out.resize(size_t(rep) + 1, -1);
    double s = 0;
    for (double x : v) s += x;
    out[size_t(rep)] = v.empty() ? -1 : s / double(v.size());
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> library_versions() {
  std::vector<std::pair<std::string, std::string>> v;
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int n = 0;
  MPI_Get_library_version(mpi, &n);
  std::string m(mpi, strnlen(mpi, size_t(std::max(n, 0))));  // some MPIs count the NUL in n
  if (auto p = m.find('\n'); p != std::string::npos) m.resize(p);
  v.emplace_back("mpi", m);
  unsigned maj = 0, min = 0, rel = 0;
  H5get_libversion(&maj, &min, &rel);
  v.emplace_back("hdf5", std::to_string(maj) + "." + std::to_string(min) + "." + std::to_string(rel));
  v.emplace_back("compiler", __VERSION__);
  v.emplace_back("ucx", ucx_version().empty() ? "not built" : ucx_version());
  v.emplace_back("nccl", nccl_version().empty() ? "not built" : nccl_version());
  const auto cuda = cuda_versions();
  if (cuda.empty()) v.emplace_back("cuda_runtime", "not built");
  v.insert(v.end(), cuda.begin(), cuda.end());
  return v;
}

std::string build_commit() { return SHARDSYNC_GIT_SHA; }

nlohmann::json provenance(int argc, char** argv) {
  nlohmann::json j;
  j["schema_version"] = 1;
  j["tool"] = "shardsync";
  j["tool_version"] = "0.1.0";
  j["git_sha"] = SHARDSYNC_GIT_SHA;
  std::vector<std::string> args(argv, argv + argc);
  j["argv"] = args;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  j["host"] = host;
  std::time_t now = std::time(nullptr);
  char ts[64];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  j["date_utc"] = ts;
  j["libraries"] = nlohmann::json::object();
  for (const auto& [name, version] : library_versions()) j["libraries"][name] = version;
  return j;
}

}  // namespace shardsync
