// The one reader of the result files `shardsync sync|bench --json` writes (result.cpp's
// run_json and provenance), for `report` and `simulate --compare`: what they compare, with
// each engine's summary kept whole. A file that is not such a result is refused with an
// InputError naming the file, the field and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardsync {

struct EngineResult {
  std::string engine;       // a row name of the engine table when written by this build
  double time_avg_s = 0;    // time_s.avg: per sync, the slowest rank, mean over timed syncs
  nlohmann::json summary;   // the whole engine object (time_s, phases, bytes, wrong, ...)
};

struct ResultFile {
  std::string model;                          // config.model
  std::string trainer, inference;             // config.trainer, config.inference ("" if absent)
  std::string quant = "none";                 // config.quant (an FP8 target: fp8-block128)
  int replicas = 1, ranks = 0;                // config.replicas, config.ranks
  int64_t bucket_bytes = 0;                   // config.bucket_bytes (0 if absent)
  std::string wire = "bf16";                  // config.wire
  bool delta = false;                         // config.delta (absent: false)
  double update_density = 1.0;                // config.update_density (absent: 1)
  bool update_rows = false;                   // config.update_pattern == "rows"
  std::string memory = "?";                   // memory
  double link_gbps = 0;                       // link_gbps (0: not measured)
  double copy_gbps = 0;                       // copy_gbps (0: not measured)
  std::string git_sha, host, date_utc;        // provenance ("" if absent)
  std::vector<std::string> argv;              // provenance: the command line
  std::vector<EngineResult> engines;          // in run order
};

ResultFile read_result_file(const std::string& path);

}  // namespace shardsync
