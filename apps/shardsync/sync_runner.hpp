// The mpirun-launched part of the CLI (sync, bench): parse, set up MPI and ranks, print the
// rank map, run the engines, report, finalize.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "model_layout_options.hpp"

namespace shardsync {

struct SyncRunOptions {
  ModelLayoutOptions setup;
  std::vector<EngineKind> engines;
  int syncs = 3;
  int warmup = 1;
  SyncOptions engine;
  std::string plans_file;
  std::string json_out;
  bool quiet = false;
  std::string memory = "host";
  std::string transport = "auto";
  int link_iters = 0;  // > 0: measure the pull path's raw bandwidth first
  int copy_iters = 0;  // > 0: measure trainer rank 0's device copy bandwidth first
  std::string fail_at;  // "sync=K,rank=R"
  std::string stall_at;  // "sync=K,rank=R,in=process|verify,s=S"
  std::string failure_tolerance = "auto";  // auto | on | off
};

// The options a replacement process shares with the job: model, layouts, memory, plans,
// buffers, verification, output, rendezvous.
void add_data_path_options(CLI::App* app, SyncRunOptions* o);
void add_sync_run_options(CLI::App* app, SyncRunOptions* o, const std::vector<EngineKind>& default_engines);
// A progress line on stderr in one write: piecewise writes to the unbuffered stream
// interleave with stdout when mpirun forwards both.
void progress_line(const std::string& line);
// Returns the process exit status. Initializes and finalizes MPI; `world_rank` (if given)
// receives this process's rank.
int run_syncs(const SyncRunOptions& o, int argc, char** argv, int* world_rank = nullptr);

// shardsync join: a replacement process (no MPI) for a dead inference rank of a running job.
struct JoinOptions {
  SyncRunOptions run;
  int rank = -1;
  double timeout_s = 60;
};
int run_join(const JoinOptions& o, int argc, char** argv);

}  // namespace shardsync
