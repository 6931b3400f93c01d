#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>

#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

namespace {
std::atomic<bool> g_idle_sleep{true};
}
void set_idle_sleep_allowed(bool allowed) { g_idle_sleep = allowed; }
bool idle_sleep_allowed() { return g_idle_sleep; }

int64_t SyncOptions::effective_chunk_bytes() const {
  return std::max<int64_t>(16, std::min({chunk_bytes, send_buffer_bytes / 2, recv_buffer_bytes / 2}) & ~int64_t(15));
}

// ---- small utilities ------------------------------------------------------------------------

std::optional<int64_t> RangeAllocator::alloc(int64_t bytes) {
  bytes = (bytes + 63) & ~int64_t(63);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    int64_t off = it->first, len = it->second;
    free_.erase(it);
    if (len > bytes) free_[off + bytes] = len - bytes;
    return off;
  }
  return std::nullopt;
}

void RangeAllocator::release(int64_t offset, int64_t bytes) {
  bytes = (bytes + 63) & ~int64_t(63);
  auto it = free_.emplace(offset, bytes).first;
  auto next = std::next(it);
  if (next != free_.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free_.erase(next);
  }
  if (it != free_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free_.erase(it);
    }
  }
}

DeviceBuffer BufferPool::take(int64_t bytes) {
  auto it = free_.find(bytes);
  if (it == free_.end()) return DeviceBuffer(dev_, bytes);
  DeviceBuffer b = std::move(it->second);
  free_.erase(it);
  return b;
}

void BufferPool::give(DeviceBuffer&& buf) {
  int64_t n = buf.size();
  free_.emplace(n, std::move(buf));
}

BackgroundWorker::BackgroundWorker() : thread_([this] { loop(); }) {}

BackgroundWorker::~BackgroundWorker() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BackgroundWorker::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void BackgroundWorker::drain() {
  std::unique_lock<std::mutex> l(mu_);
  idle_.wait(l, [this] { return tasks_.empty() && !busy_; });
}

void BackgroundWorker::loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) {
      if (stop_) return;
      continue;
    }
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    l.unlock();
    task();
    l.lock();
    busy_ = false;
    if (tasks_.empty()) idle_.notify_all();
  }
}

// ---- world ------------------------------------------------------------------------------------

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
    int et = w.rank % tr.etp(), ep = tr.ep_rank_of(w.rank), edp = (w.rank / (tr.etp() * tr.ep())) % tr.edp();
    split(ep + tr.ep() * (edp + tr.edp() * pp), et, &w.etp_group);
  } else {
    split(MPI_UNDEFINED, 0, &w.tp_group);
    split(MPI_UNDEFINED, 0, &w.etp_group);
  }
  split(w.rank == 0 || !w.trainer ? 0 : MPI_UNDEFINED, w.rank, &w.bcast);
  return w;
}

World World::replacement(int rank, const TrainerPlacement& tr, const InferencePlacement& inf) {
  World w;
  w.rank = rank;
  w.num_trainers = tr.world_size();
  w.size = w.num_trainers + inf.world_size();
  if (rank < w.num_trainers || rank >= w.size)
    throw InputError("--rank", std::to_string(rank),
                     "a replacement takes an inference rank's place: " + std::to_string(w.num_trainers) + ".." +
                         std::to_string(w.size - 1));
  w.inference_rank = rank - w.num_trainers;
  InferenceCoord c = inf.coord(w.inference_rank);
  w.local_rank = c.local;
  w.replica = c.replica;
  return w;
}

// ---- Impl ---------------------------------------------------------------------------------

Engines::Impl::Impl(World& w, const ModelSpec& m, const TrainerPlacement& t, const InferencePlacement& i,
                    const std::vector<RankPlan>& p, const SyncOptions& o)
    : world(w), model(m), trainer(t), inference(i), plans(p), opt(o) {
  chunk_bytes = opt.effective_chunk_bytes();
  dead.assign(size_t(world.size), 0);
  down.assign(size_t(world.size), 0);
  notified_down.assign(size_t(world.size), 0);
  device = opt.memory == MemKind::kCuda ? make_cuda_device(opt.gpu) : make_cpu_device();
  layerwise_pool.set_device(device.get());
  transport = make_transport(opt.transport);
  if (!transport->supports(opt.memory))
    throw InputError("--transport", opt.transport, "cannot move " + std::string(opt.memory == MemKind::kCuda ? "GPU" : "host") +
                                                       " memory in this build");
  // Collective set-up in a fixed order on every rank: trainer groups, then the broadcast group.
  if (world.trainer) {
    trainers_comm = make_group_comm(world.trainers, *device);
    tp_comm = make_group_comm(world.tp_group, *device);
    etp_comm = make_group_comm(world.etp_group, *device);
    shards = std::make_unique<TrainerShards>(model, trainer, world.rank, *device);
    send_buffer = DeviceBuffer(device.get(), opt.send_buffer_bytes);
  }
  if (world.bcast != MPI_COMM_NULL) bcast_comm = make_group_comm(world.bcast, *device);
  if (!world.trainer) {
    plan = &plans.at(size_t(world.local_rank));
    landing = DeviceBuffer(device.get(), opt.recv_buffer_bytes);
    int64_t off = 0;
    for (const EngineParam& ep : plan->params) {
      param_offset.push_back(off);
      group_of_param.push_back(ep.group);
      auto& span = group_span[ep.group];
      if (span.second == 0) span.first = off;
      span.second += ep.bytes();
      off += ep.bytes();
    }
    live = DeviceBuffer(device.get(), off);
    for (const PlanEntry& e : plan->entries)
      if (!e.is_fill())
        group_copy_bytes[group_of_param[size_t(e.engine_param)]] +=
            e.numel() * dtype_bytes(plan->params[size_t(e.engine_param)].dtype);
  }
  if (opt.stall_timeout_s > 0)
    watchdog = std::thread([this, where = where_am_i()] {  // no MPI calls on this thread
      while (!stop_watchdog) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        double idle = now_s() - last_beat.load(std::memory_order_relaxed);
        if (!armed || idle < opt.stall_timeout_s) continue;
        std::fprintf(stderr,
                     "shardsync: %s: no progress for %.0f s inside the run: a rank has likely died where the job "
                     "cannot survive it (a trainer rank, or any rank during a broadcast); exiting\n",
                     where.c_str(), idle);
        std::fflush(stderr);
        std::_Exit(4);
      }
    });
}


GatherContext Engines::Impl::gather_context() {
  return GatherContext{&model, &trainer, shards.get(), &world, device.get(), trainers_comm.get(), tp_comm.get(),
                       etp_comm.get()};
}

const Routes& Engines::Impl::routes_for(SourcePolicy policy) {
  auto it = routes.find(int(policy));
  if (it == routes.end())
    it = routes.emplace(int(policy), route_plans(model, trainer, plans, inference.layout().replicas, policy)).first;
  return it->second;
}

std::vector<int> Engines::Impl::consumers_of_local(int local_rank) const {
  std::vector<int> out;
  int per = inference.layout().ranks_per_replica();
  for (int r = 0; r < inference.layout().replicas; ++r) {
    int rank = world.num_trainers + r * per + local_rank;
    if (!down[size_t(rank)]) out.push_back(rank);
  }
  return out;
}

void Engines::Impl::declare_dead(int rank) {
  if (dead[size_t(rank)]) return;
  dead[size_t(rank)] = 1;
  down[size_t(rank)] = 1;
  failures = true;
  transport->forget_peer(rank);
}

void Engines::Impl::take_down_replicas() {
  int per = inference.layout().ranks_per_replica();
  for (int rep = 0; rep < inference.layout().replicas; ++rep) {
    bool any = false;
    for (int l = 0; l < per; ++l) any = any || dead[size_t(world.num_trainers + rep * per + l)];
    if (any)
      for (int l = 0; l < per; ++l) down[size_t(world.num_trainers + rep * per + l)] = 1;
  }
}

const ProducerSchedule& Engines::Impl::producer_schedule(EngineKind e) {
  auto it = producer_schedules.find(int(e));
  if (it != producer_schedules.end()) return it->second;
  ProducerSchedule s;
  s.units = make_units(model, engine_spec(e).unit, opt.bucket_bytes);
  s.unit_of_hf = unit_of_tensor(s.units, model.params().size());
  s.expected.assign(s.units.size(), std::vector<std::vector<ChunkPiece>>(plans.size()));
  if (engine_spec(e).delivery == Delivery::kPull) {
    const Routes& r = routes_for(source_policy(e));
    for (const RankPlan& p : plans)
      for (const Pull& pull : r.pulls[size_t(p.local_rank)]) {
        if (pull.trainer_rank != world.rank) continue;
        const PlanEntry& entry = p.entries[size_t(pull.entry)];
        s.expected[size_t(s.unit_of_hf[size_t(entry.hf_param)])][size_t(p.local_rank)].push_back(
            ChunkPiece{entry.hf_param, pull.entry, pull.slab_lo, pull.copy, 0, 0});
      }
  }
  return producer_schedules.emplace(int(e), std::move(s)).first->second;
}

const ConsumerSchedule& Engines::Impl::consumer_schedule(EngineKind e) {
  auto it = consumer_schedules.find(int(e));
  if (it != consumer_schedules.end()) return it->second;
  ConsumerSchedule s;
  s.units = make_units(model, engine_spec(e).unit, opt.bucket_bytes);
  s.unit_of_hf = unit_of_tensor(s.units, model.params().size());
  if (engine_spec(e).delivery == Delivery::kPull) {
    const Routes& r = routes_for(source_policy(e));
    s.pulls = make_rank_schedule(s.units, s.unit_of_hf, *plan, r.pulls[size_t(world.local_rank)]);
    s.chunks.resize(s.units.size());
    for (size_t u = 0; u < s.units.size(); ++u)
      for (const auto& [t, pulls] : s.pulls.pulls[u]) {
        s.chunks[u].emplace_back(t, make_chunks(model, pulls, chunk_bytes));
        s.num_chunks += int64_t(s.chunks[u].back().second.size());
      }
  }
  return consumer_schedules.emplace(int(e), std::move(s)).first->second;
}

DeviceBuffer& Engines::Impl::layerwise(int32_t group, std::map<int32_t, DeviceBuffer>& buffers, StagingMeter& meter) {
  auto it = buffers.find(group);
  if (it != buffers.end()) return it->second;
  int64_t bytes = group_span.at(group).second;
  DeviceBuffer& buf = buffers[group];
  buf = layerwise_pool.take(bytes);
  meter.add(bytes);
  // Padding rows of this group's parameters: the loaders' zero_() entries.
  int64_t base = group_span.at(group).first;
  std::vector<SynthJob> fills;
  for (const PlanEntry& e : plan->entries)
    if (e.is_fill() && group_of_param[size_t(e.engine_param)] == group)
      fills.push_back(SynthJob{buf.data() + (param_offset[size_t(e.engine_param)] - base), 0, e.copy,
                               int32_t(dtype_bytes(plan->params[size_t(e.engine_param)].dtype)), true});
  device->synth(fills);
  return buf;
}

void Engines::Impl::verify(uint64_t version, RankStats& st) {
  PhaseTimer t(st.verify_s);
  std::vector<SynthJob> jobs;
  for (const PlanEntry& e : plan->entries) {
    const EngineParam& ep = plan->params[size_t(e.engine_param)];
    jobs.push_back(SynthJob{live.data() + param_offset[size_t(e.engine_param)],
                            e.is_fill() ? 0 : synth_seed(e.hf_param, version), e.copy, int32_t(dtype_bytes(ep.dtype)),
                            e.is_fill()});
  }
  device->synchronize();
  VerifyResult r = device->verify(jobs);
  st.mismatches = r.mismatches;
  if (r.mismatches > 0) {
    st.bad_param = plan->entries[size_t(r.first_job)].engine_param;
    st.bad_index = r.first_index;
  }
}

// ---- public API -------------------------------------------------------------------------

Engines::Engines(World& world, const ModelSpec& model, const TrainerPlacement& trainer,
                 const InferencePlacement& inference, const std::vector<RankPlan>& plans, const SyncOptions& options)
    : impl_(std::make_unique<Impl>(world, model, trainer, inference, plans, options)) {}

Engines::~Engines() = default;

Engines::Impl::~Impl() {
  stop_watchdog = true;
  if (watchdog.joinable()) watchdog.join();
}

double Engines::bootstrap() {
  double t0 = now_s();
  Registration reg;
  reg.kind = impl_->device->kind();
  if (impl_->world.trainer) {
    reg.export_base = impl_->send_buffer.data();
    reg.export_bytes = size_t(impl_->send_buffer.size());
  } else {
    reg.landing_base = impl_->landing.data();
    reg.landing_bytes = size_t(impl_->landing.size());
  }
  impl_->transport->bootstrap(impl_->world.comm, reg);
  impl_->publish_contact();
  MPI_CHECK(MPI_Barrier(impl_->world.comm));
  return now_s() - t0;
}

RankStats Engines::sync(EngineKind engine, int sync_index, uint64_t version) {
  Impl& m = *impl_;
  if (!m.armed) m.arm();
  if (m.world.trainer) {
    int32_t stale = -1;
    if (sync_index == m.opt.stale_at_sync && !m.shards->shards().empty()) stale = m.shards->shards().front().hf;
    m.shards->fill(version, stale);
    // Replacements for dead ranks come in at the boundary (rank 0 decides).
    m.accept_joins(version);
    // A broadcast is a collective over every rank: once one has died, it cannot run.
    const bool broadcast = engine_spec(engine).delivery == Delivery::kBroadcast;
    int skip = m.world.rank == 0 && broadcast && m.failures;
    MPI_CHECK(MPI_Bcast(&skip, 1, MPI_INT, 0, m.world.trainers));
    // Every trainer starts with rank 0's view of which consumers are down (also a barrier).
    MPI_CHECK(MPI_Bcast(m.down.data(), int(m.down.size()), MPI_BYTE, 0, m.world.trainers));
    MPI_CHECK(MPI_Bcast(m.dead.data(), int(m.dead.size()), MPI_BYTE, 0, m.world.trainers));
    m.beat();
    for (int r = m.world.num_trainers; r < m.world.size; ++r)
      if (m.dead[size_t(r)]) m.transport->forget_peer(r);
    if (m.world.rank == 0) {
      CtrlMsg start;
      start.type = kMsgStart;
      start.a = sync_index;
      start.b = int(engine);
      start.c = skip;
      start.x = int64_t(version);
      m.live_at_start.clear();
      for (int r = m.world.num_trainers; r < m.world.size; ++r) {
        if (!m.down[size_t(r)]) {
          m.transport->send(r, start);
          if (!skip) m.live_at_start.push_back(r);
        } else if (!m.dead[size_t(r)]) {
          // Down but alive: told so at every sync (after the first time, a keep-alive for
          // its stall watchdog).
          CtrlMsg sd;
          sd.type = kMsgStandDown;
          m.transport->send(r, sd);
          m.notified_down[size_t(r)] = 1;
        }
      }
      // Before any blocking collective (broadcast); a consumer that cannot take its START
      // is dead (its reports will not be awaited).
      for (int c : m.transport->flush_sends_within(m.opt.failure_timeout_s))
        if (c >= m.world.num_trainers) m.declare_dead(c);
    }
    if (skip) {
      RankStats st;
      st.rank = m.world.rank;
      st.trainer = 1;
      st.skipped = 1;
      return st;
    }
    return broadcast ? m.run_broadcast_trainer(sync_index, version) : m.run_producer(engine, sync_index, version);
  }
  if (m.stood_down) {
    // Down: wait for the START of this sync or a later one (the replica is back up, a
    // replacement having taken its dead rank's place), or the end of the run.
    if (m.wait_start_or_finish() && uint64_t(m.pending_start->x) == version) {
      m.stood_down = false;
    } else {
      RankStats st;
      st.rank = m.world.rank;
      st.reported = 0;
      st.stood_down = 1;
      return st;
    }
  }
  RankStats st = engine_spec(engine).delivery == Delivery::kBroadcast ? m.run_broadcast_consumer(sync_index, version)
                                                                       : m.run_consumer(engine, sync_index, version);
  st.replica = m.world.replica;
  return st;
}

bool Engines::stood_down() const { return impl_->stood_down; }

std::vector<int> Engines::down_replicas() const {
  const Impl& m = *impl_;
  std::vector<int> out;
  int per = m.inference.layout().ranks_per_replica();
  for (int rep = 0; rep < m.inference.layout().replicas; ++rep)
    if (m.down[size_t(m.world.num_trainers + rep * per)]) out.push_back(rep);
  return out;
}

bool Engines::finish() {
  Impl& m = *impl_;
  struct Disarm {
    Impl& m;
    ~Disarm() { m.armed = false; }
  } disarm{m};
  int degraded = m.failures ? 1 : 0;
  if (m.world.trainer) {
    int any = 0;
    MPI_CHECK(MPI_Allreduce(&degraded, &any, 1, MPI_INT, MPI_MAX, m.world.trainers));
    degraded = any;
    m.withdraw_contact();
    if (m.world.rank == 0) {
      // Replacements that came too late are told so.
      CtrlMsg msg;
      while (m.transport->poll(&msg))
        if (msg.type == kMsgJoin) m.absorb_join(std::move(msg));
      for (CtrlMsg& j : m.pending_joins) {
        std::vector<uint8_t> contact;
        uint32_t n = 0;
        if (j.payload.size() < 4) continue;
        std::memcpy(&n, j.payload.data(), 4);
        if (n > j.payload.size() - 4) continue;
        contact.assign(j.payload.begin() + 4, j.payload.begin() + 4 + long(n));
        CtrlMsg r;
        r.type = kMsgReject;
        std::string why = "the run ended before world rank " + std::to_string(j.from) + " could be taken back";
        r.payload.assign(why.begin(), why.end());
        try {
          m.transport->send_to_contact(contact, r);
        } catch (const std::exception&) {
        }
      }
      m.pending_joins.clear();
      CtrlMsg fin;
      fin.type = kMsgFinish;
      fin.a = degraded;
      for (int r = m.world.num_trainers; r < m.world.size; ++r)
        if (!m.dead[size_t(r)]) m.transport->send(r, fin);
      m.transport->flush_sends_within(m.opt.failure_timeout_s);
    }
    return degraded != 0;
  }
  // Consumers wait for FINISH (stood-down ranks may have seen it already).
  while (m.wait_start_or_finish()) m.pending_start.reset();  // a START now would be a bug of rank 0
  return m.finish_degraded;
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
  MPI_CHECK(MPI_Gather(&mine, int(sizeof mine), MPI_BYTE, trainers.data(), int(sizeof mine), MPI_BYTE, 0, m.world.trainers));
  // Consumers any trainer declared dead in this sync.
  std::vector<uint8_t> dead_seen(m.dead.size(), 0);
  MPI_CHECK(MPI_Reduce(m.dead.data(), dead_seen.data(), int(m.dead.size()), MPI_BYTE, MPI_MAX, 0, m.world.trainers));
  m.beat();
  if (m.world.rank != 0) return all;
  for (size_t r = 0; r < dead_seen.size(); ++r)
    if (dead_seen[r]) m.declare_dead(int(r));
  all = trainers;
  all.resize(size_t(m.world.size));
  for (int r = m.world.num_trainers; r < m.world.size; ++r) {
    all[size_t(r)].rank = r;
    all[size_t(r)].reported = 0;
    all[size_t(r)].stood_down = m.down[size_t(r)] && std::find(m.live_at_start.begin(), m.live_at_start.end(), r) == m.live_at_start.end();
  }
  std::vector<int> missing;
  for (int r : m.live_at_start)
    if (!m.dead[size_t(r)]) missing.push_back(r);
  IdleBackoff wait_backoff;
  double deadline = now_s() + m.opt.failure_timeout_s;
  while (!missing.empty()) {
    CtrlMsg msg;
    if (!m.early_reports.empty()) {
      msg = std::move(m.early_reports.front());
      m.early_reports.pop_front();
    } else if (!m.transport->poll(&msg)) {
      m.transport->progress();
      if (now_s() > deadline) {  // silent past the failure timeout: dead
        for (int r : missing) m.declare_dead(r);
        break;
      }
      wait_backoff.pause();
      continue;
    }
    if (msg.type == kMsgDone || msg.type == kMsgRequest) continue;  // late traffic of a dead peer's replica
    if (msg.type == kMsgJoin) {
      m.absorb_join(std::move(msg));
      continue;
    }
    if (msg.type != kMsgReport || msg.payload.size() != sizeof(RankStats) || msg.from < m.world.num_trainers)
      throw Error("rank 0: unexpected message " + std::to_string(msg.type) + " from rank " + std::to_string(msg.from) +
                  " while collecting reports");
    std::memcpy(&all[size_t(msg.from)], msg.payload.data(), sizeof(RankStats));
    m.beat();
    missing.erase(std::remove(missing.begin(), missing.end(), msg.from), missing.end());
    deadline = now_s() + m.opt.failure_timeout_s;
  }
  m.take_down_replicas();
  return all;
}

double Engines::measure_link(int iters) {
  Impl& m = *impl_;
  const int consumer = m.world.num_trainers;  // inference rank 0
  double gbps = 0;
  if (m.world.rank == consumer) {
    size_t bytes = size_t(std::min(m.opt.send_buffer_bytes, m.opt.recv_buffer_bytes));
    auto once = [&] {
      Transport::GetId id = m.transport->get(0, 0, 0, bytes);
      while (!m.transport->test(id)) m.transport->progress();
    };
    once();  // warm-up
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) once();
    gbps = double(bytes) * iters / (now_s() - t0) / 1e9;
    MPI_CHECK(MPI_Send(&gbps, 1, MPI_DOUBLE, 0, 7002, m.world.comm));
  } else if (m.world.rank == 0) {
    // Keep the transport progressing: some UCX paths (shared-memory emulated RMA) need the
    // target's progress to complete a get.
    MPI_Request req;
    MPI_CHECK(MPI_Irecv(&gbps, 1, MPI_DOUBLE, consumer, 7002, m.world.comm, &req));
    int flag = 0;
    while (!flag) {
      m.transport->progress();
      MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
    }
  }
  // Everyone else waits without spinning, so the two measuring ranks have the cores.
  MPI_Request barrier;
  MPI_CHECK(MPI_Ibarrier(m.world.comm, &barrier));
  IdleBackoff backoff;
  for (int flag = 0; !flag;) {
    MPI_CHECK(MPI_Test(&barrier, &flag, MPI_STATUS_IGNORE));
    if (!flag) backoff.pause();
  }
  return m.world.rank == 0 ? gbps : 0;
}

void Engines::shutdown() { impl_->transport->shutdown(); }

std::string Engines::transport_description() const { return impl_->transport->describe(); }

std::string Engines::device_description() const { return impl_->device->describe(); }

std::string Engines::collectives_description() const {
  const Impl& m = *impl_;
  std::string s;
  if (m.tp_comm) s += "gather " + m.trainers_comm->name();
  if (m.bcast_comm) s += std::string(s.empty() ? "" : ", ") + "bcast " + m.bcast_comm->name();
  return s.empty() ? "-" : s;
}

const RankPlan* Engines::my_plan() const { return impl_->plan; }

}  // namespace shardsync
