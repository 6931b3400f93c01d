// Liveness: which inference ranks are dead or down (rank 0 decides, trainers learn it at
// every sync boundary), the end-of-sync reports (rank 0 waits for a consumer while its
// heartbeats come: a slow reply is not a death), the end of the run, what a lost peer means
// (lib/comm/heartbeats.hpp tells which are lost), and the stall watchdog that ends a rank
// which sees no progress while its peers live.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/table.hpp"  // fmt_fixed
#include "engine/internal.hpp"

namespace shardsync {

bool launcher_survives_death() {
  auto is = [](const char* name, const char* want) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, want) == 0;
  };
  return is("OMPI_MCA_orte_enable_recovery", "1") && is("OMPI_MCA_orte_abort_on_non_zero_status", "0") &&
         is("OMPI_MCA_orte_allowed_exit_without_sync", "1");
}

void Engines::disarm() { impl_->armed = false; }

bool Engines::broken() const { return impl_->broken; }

std::string Engines::Impl::describe_rank(int rank) const {
  if (rank < world.num_trainers) return "rank " + std::to_string(rank) + " (trainer)";
  return "rank " + std::to_string(rank) + " (inference, replica " +
         std::to_string(inference.coord(rank - world.num_trainers).replica) + ")";
}

void Engines::Impl::end_run(const std::string& line, int status) {
  if (!opt.syncs_back_to_back) {  // the library: the session is broken, the process goes on
    std::lock_guard<std::mutex> lock(broken_mu);
    if (broken_why.empty()) {
      broken_why = line;
      std::fprintf(stderr, "shardsync: %s\n", line.c_str());
    }
    broken = true;
    armed = false;
    return;
  }
  static std::atomic<bool> ending{false};
  if (!ending.exchange(true)) {
    std::fprintf(stderr, "shardsync: %s\n", line.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::_Exit(status);
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the other thread is ending it
}

void Engines::Impl::check_broken() {
  if (!broken) return;
  std::lock_guard<std::mutex> lock(broken_mu);
  throw Error(broken_why);
}

void Engines::Impl::wait(MPI_Request* req) {
  if (opt.syncs_back_to_back) {
    MPI_CHECK(MPI_Wait(req, MPI_STATUS_IGNORE));
    return;
  }
  IdleBackoff backoff;
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    check_broken();  // the request stays pending: the session is not usable after this
    backoff.pause();
  }
}

void Engines::Impl::start_heartbeats(const std::vector<std::vector<uint8_t>>& contacts) {
  for (int r = 0; r < world.size; ++r)
    if (!contacts[size_t(r)].empty()) heartbeats->set_peer(r, contacts[size_t(r)]);
  heartbeats->start(opt.failure_timeout_s, [this](int peer, const PeerLoss& why) { on_peer_lost(peer, why); });
}

void Engines::Impl::on_peer_lost(int peer, const PeerLoss& why) {
  std::string cannot;
  if (!opt.tolerate_failures)
    cannot = opt.syncs_back_to_back ? "failure tolerance is off (--failure-tolerance)" : "failure tolerance is off";
  else if (peer < world.num_trainers)
    cannot = "a trainer rank cannot be lost (its shards have no other copy)";
  else if (in_broadcast)
    cannot = "a broadcast cannot lose a rank (a collective over every rank)";
  else
    return;  // an inference rank: the engine's loops declare it dead and its replica goes down
  const std::string timeout =
      why.kind == PeerLoss::Kind::kSilent ? " (--failure-timeout " + fmt_fixed(opt.failure_timeout_s, 1) + ")" : "";
  if (opt.syncs_back_to_back) heartbeats->announce_loss(peer, why);  // the others name this loss, not this rank's end
  end_run(describe_rank(world.rank) + ": " + describe_rank(peer) + " lost: " + why.describe() + timeout + "; " + cannot +
              (opt.syncs_back_to_back ? ": exiting" : ": the session is broken (its calls raise this; close it and leave)"),
          5);
}

std::vector<int> Engines::Impl::consumers_of_local(int local_rank) const {
  std::vector<int> out;
  int per = inference.layout().ranks_per_replica();
  for (int r = 0; r < inference.layout().replicas; ++r) {
    int rank = world.num_trainers + r * per + local_rank;
    if (!liveness.down[size_t(rank)]) out.push_back(rank);
  }
  return out;
}

void Engines::Impl::declare_dead(int rank) {
  if (liveness.dead[size_t(rank)]) return;
  liveness.dead[size_t(rank)] = 1;
  liveness.down[size_t(rank)] = 1;
  liveness.failures = true;
  transport->forget_peer(rank);
}

void Engines::Impl::take_down_replicas() {
  int per = inference.layout().ranks_per_replica();
  for (int rep = 0; rep < inference.layout().replicas; ++rep) {
    bool any = false;
    for (int l = 0; l < per; ++l)
      any = any || liveness.dead[size_t(world.num_trainers + rep * per + l)];
    if (any)
      for (int l = 0; l < per; ++l) liveness.down[size_t(world.num_trainers + rep * per + l)] = 1;
  }
}

void Engines::Impl::start_watchdog() {
  watchdog = std::thread([this] {  // no MPI calls on this thread
    while (!stop_watchdog) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      double idle = now_s() - last_beat.load(std::memory_order_relaxed);
      if (!armed || idle < opt.stall_timeout_s) continue;
      const int peer = wait_peer.load(std::memory_order_relaxed);
      std::string on;
      if (peer >= 0) {
        on = " on " + describe_rank(peer);
        const double silent = heartbeats ? heartbeats->silent_s(peer) : -1;
        if (silent >= 0) on += " (its last heartbeat " + fmt_fixed(silent, 1) + " s ago)";
      }
      end_run(describe_rank(world.rank) + ": no progress for " + fmt_fixed(idle, 0) + " s while " +
                      wait_phase.load(std::memory_order_relaxed) + on +
                      (opt.syncs_back_to_back ? "; a step that takes longer needs a longer --stall-timeout: exiting"
                                              : "; a step that takes longer needs a longer stall_timeout_s: the session is broken"),
                  4);
    }
  });
}

bool Engines::stood_down() const {
  return impl_->consumer_side.stood_down;
}

std::vector<int> Engines::down_replicas() const {
  const Impl& m = *impl_;
  std::vector<int> out;
  int per = m.inference.layout().ranks_per_replica();
  for (int rep = 0; rep < m.inference.layout().replicas; ++rep)
    if (m.liveness.down[size_t(m.world.num_trainers + rep * per)]) out.push_back(rep);
  return out;
}

bool Engines::finish() {
  Impl& m = *impl_;
  struct Disarm {
    Impl& m;
    ~Disarm() { m.armed = false; }
  } disarm{m};
  int degraded = m.liveness.failures ? 1 : 0;
  // Past the FINISH every rank may leave: peers say so (not a loss) as they go.
  struct Leave {
    Impl& m;
    ~Leave() {
      if (m.heartbeats) m.heartbeats->leave();
    }
  } leave{m};
  if (m.world.trainer) {
    m.waiting("ending the run (the trainers' reduction)");
    int any = 0;
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(&degraded, &any, 1, MPI_INT, MPI_MAX, m.world.trainers, &req));
    m.wait(&req);
    degraded = any;
    m.withdraw_contact();
    if (m.world.rank == 0) {
      // Replacements that came too late are told so.
      CtrlMsg msg;
      while (m.transport->poll(&msg))
        if (msg.type == kMsgJoin) m.absorb_join(std::move(msg));
      for (CtrlMsg& j : m.rejoin.pending_joins) {
        std::vector<uint8_t> contact;
        uint32_t n = 0;
        if (j.payload.size() < 4) continue;
        std::memcpy(&n, j.payload.data(), 4);
        if (n > j.payload.size() - 4) continue;
        contact.assign(j.payload.begin() + 4, j.payload.begin() + 4 + long(n));
        CtrlMsg r;
        r.type = kMsgReject;
        std::string why =
            "the run ended before world rank " + std::to_string(j.from) + " could be taken back";
        r.payload.assign(why.begin(), why.end());
        try {
          m.transport->send_to_contact(contact, r);
        } catch (const std::exception&) {
        }
      }
      m.rejoin.pending_joins.clear();
      CtrlMsg fin;
      fin.type = kMsgFinish;
      fin.a = degraded;
      for (int r = m.world.num_trainers; r < m.world.size; ++r)
        if (!m.liveness.dead[size_t(r)]) m.transport->send(r, fin);
      m.waiting("ending the run (FINISH to the inference ranks)");
      m.transport->flush_sends_unless(m.lost_fn());
    }
    return degraded != 0;
  }
  // Consumers wait for FINISH (stood-down ranks may have seen it already).
  m.waiting("waiting for the end of the run (FINISH)", 0);
  while (m.wait_start_or_finish())
    m.consumer_side.pending_start.reset();  // a START now would be a bug of rank 0
  return m.consumer_side.finish_degraded;
}

std::vector<RankStats> Engines::collect(const RankStats& mine) {
  Impl& m = *impl_;
  std::vector<RankStats> all;
  if (!m.world.trainer) {
    if (mine.stood_down || mine.skipped) return all;  // rank 0 does not wait for this rank
    CtrlMsg r;
    r.type = kMsgReport;
    r.payload.resize(sizeof mine);
    std::memcpy(r.payload.data(), &mine, sizeof mine);
    m.transport->send(0, r);
    m.transport->flush_sends();
    return all;
  }
  std::vector<RankStats> trainers(size_t(m.world.rank == 0 ? m.world.num_trainers : 0));
  m.waiting("gathering the trainers' stats");
  MPI_Request req;
  MPI_CHECK(MPI_Igather(&mine, int(sizeof mine), MPI_BYTE, trainers.data(), int(sizeof mine), MPI_BYTE, 0,
                        m.world.trainers, &req));
  m.wait(&req);
  // Consumers any trainer declared dead in this sync.
  std::vector<uint8_t> dead_seen(m.liveness.dead.size(), 0);
  MPI_CHECK(MPI_Ireduce(m.liveness.dead.data(), dead_seen.data(), int(m.liveness.dead.size()), MPI_BYTE, MPI_MAX, 0,
                        m.world.trainers, &req));
  m.wait(&req);
  m.beat();
  if (m.world.rank != 0) return all;
  for (size_t r = 0; r < dead_seen.size(); ++r)
    if (dead_seen[r]) m.declare_dead(int(r));
  all = trainers;
  all.resize(size_t(m.world.size));
  for (int r = m.world.num_trainers; r < m.world.size; ++r) {
    all[size_t(r)].rank = r;
    all[size_t(r)].reported = 0;
    all[size_t(r)].stood_down =
        m.liveness.down[size_t(r)] &&
        std::find(m.liveness.live_at_start.begin(), m.liveness.live_at_start.end(), r) ==
            m.liveness.live_at_start.end();
  }
  std::vector<int> missing;
  for (int r : m.liveness.live_at_start)
    if (!m.liveness.dead[size_t(r)]) missing.push_back(r);
  // A consumer still verifying (or busy otherwise) is waited for while its heartbeats come;
  // a lost one is dead.
  IdleBackoff wait_backoff;
  while (!missing.empty()) {
    m.waiting("collecting the inference ranks' reports", missing.front());
    CtrlMsg msg;
    if (!m.liveness.early_reports.empty()) {
      msg = std::move(m.liveness.early_reports.front());
      m.liveness.early_reports.pop_front();
    } else if (!m.transport->poll(&msg)) {
      m.transport->progress();
      m.check_broken();
      for (int r : missing)
        if (m.lost(r)) m.declare_dead(r);
      std::erase_if(missing, [&](int r) { return m.liveness.dead[size_t(r)] != 0; });
      wait_backoff.pause();
      continue;
    }
    if (msg.type == kMsgDone || msg.type == kMsgRequest)
      continue;  // late traffic of a dead peer's replica
    if (msg.type == kMsgJoin) {
      m.absorb_join(std::move(msg));
      continue;
    }
    if (msg.type != kMsgReport || msg.payload.size() != sizeof(RankStats) ||
        msg.from < m.world.num_trainers)
      throw Error("rank 0: unexpected message " + std::to_string(msg.type) + " from rank " +
                  std::to_string(msg.from) + " while collecting reports");
    std::memcpy(&all[size_t(msg.from)], msg.payload.data(), sizeof(RankStats));
    m.beat();
    missing.erase(std::remove(missing.begin(), missing.end(), msg.from), missing.end());
  }
  m.take_down_replicas();
  return all;
}

}  // namespace shardsync
