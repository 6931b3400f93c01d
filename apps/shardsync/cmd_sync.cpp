// shardsync sync | bench: mpirun-launched weight sync from trainer ranks to inference
// ranks. `sync` runs one engine by default; `bench` runs every row of the engine table on
// the same weights and prints them side by side with ratios to the broadcast baseline. `join` is a replacement
// process for a dead inference rank.
#include "commands.hpp"
#include "sync_runner.hpp"

namespace shardsync {

void setup_sync_commands(CLI::App& app, int argc, char** argv) {
  auto sync_opts = std::make_shared<SyncRunOptions>();
  auto* sync = app.add_subcommand(
      "sync", "Run weight syncs under mpirun: ranks 0..T-1 train, the rest serve inference (verified bit-exact)");
  add_sync_run_options(sync, sync_opts.get(), {EngineKind::kV3});
  sync->callback([sync_opts, argc, argv] { throw SubcommandExit{run_syncs(*sync_opts, argc, argv)}; });

  auto bench_opts = std::make_shared<SyncRunOptions>();
  auto* bench = app.add_subcommand(
      "bench", "Compare engines on the same weights in one mpirun launch (default: every engine, " + engine_list() + ")");
  std::vector<EngineKind> every;
  for (const EngineSpec& e : engine_table()) every.push_back(e.kind);
  add_sync_run_options(bench, bench_opts.get(), every);
  bench->callback([bench_opts, argc, argv] { throw SubcommandExit{run_syncs(*bench_opts, argc, argv)}; });

  auto join_opts = std::make_shared<JoinOptions>();
  auto* join = app.add_subcommand(
      "join", "Take a dead inference rank's place in a running job started with --rendezvous (a plain process, "
              "not under mpirun); pass the job's model, layout and buffer options");
  add_data_path_options(join, &join_opts->run);
  join->add_option("--rank", join_opts->rank, "The dead inference rank's world rank")->required();
  join->add_option("--join-timeout", join_opts->timeout_s,
                   "Seconds to wait for the trainers' contacts and then for the first sync")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  join->callback([join_opts, argc, argv] { throw SubcommandExit{run_join(*join_opts, argc, argv)}; });
}

}  // namespace shardsync
