// shardsync join: a replacement for a dead inference rank of a running job. It is not an
// MPI process (the dead rank cannot come back into MPI_COMM_WORLD): it reads the trainers'
// contacts from the job's rendezvous directory, connects over UCX, asks rank 0 to take it
// back, then serves every sync until the job ends, verifying each version in full.
#include <fstream>
#include <iostream>

#include "common/error.hpp"
#include "common/table.hpp"
#include "plan/store.hpp"
#include "report/result.hpp"
#include "sync_runner.hpp"

namespace shardsync {

int run_join(const JoinOptions& jo, int argc, char** argv) {
  const SyncRunOptions& o = jo.run;
  if (o.engine.rendezvous.empty()) throw InputError("--rendezvous", "", "required: the job's rendezvous directory");
  o.engine.check_sizes();
  ResolvedSetup s = resolve_setup(o.setup);
  World w = World::replacement(jo.rank, *s.trainer, *s.inference);
  if (!o.json_out.empty()) {
    std::ofstream probe(o.json_out, std::ios::app);
    if (!probe) throw InputError(o.json_out, "(output)", "cannot write the JSON result (directory missing or not writable)");
  }
  std::vector<RankPlan> plans = o.plans_file.empty() ? record_plans(*s.model, *s.inference)
                                                      : read_plans(o.plans_file, *s.model, *s.inference).plans;
  SyncOptions eo = o.engine;
  eo.transport = "ucx";
  eo.memory = o.memory == "cuda" ? MemKind::kCuda : MemKind::kHost;
  if (eo.memory == MemKind::kCuda) eo.gpu = 0;
  Engines engines(w, *s.model, *s.trainer, *s.inference, plans, eo);
  double join_s = engines.join(jo.timeout_s);
  std::cout << "# replacement for world rank " << w.rank << " (replica " << w.replica << ", local rank " << w.local_rank
            << "): reached " << w.num_trainers << " trainer ranks through " << o.engine.rendezvous << " in "
            << fmt_fixed(join_s, 3) << " s; waiting to be taken back at a sync boundary\n";
  std::cout.flush();

  nlohmann::json syncs = nlohmann::json::array();
  int served = 0;
  int64_t wrong = 0;
  uint64_t first_version = 0;
  RankStats st;
  EngineKind e;
  uint64_t version = 0;
  while (engines.serve_next(served == 0 ? jo.timeout_s : 0, &st, &e, &version)) {
    if (st.skipped) continue;
    if (served++ == 0) first_version = version;
    wrong += st.mismatches;
    if (!o.quiet)
      progress_line("# rank " + std::to_string(w.rank) + ": " + engine_name(e) + " weights version " +
                    std::to_string(version) + ": " + fmt_fixed(st.total_s, 6) + " s, " + fmt_human_bytes(st.bytes_in) + ", " +
                    std::to_string(st.mismatches) + " wrong");
    syncs.push_back({{"engine", engine_name(e)}, {"version", version}, {"total_s", st.total_s}, {"bytes_in", st.bytes_in},
                     {"delta_chunks", st.delta_chunks}, {"delta_whole_chunks", st.delta_whole_chunks},
                     {"delta_full_bytes", st.delta_full_bytes}, {"mismatches", st.mismatches}});
  }
  if (served == 0) throw Error("the job ended before taking world rank " + std::to_string(w.rank) + " back");
  std::cout << "# rank " << w.rank << " rejoined at weights version " << first_version << " and served " << served
            << " syncs; " << (wrong == 0 ? "every byte verified" : std::to_string(wrong) + " WRONG elements") << "\n";
  if (!o.json_out.empty()) {
    nlohmann::json j = provenance(argc, argv);
    j["replacement"] = {{"rank", w.rank}, {"replica", w.replica}, {"local_rank", w.local_rank}, {"join_s", join_s},
                        {"first_version", first_version}, {"syncs", syncs}, {"mismatches", wrong}};
    std::ofstream out(o.json_out);
    out << j.dump(2) << "\n";
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace shardsync
