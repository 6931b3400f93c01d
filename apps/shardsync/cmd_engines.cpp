// shardsync engines: the engine table, one row per engine and its policies (what `bench`
// runs by default, in this order). --names prints the names alone, one a line, for scripts.
#include <iostream>

#include "commands.hpp"
#include "common/table.hpp"
#include "engine/engine_table.hpp"

namespace shardsync {

void setup_engines_command(CLI::App& app) {
  auto names = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "engines", "List the engines (the rows of the engine table) and their policies");
  cmd->add_flag("--names", *names, "Only the names, one a line");
  cmd->callback([names] {
    if (*names) {
      for (const EngineSpec& e : engine_table()) std::cout << e.name << "\n";
      return;
    }
    Table t({{"engine", "", true},
             {"delivery", "", true},
             {"source", "", true},
             {"unit", "", true},
             {"requests", "", true},
             {"depth", "", true},
             {"process", "", true},
             {"collectives", "", true},
             {"pp_stages", "", true},
             {"simulated", "", true}});
    t.add_title("engine table (lib/engine/engine_table.cpp); bench runs them in this order");
    for (const EngineSpec& e : engine_table())
      t.add_row({e.name, e.delivery == Delivery::kPull ? "pull" : "broadcast",
                 describe_source(e.source), describe_unit(e.unit),
                 e.cache_requests ? "cached" : "every sync",
                 e.depth > 0 ? std::to_string(e.depth) : "--inflight",
                 e.background_process ? "background" : "inline",
                 describe_collectives(e.collectives), stages_concurrent(e) ? "concurrent" : "one at a time", e.sim == SimModel::kNone ? "no" : "yes"});
    t.print(std::cout);
    for (const EngineSpec& e : engine_table())
      std::cout << "# " << e.name << ": " << e.summary << "\n";
  });
}

}  // namespace shardsync
