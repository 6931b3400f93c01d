// Rejoin: a replacement process takes the place of a dead inference rank while the job
// runs. The dead MPI rank cannot come back, so the replacement never touches MPI: trainers
// publish their transport contacts (worker address, send buffer and its key) in a
// rendezvous directory at start-up, with their heartbeat contacts; the replacement reads them,
// opens endpoints, starts its heartbeats to the trainers, and sends JOIN to rank 0 (with its
// own heartbeat contact, which every trainer watches once it is taken). At the next sync boundary rank 0 takes it (the rank must have been
// declared dead; model, layouts and chunking must match), every trainer opens an endpoint
// back, and the replica comes up again once none of its ranks is dead. From then on the
// replacement is an ordinary consumer: it pulls each version in full and verifies it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

namespace {

constexpr char kContactTag[] = "shardsync-contact 2\n";

std::string contact_path(const std::string& dir, int rank) {
  return dir + "/trainer-" + std::to_string(rank) + ".contact";
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + 4);
}

void put_sized(std::vector<uint8_t>& out, const std::vector<uint8_t>& b) {
  put_u32(out, uint32_t(b.size()));
  out.insert(out.end(), b.begin(), b.end());
}

// Reads a length-prefixed field; false when the bytes run out.
bool get_sized(const std::vector<uint8_t>& in, size_t* pos, std::vector<uint8_t>* out) {
  uint32_t n = 0;
  if (*pos + 4 > in.size()) return false;
  std::memcpy(&n, in.data() + *pos, 4);
  *pos += 4;
  if (n > in.size() - *pos) return false;
  out->assign(in.begin() + long(*pos), in.begin() + long(*pos + n));
  *pos += n;
  return true;
}

std::vector<uint8_t> as_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string as_string(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

// A trainer's contact file: tag, world size, fingerprint, transport contact, heartbeat contact.
void write_contact_file(const std::string& dir, int rank, int world_size, const std::string& fingerprint,
                        const std::vector<uint8_t>& contact, const std::vector<uint8_t>& heartbeat) {
  std::vector<uint8_t> body(kContactTag, kContactTag + sizeof kContactTag - 1);
  put_u32(body, uint32_t(rank));
  put_u32(body, uint32_t(world_size));
  put_sized(body, as_bytes(fingerprint));
  put_sized(body, contact);
  put_sized(body, heartbeat);
  std::string path = contact_path(dir, rank), tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(body.data()), std::streamsize(body.size()));
    if (!f) throw InputError(dir, "--rendezvous", "cannot write " + tmp + " (directory missing or not writable)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)  // readers never see a partial file
    throw InputError(dir, "--rendezvous", "cannot rename " + tmp + " to " + path);
}

// The transport contact and the heartbeat contact of trainer `rank`.
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> read_contact_file(const std::string& path, int rank, int world_size,
                                                                      const std::string& fingerprint) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t tag = sizeof kContactTag - 1;
  if (body.size() < tag + 8 || std::memcmp(body.data(), kContactTag, tag) != 0)
    throw InputError(path, "(file)", "not a shardsync contact file of this version (" + std::string(kContactTag, tag - 1) + ")");
  uint32_t r = 0, n = 0;
  std::memcpy(&r, body.data() + tag, 4);
  std::memcpy(&n, body.data() + tag + 4, 4);
  if (int(r) != rank) throw InputError(path, "rank", "expected " + std::to_string(rank) + ", found " + std::to_string(r));
  if (int(n) != world_size)
    throw InputError(path, "world size", "the job has " + std::to_string(n) + " ranks; this replacement's layouts need " +
                                             std::to_string(world_size));
  size_t pos = tag + 8;
  std::vector<uint8_t> fp, contact, heartbeat;
  if (!get_sized(body, &pos, &fp) || !get_sized(body, &pos, &contact) || !get_sized(body, &pos, &heartbeat) ||
      pos != body.size())
    throw InputError(path, "(file)", "truncated contact file");
  if (as_string(fp) != fingerprint)
    throw InputError(path, "fingerprint", "the job runs '" + as_string(fp) + "'; this replacement was started for '" +
                                              fingerprint + "' (use the job's model, layouts and buffer options)");
  return {contact, heartbeat};
}

}  // namespace

std::string Engines::Impl::fingerprint() const {
  return model.name() + " (" + std::to_string(model.params().size()) + " tensors), trainer " + trainer.layout().describe() +
         ", inference " + inference.layout().describe() + ", chunk " + std::to_string(chunk_bytes) + " (format " +
         std::to_string(kChunkFormat) + "), " +
         (opt.memory == MemKind::kCuda ? "cuda" : "host") + " memory, send buffer " + std::to_string(opt.send_buffer_bytes) +
         ", one-pass " + std::to_string(int(one_pass)) + " min get " + std::to_string(opt.min_get_bytes) + (opt.layerwise ? ", layerwise" : "") +
         ", quant " + quant_name(inference.layout().quant) + (opt.wire_fp8 ? ", fp8 on the wire" : "") + ", weights: " + opt.updates.describe() +
         (opt.delta ? ", delta (anchor every " + std::to_string(opt.anchor_every) + ")" : "");
}

void Engines::Impl::publish_contact() {
  if (opt.rendezvous.empty() || !world.trainer) return;
  write_contact_file(opt.rendezvous, world.rank, world.size, fingerprint(), transport->contact(), heartbeats->contact());
}

void Engines::Impl::withdraw_contact() {
  if (opt.rendezvous.empty() || !world.trainer) return;
  std::error_code ec;
  std::filesystem::remove(contact_path(opt.rendezvous, world.rank), ec);
}

void Engines::Impl::absorb_join(CtrlMsg&& m) { rejoin.pending_joins.push_back(std::move(m)); }

void Engines::Impl::accept_joins(uint64_t version) {
  std::vector<uint8_t> taken;  // rank 0 -> every trainer: [rank][contact]...
  rejoin.last.clear();
  if (world.rank == 0) {
    // Between syncs nothing else is owed to rank 0: what waits is a JOIN or late traffic of
    // a replica that went down.
    CtrlMsg msg;
    while (transport->poll(&msg))
      if (msg.type == kMsgJoin) absorb_join(std::move(msg));
    std::vector<CtrlMsg> keep;
    for (CtrlMsg& j : rejoin.pending_joins) {
      size_t pos = 0;
      std::vector<uint8_t> contact, fp, heartbeat;
      if (!get_sized(j.payload, &pos, &contact) || !get_sized(j.payload, &pos, &fp) || !get_sized(j.payload, &pos, &heartbeat))
        continue;  // malformed: ignore
      auto refuse = [&](const std::string& why) {
        CtrlMsg r;
        r.type = kMsgReject;
        r.payload = as_bytes(why);
        try {
          transport->send_to_contact(contact, r);
        } catch (const std::exception&) {
          // the replacement is gone already
        }
      };
      int r = j.from;
      if (r < world.num_trainers || r >= world.size) {
        refuse("world rank " + std::to_string(r) + " is not an inference rank of this job");
      } else if (as_string(fp) != fingerprint()) {
        refuse("the job runs '" + fingerprint() + "', the replacement '" + as_string(fp) + "'");
      } else if (!liveness.dead[size_t(r)]) {
        keep.push_back(std::move(j));  // not (yet) declared dead: ask again at the next boundary
      } else {
        liveness.dead[size_t(r)] = 0;
        put_u32(taken, uint32_t(r));
        put_sized(taken, contact);
        put_sized(taken, heartbeat);
        rejoin.last.push_back(RejoinEvent{r, inference.coord(r - world.num_trainers).replica, version, false});
      }
    }
    rejoin.pending_joins = std::move(keep);
    // A replica comes back up once none of its ranks is dead.
    int per = inference.layout().ranks_per_replica();
    for (RejoinEvent& ev : rejoin.last) {
      int first = world.num_trainers + ev.replica * per;
      bool any_dead = false;
      for (int l = 0; l < per; ++l) any_dead = any_dead || liveness.dead[size_t(first + l)];
      if (any_dead) continue;
      for (int l = 0; l < per; ++l) {
        liveness.down[size_t(first + l)] = 0;
        liveness.notified_down[size_t(first + l)] = 0;
      }
      ev.replica_up = true;
    }
    rejoin.log.insert(rejoin.log.end(), rejoin.last.begin(), rejoin.last.end());
  }
  uint64_t n = taken.size();
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(&n, 1, MPI_UINT64_T, 0, world.trainers, &req));
  wait(&req);
  rejoin.taken_now = n > 0;
  if (n == 0) return;
  taken.resize(size_t(n));
  MPI_CHECK(MPI_Ibcast(taken.data(), int(n), MPI_BYTE, 0, world.trainers, &req));
  wait(&req);
  for (size_t pos = 0; pos < taken.size();) {
    uint32_t r = 0;
    std::memcpy(&r, taken.data() + pos, 4);
    pos += 4;
    std::vector<uint8_t> contact, heartbeat;
    if (!get_sized(taken, &pos, &contact) || !get_sized(taken, &pos, &heartbeat))
      throw Error("rejoin: malformed list of replacements");
    transport->accept_peer(int(r), contact);
    heartbeats->set_peer(int(r), heartbeat);  // watched from now on, as a new process
  }
}

bool Engines::Impl::wait_start_or_finish(double timeout_s) {
  IdleBackoff backoff;
  double deadline = timeout_s > 0 ? now_s() + timeout_s : 0;
  for (;;) {
    if (consumer_side.pending_start) return true;
    if (consumer_side.finish_seen) return false;
    CtrlMsg m;
    if (transport->poll(&m)) {
      backoff.progress();
      beat();
      if (m.type == kMsgStart) {
        consumer_side.pending_start = std::move(m);
      } else if (m.type == kMsgFinish) {
        consumer_side.finish_seen = true;
        consumer_side.finish_degraded = m.a != 0;
      } else if (m.type == kMsgReject) {
        throw Error("rank 0 did not take this replacement: " + as_string(m.payload));
      } else if (m.type == kMsgReady) {
        consumer_side.stashed_readies.push_back(std::move(m));  // may belong to the START still on its way
      }
      continue;  // STANDDOWN again
    }
    transport->progress();
    check_broken();
    if (deadline > 0 && now_s() > deadline)
      throw Error("no sync started within " + std::to_string(int(timeout_s)) +
                  " s (is the rank declared dead yet, and the job still running?)");
    backoff.pause();
  }
}

double Engines::join(double timeout_s) {
  Impl& m = *impl_;
  double t0 = now_s();
  if (m.opt.rendezvous.empty()) throw InputError("--rendezvous", "", "a replacement needs the job's rendezvous directory");
  if (!m.transport->supports_rejoin())
    throw InputError("--transport", m.opt.transport, "cannot take a replacement (rejoin needs ucx)");
  std::vector<std::vector<uint8_t>> contacts(size_t(m.world.size)), beats(size_t(m.world.size));
  for (int r = 0; r < m.world.num_trainers; ++r) {
    std::string path = contact_path(m.opt.rendezvous, r);
    while (!std::filesystem::exists(path)) {
      if (now_s() - t0 > timeout_s)
        throw InputError(path, "(file)", "does not exist after " + std::to_string(int(timeout_s)) +
                                             " s (is the job running with --rendezvous " + m.opt.rendezvous + "?)");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::tie(contacts[size_t(r)], beats[size_t(r)]) = read_contact_file(path, r, m.world.size, m.fingerprint());
  }
  // Heartbeats with the job's token, to and from the trainers (a replacement exists only in a
  // run that tolerates failures; a lost trainer ends it).
  m.opt.tolerate_failures = true;
  m.heartbeats = std::make_unique<Heartbeats>(m.world.rank, m.world.size, Heartbeats::token_of(beats[0]));
  m.start_heartbeats(beats);
  Registration reg;
  reg.kind = m.device->kind();
  reg.landing_base = m.consumer_side.registered.data();
  reg.landing_bytes = size_t(m.consumer_side.registered.size());
  m.transport->join(m.world.rank, m.world.size, contacts, reg);
  CtrlMsg j;
  j.type = kMsgJoin;
  put_sized(j.payload, m.transport->contact());
  put_sized(j.payload, as_bytes(m.fingerprint()));
  put_sized(j.payload, m.heartbeats->contact());
  m.transport->send(0, j);
  m.transport->flush_sends();
  return now_s() - t0;
}

bool Engines::serve_next(double timeout_s, RankStats* out, EngineKind* engine, uint64_t* version) {
  Impl& m = *impl_;
  m.waiting("waiting for a sync's START (a replacement)", 0);
  if (!m.wait_start_or_finish(timeout_s)) {
    m.armed = false;
    m.heartbeats->leave();  // the end of the run: leaving is not a loss
    return false;
  }
  if (!m.armed) m.arm();  // taken back: from now on an ordinary consumer
  const CtrlMsg& s = *m.consumer_side.pending_start;
  if (s.b < 0 || size_t(s.b) >= engine_table().size()) throw Error("START names no engine");
  *engine = EngineKind(s.b);
  *version = uint64_t(s.x);
  if (s.c == 1) {  // a broadcast after a failure: skipped by everyone
    m.consumer_side.pending_start.reset();
    *out = RankStats{};
    out->rank = m.world.rank;
    out->skipped = 1;
    out->reported = 0;
    return true;
  }
  if (engine_spec(*engine).delivery == Delivery::kBroadcast)
    throw Error("a replacement cannot take part in a broadcast (MPI collective)");
  *out = m.run_consumer(*engine, s.a, uint64_t(s.x));
  out->replica = m.world.replica;
  collect(*out);  // the report to rank 0
  return true;
}

std::vector<RejoinEvent> Engines::last_rejoins() const { return impl_->rejoin.last; }
std::vector<RejoinEvent> Engines::rejoins() const { return impl_->rejoin.log; }

}  // namespace shardsync
