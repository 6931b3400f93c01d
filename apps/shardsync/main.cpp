// shardsync: weight sync from RL trainer ranks to inference ranks, measured.
//   shardsync model show --model qwen3-235b-a22b
//   shardsync layout show --layout qwen3-235b-published
#include <iostream>

#include "commands.hpp"
#include "common/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "shardsync: sharded, pull-based weight transfer from RL trainer ranks to inference ranks,\n"
      "compared with a broadcast baseline, every byte verified. Run a subcommand with --help."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardsync 0.1.0");
  shardsync::setup_model_command(app);
  shardsync::setup_layout_command(app);
  shardsync::setup_plan_command(app);
  shardsync::setup_sync_commands(app, argc, argv);
  shardsync::setup_info_command(app);
  shardsync::setup_engines_command(app);
  shardsync::setup_simulate_command(app, argc, argv);
  shardsync::setup_report_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const shardsync::SubcommandExit& e) {
    return e.status;
  } catch (const shardsync::Error& e) {
    std::cerr << "shardsync: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "shardsync: internal error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}
