// Each subcommand lives in its own file: an options struct, setup_x() adding it to the
// app, and run_x() doing the work. main() only wires them up.
#pragma once

#include <CLI/CLI.hpp>

namespace shardsync {

void setup_model_command(CLI::App& app);
void setup_layout_command(CLI::App& app);
void setup_plan_command(CLI::App& app);
void setup_sync_commands(CLI::App& app, int argc, char** argv);
void setup_info_command(CLI::App& app);
void setup_simulate_command(CLI::App& app, int argc, char** argv);
void setup_report_command(CLI::App& app);
void setup_engines_command(CLI::App& app);

// Thrown by a subcommand that decides the process exit status itself (MPI commands).
struct SubcommandExit {
  int status;
};

}  // namespace shardsync
