// Results of sync runs: per-sync, per-rank stats reduced to what a reader compares, one
// table writer (nccl-tests style) and one JSON writer with provenance.
#pragma once

#include <iosfwd>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/stats.hpp"

namespace shardsync {

struct EngineRun {
  std::string engine;
  int warmup = 0;
  std::vector<std::vector<RankStats>> syncs;  // [sync][rank], warm-up syncs included
};

struct MinAvgMax {
  double min = 0, avg = 0, max = 0;
  double median = 0;  // of an even count, the mean of the middle two
};

// What a row of the comparison table says about one engine (timed syncs only).
struct EngineSummary {
  std::string engine;
  int timed_syncs = 0;
  MinAvgMax time_s;                  // per sync: max over ranks of total_s
  double gather_s = 0, pack_s = 0;   // trainer busy time, mean over trainer ranks
  double transfer_s = 0, process_s = 0, wait_s = 0;  // consumer, mean over consumer ranks
  double quantize_s = 0;             // an FP8 target's quantization: mean over the ranks that quantize (trainers with FP8 on the wire, else inference ranks)
  double verify_s = 0;
  int64_t bytes_moved = 0;           // per sync: bytes received by all inference ranks
  int64_t one_pass_bytes = 0;        // of those, read from trainers' weights in one pass
  double aggregate_gbps = 0;         // bytes_moved / mean sync time
  MinAvgMax rank_gbps;               // per consumer: bytes_in / its total_s
  MinAvgMax trainer_peak_bytes, consumer_peak_bytes;
  int64_t messages = 0, gets = 0;    // per sync, all ranks
  int64_t wrong = 0;                 // mismatched elements over all syncs (warm-up included)
  // --checksum over all syncs (warm-up included): pieces the inference ranks compared, those whose
  // sums differed; per timed sync, the trainers' and the inference ranks' hashing time (mean).
  int64_t checksum_pieces = 0, checksum_bad = 0;
  double trainer_hash_s = 0, inference_hash_s = 0;
  // --delta, per timed sync over all inference ranks: the chunk bytes the records stood for
  // (what moves without --delta), of bytes_moved the records' index (headers, bitmaps), chunks
  // that went whole of all chunks; trainers' change detection (mean over trainers); the most
  // memory a rank keeps for the last chunks (trainer, inference rank).
  int64_t delta_full_bytes = 0, delta_index_bytes = 0, delta_whole_chunks = 0, delta_chunks = 0;
  double delta_detect_s = 0;
  int64_t trainer_kept_bytes = 0, consumer_kept_bytes = 0;
  // Per timed sync over all inference ranks: the plan's bytes pulled from the trainers (the
  // payload of bytes_moved), and with --dedupe-node those copied inside a node instead and those
  // lost to a dead puller; per node (the lowest world rank on its host; --dedupe-node runs
  // only), its ranks' network bytes.
  int64_t network_bytes = 0, node_bytes = 0, node_lost_bytes = 0;
  std::vector<std::pair<int, int64_t>> host_network_bytes;
};

EngineSummary summarize(const EngineRun& run);
// link_gbps > 0 adds a column: each engine's aggregate bandwidth over the pull path's raw
// copy bandwidth measured in the same run.
void print_summary_table(std::ostream& os, const std::vector<EngineSummary>& rows, const std::string& title,
                         double link_gbps = 0);
nlohmann::json summary_json(const EngineSummary& s);
nlohmann::json run_json(const EngineRun& run);

// Per replica: mean over timed syncs of its slowest rank's time (-1: never reported).
std::vector<double> replica_completion(const EngineRun& run, int first_inference_rank);

// Provenance common to every result file.
// Name and version of every library the build uses (MPI, HDF5, compiler, UCX, NCCL, the CUDA
// runtime and driver) and GPU 0's model: the JSON's "libraries", `shardsync info`'s lines.
std::vector<std::pair<std::string, std::string>> library_versions();
// The project commit this binary was built from (cmake/GitSha.cmake), "unknown" when none.
std::string build_commit();
nlohmann::json provenance(int argc, char** argv);

}  // namespace shardsync
