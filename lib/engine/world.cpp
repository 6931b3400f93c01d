// Ranks 0..T-1 train, the rest serve inference: the communicators, built once at start-up,
// the world of a replacement process (no MPI), and idle polling's sleep on a crowded node.
#include <algorithm>
#include <thread>

#include "common/error.hpp"
#include "engine/engine.hpp"

namespace shardsync {

World World::create(MPI_Comm comm, const TrainerPlacement& tr, const InferencePlacement& inf) {
  World w;
  w.comm = comm;
  MPI_CHECK(MPI_Comm_rank(comm, &w.rank));
  MPI_CHECK(MPI_Comm_size(comm, &w.size));
  w.num_trainers = tr.world_size();
  w.trainer = w.rank < w.num_trainers;
  if (!w.trainer) {
    w.inference_rank = w.rank - w.num_trainers;
    InferenceCoord c = inf.coord(w.inference_rank);
    w.local_rank = c.local;
    w.replica = c.replica;
  }
  auto split = [&](int color, int key, MPI_Comm* out) {
    MPI_CHECK(MPI_Comm_split(comm, color, key, out));
    if (color == MPI_UNDEFINED) *out = MPI_COMM_NULL;
  };
  split(w.trainer ? 0 : MPI_UNDEFINED, w.rank, &w.trainers);
  if (w.trainer) {
    int dp = tr.dp_rank_of(w.rank), pp = tr.pp_rank_of(w.rank), t = tr.tp_rank_of(w.rank);
    split(dp + tr.dp() * pp, t, &w.tp_group);
    int et = w.rank % tr.etp(), ep = tr.ep_rank_of(w.rank),
        edp = (w.rank / (tr.etp() * tr.ep())) % tr.edp();
    split(ep + tr.ep() * (edp + tr.edp() * pp), et, &w.etp_group);
  } else {
    split(MPI_UNDEFINED, 0, &w.tp_group);
    split(MPI_UNDEFINED, 0, &w.etp_group);
  }
  split(w.rank == 0 || !w.trainer ? 0 : MPI_UNDEFINED, w.rank, &w.bcast);
  return w;
}

void allow_idle_sleep_where_oversubscribed(MPI_Comm comm) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 1;
  MPI_CHECK(MPI_Comm_size(node, &local));
  MPI_CHECK(MPI_Comm_free(&node));
  set_idle_sleep_allowed(unsigned(local) > std::max(1u, std::thread::hardware_concurrency()));
}

World World::replacement(int rank, const TrainerPlacement& tr, const InferencePlacement& inf) {
  World w;
  w.rank = rank;
  w.num_trainers = tr.world_size();
  w.size = w.num_trainers + inf.world_size();
  if (rank < w.num_trainers || rank >= w.size)
    throw InputError("--rank", std::to_string(rank),
                     "a replacement takes an inference rank's place: " +
                         std::to_string(w.num_trainers) + ".." + std::to_string(w.size - 1));
  w.inference_rank = rank - w.num_trainers;
  InferenceCoord c = inf.coord(w.inference_rank);
  w.local_rank = c.local;
  w.replica = c.replica;
  return w;
}

}  // namespace shardsync
