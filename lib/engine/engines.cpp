// The engines' set-up and public API: state of each side, schedules and routes per engine
// row, registration, one sync (dispatching to the row's delivery), link measurement.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "common/error.hpp"
#include "common/table.hpp"
#include "engine/internal.hpp"
#include "transport/transport.hpp"  // host_name

namespace shardsync {

int64_t SyncOptions::effective_chunk_bytes() const {
  return std::max<int64_t>(16, std::min({chunk_bytes, send_buffer_bytes / 2, recv_buffer_bytes / 2}) & ~int64_t(15));
}

void SyncOptions::check_sizes() const {
  constexpr int64_t kTiB = int64_t(1) << 40;
  auto in_range = [](const char* flag, int64_t v, int64_t lo, int64_t hi, const char* what) {
    if (v < lo || v > hi)
      throw InputError(flag, std::to_string(v), std::string("expected ") + fmt_human_bytes(lo) + " to " +
                                                    fmt_human_bytes(hi) + " (" + what + ")");
  };
  in_range("--send-buffer", send_buffer_bytes, 4 << 10, kTiB, "the trainer's registered send buffer");
  in_range("--recv-buffer", recv_buffer_bytes, 4 << 10, kTiB, "the inference rank's registered receive buffer");
  in_range("--chunk", chunk_bytes, 1 << 10, kTiB, "the largest packed chunk; capped at half of each buffer");
  in_range("--bucket", bucket_bytes, 4 << 10, kTiB, "the broadcast bucket");
  in_range("--min-get", min_get_bytes, 0, kTiB, "pieces smaller than this stay packed");
  if (anchor_every < 1) throw InputError("--anchor-every", std::to_string(anchor_every), "expected 1 or more syncs");
}

Engines::Impl::Impl(World& w, const ModelSpec& m, const TrainerPlacement& t, const InferencePlacement& i,
                    const std::vector<RankPlan>& p, const SyncOptions& o)
    : world(w), model(m), trainer(t), inference(i), plans(p), opt(o) {
  chunk_bytes = opt.effective_chunk_bytes();
  if (opt.wire_fp8) check_fp8_wire(model, trainer, inference);  // every rank refuses alike
  if (opt.checksum && opt.wire_fp8)
    throw InputError("--checksum", "on", "not with --wire fp8 yet: the trainer hashes bf16 where it lies, the receiver gets codes");
  if (opt.checksum && opt.dedupe_node)
    throw InputError("--checksum", "on", "not with --dedupe-node yet: pieces copied from a rank of the node have no trainer sums");
  if (opt.weights == WeightsFrom::kCaller && inference.layout().quant != Quant::kNone)
    throw InputError("quant", quant_name(inference.layout().quant),
                     "none: the caller's parameters are bf16 engine parameters (FP8 targets through the library come "
                     "with the fused copy-quantize)");
  liveness.dead.assign(size_t(world.size), 0);
  liveness.down.assign(size_t(world.size), 0);
  liveness.notified_down.assign(size_t(world.size), 0);
  device = opt.memory == MemKind::kCuda ? make_cuda_device(opt.gpu) : make_cpu_device();
  consumer_side.layerwise_pool.set_device(device.get());
  transport = make_transport(opt.transport);
  if (!transport->supports(opt.memory))
    throw InputError("--transport", opt.transport, "cannot move " + std::string(opt.memory == MemKind::kCuda ? "GPU" : "host") +
                                                       " memory in this build");
  if (opt.one_pass && !opt.layerwise && !opt.delta) one_pass = transport->maps_peer_memory() ? OnePass::kMapped : OnePass::kContiguous;
  // Collective set-up in a fixed order on every rank: trainer groups, then the broadcast group.
  if (world.trainer) {
    const int64_t weights = weights_layout(model, trainer, world.rank).bytes;
    trainer_side.registered = DeviceBuffer(device.get(), weights_base() + weights);
    trainer_side.send_buffer = Region{trainer_side.registered.data(), opt.send_buffer_bytes};
    trainer_side.shards =
        std::make_unique<TrainerShards>(model, trainer, world.rank, trainer_side.registered.data() + weights_base(), *device);
    if (opt.weights == WeightsFrom::kCaller) {
      auto caller = std::make_unique<CallerSource>(*trainer_side.shards, *device);
      trainer_side.caller = caller.get();
      trainer_side.source = std::move(caller);
    } else {
      trainer_side.source = std::make_unique<SyntheticSource>(*trainer_side.shards, opt.updates, opt.stale_at_sync);
    }
    uint8_t* region = trainer_side.registered.data();  // gathers may read the members' weights
    trainer_side.trainers_comm = make_group_comm(world.trainers, *device, region);
    trainer_side.tp_comm = make_group_comm(world.tp_group, *device, region);
    trainer_side.etp_comm = make_group_comm(world.etp_group, *device, region);
  }
  if (world.bcast != MPI_COMM_NULL) bcast_comm = make_group_comm(world.bcast, *device);
  if (!world.trainer) {
    consumer_side.plan = &plans.at(size_t(world.local_rank));
    int64_t off = 0;
    for (const EngineParam& ep : consumer_side.plan->params) {
      consumer_side.param_offset.push_back(off);
      consumer_side.group_of_param.push_back(ep.group);
      auto& span = consumer_side.group_span[ep.group];
      if (span.second == 0) span.first = off;
      span.second += ep.bytes();
      off += ep.bytes();
    }
    consumer_side.registered = DeviceBuffer(device.get(), live_base() + off);
    consumer_side.landing = Region{consumer_side.registered.data(), opt.recv_buffer_bytes};
    consumer_side.live = Region{consumer_side.registered.data() + live_base(), off};
    consumer_side.params_bound = Bindings(consumer_side.plan->params.size());
    for (size_t k = 0; k < consumer_side.plan->params.size(); ++k) {
      const EngineParam& ep = consumer_side.plan->params[k];
      consumer_side.param_slots.push_back(
          TensorSlot{ep.name, ep.dtype, ep.shape, consumer_side.live.data() + consumer_side.param_offset[k], ep.bytes()});
    }
    for (const PlanEntry& e : consumer_side.plan->entries)
      if (!e.is_fill())
        consumer_side.group_copy_bytes[consumer_side.group_of_param[size_t(e.engine_param)]] +=
            e.numel() * dtype_bytes(consumer_side.plan->params[size_t(e.engine_param)].dtype);
    setup_quant();
  }
  if (opt.dedupe_node) {
    // Every rank refuses alike (no collective before).
    if (world.comm == MPI_COMM_NULL || !opt.rendezvous.empty())
      throw InputError("--dedupe-node", "on", "not with --rendezvous: a replacement process reaches only the trainers, not the "
                                              "inference ranks of its node");
    char mine[64] = {};
    std::snprintf(mine, sizeof mine, "%s", host_name(world.rank).c_str());
    std::vector<char> all(size_t(world.size) * sizeof mine);
    MPI_CHECK(MPI_Allgather(mine, sizeof mine, MPI_CHAR, all.data(), sizeof mine, MPI_CHAR, world.comm));
    host_of_rank.assign(size_t(world.size), -1);
    for (int r = 0; r < world.size; ++r)
      for (int q = 0; q <= r && host_of_rank[size_t(r)] < 0; ++q)
        if (std::strncmp(all.data() + size_t(q) * sizeof mine, all.data() + size_t(r) * sizeof mine, sizeof mine) == 0)
          host_of_rank[size_t(r)] = q;
    // Every replica laid out alike on its nodes: local ranks share a node in each replica
    // exactly where they do in replica 0 (the shared pieces are per local rank).
    const int per = inference.layout().ranks_per_replica(), first = world.num_trainers;
    for (int rep = 1; rep < inference.layout().replicas; ++rep)
      for (int a = 0; a < per; ++a)
        for (int b = 0; b < a; ++b) {
          const bool same0 = host_of_rank[size_t(first + a)] == host_of_rank[size_t(first + b)];
          const bool same = host_of_rank[size_t(first + rep * per + a)] == host_of_rank[size_t(first + rep * per + b)];
          if (same != same0)
            throw InputError("--dedupe-node", "on",
                             "every replica's ranks laid out alike on the nodes; local ranks " + std::to_string(b) + " and " +
                                 std::to_string(a) + " share a node in replica " + std::to_string(same0 ? 0 : rep) +
                                 " but not in replica " + std::to_string(same0 ? rep : 0) + " (world ranks " +
                                 std::to_string(first + rep * per + b) + ", " + std::to_string(first + rep * per + a) + ")");
        }
  }
  if (opt.stall_timeout_s > 0) start_watchdog();
}

const std::vector<int64_t>& Engines::Impl::param_offsets(int local_rank) {
  auto it = param_offsets_of_local.find(local_rank);
  if (it != param_offsets_of_local.end()) return it->second;
  std::vector<int64_t> off;
  int64_t at = 0;
  for (const EngineParam& ep : plans.at(size_t(local_rank)).params) {
    off.push_back(at);
    at += ep.bytes();
  }
  return param_offsets_of_local.emplace(local_rank, std::move(off)).first->second;
}

GatherContext Engines::Impl::gather_context() {
  return GatherContext{&model, &trainer, trainer_side.shards.get(), &world, device.get(), trainer_side.trainers_comm.get(), trainer_side.tp_comm.get(),
                       trainer_side.etp_comm.get(), weights_base(), [this](int r) -> const WeightsLayout& { return weights_of(r); },
                       trainer_side.source.get(), [this](int r, int32_t hf) { return caller_shard(r, hf); }};
}

const WeightsLayout& Engines::Impl::weights_of(int trainer_rank) {
  auto it = trainer_weights.find(trainer_rank);
  if (it == trainer_weights.end()) it = trainer_weights.emplace(trainer_rank, weights_layout(model, trainer, trainer_rank)).first;
  return it->second;
}

bool Engines::Impl::reads_directly(SourcePolicy policy, int trainer_rank, const ChunkPiece& piece) const {
  if (one_pass == OnePass::kOff || !slab_is_own_shard(model, trainer, piece.hf, policy, trainer_rank)) return false;
  if (opt.wire_fp8 && fp8_quantized_hf(model.param(piece.hf))) return false;  // quantized when packed
  if (one_pass == OnePass::kMapped) return true;
  if (piece.copy.numel * dtype_bytes(model.param(piece.hf).dtype) < opt.min_get_bytes) return false;
  CopyDesc d = piece.copy;  // one run on both sides: a single get
  coalesce(d);
  return d.dims.size() == 1 && d.dims[0].src_stride == 1 && d.dims[0].dst_stride == 1;
}

std::vector<ChunkPiece> Engines::Impl::direct_pieces(EngineKind e, int local_rank, int trainer_rank) {
  std::vector<ChunkPiece> out;
  if (engine_spec(e).delivery != Delivery::kPull || one_pass == OnePass::kOff) return out;
  const UnitSchedule us = unit_schedule(e);
  const Routes& r = routes_for(source_policy(e));
  const RankSchedule rs = make_rank_schedule(us.units, us.unit_of_hf, plans.at(size_t(local_rank)), r.pulls[size_t(local_rank)]);
  for (const auto& per_trainer : rs.pulls)  // as consumer_schedule splits them
    for (const auto& [t, pulls] : per_trainer)
      if (t == trainer_rank)
        for (const ChunkPiece& p : pulls)
          if (reads_directly(source_policy(e), t, p)) out.push_back(p);
  return out;
}

void Engines::Impl::compare_sums(const std::vector<ChunkPiece>& pieces, const std::vector<uint64_t>& landed,
                                 const std::vector<uint8_t>& sent, int trainer_rank, RankStats& st) {
  if (sent.size() != 8 * pieces.size())
    throw Error("consumer rank " + std::to_string(world.rank) + ": trainer rank " + std::to_string(trainer_rank) + " sent " +
                std::to_string(sent.size() / 8) + " checksums for " + std::to_string(pieces.size()) + " pieces");
  st.checksum_pieces += int64_t(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (landed[i] == u64_at(sent, i)) continue;
    if (st.checksum_bad++ > 0) continue;
    const ChunkPiece& p = pieces[i];
    st.bad_sum_hf = p.hf;
    st.bad_sum_param = consumer_side.plan->entries[size_t(p.entry)].engine_param;
    st.bad_sum_from = trainer_rank;
    dst_extent(p.copy, &st.bad_sum_lo, &st.bad_sum_hi);
  }
}

void Engines::Impl::check_direct_sums(const ConsumerSchedule& s, const OnePassReads& direct, uint64_t version, RankStats& st) {
  if (!opt.checksum || s.direct.empty()) return;
  IdleBackoff backoff;
  for (const auto& [t, pieces] : s.direct) {
    int64_t bytes = 0;
    for (const ChunkPiece& p : pieces) bytes += p.bytes;
    if (bytes == 0) continue;  // as the trainer: no reads, no sums
    // The trainer's sums come at the sync's start; wait for them while its heartbeats come.
    for (;;) {
      auto it = consumer_side.direct_hashes.find(t);
      if (it != consumer_side.direct_hashes.end() && uint64_t(it->second.z) == version) break;
      CtrlMsg m;
      if (transport->poll(&m)) {
        if (m.type != kMsgHashes) throw Error("consumer: unexpected message " + std::to_string(m.type) + " while waiting for checksums");
        consumer_side.direct_hashes[m.from] = std::move(m);
        beat();
        continue;
      }
      waiting("waiting for a trainer's checksums of the one-pass pieces", t);
      transport->progress();
      check_broken();
      backoff.pause();
    }
    PhaseTimer timer(st.hash_s);
    std::vector<uint64_t> landed;
    if (const HashTicket* ticket = direct.hashed(t)) {
      landed = device->sums(*ticket);  // hashed inside the mapped reads' copy (complete by now)
    } else {  // read by gets: hashed where they landed
      std::vector<HashJob> jobs;
      for (const ChunkPiece& p : pieces) {
        const int32_t ep = consumer_side.plan->entries[size_t(p.entry)].engine_param;
        jobs.push_back(piece_hash_at_receiver(p, consumer_side.param(ep),
                                              int32_t(dtype_bytes(model.param(p.hf).dtype))));
      }
      landed = device->checksum(jobs);
    }
    compare_sums(pieces, landed, consumer_side.direct_hashes.at(t).payload, t, st);
  }
}

const std::vector<Fp8Source>* Engines::Impl::fp8_sources(SourcePolicy policy, int trainer_rank) {
  if (!opt.wire_fp8) return nullptr;
  const int key_rank = policy == SourcePolicy::kDirect ? trainer_rank : -1;
  auto it = fp8_sources_cache.find({int(policy), key_rank});
  if (it != fp8_sources_cache.end()) return &it->second;
  std::vector<Fp8Source> out(model.params().size());
  for (int32_t i = 0; i < int32_t(out.size()); ++i) {
    const ParamMeta& p = model.param(i);
    if (!fp8_quantized_hf(p)) continue;  // 2-D (check_fp8_wire)
    out[size_t(i)] = Fp8Source{p.shape[0], p.shape[1]};
    if (policy == SourcePolicy::kDirect)  // pulls index the shard this rank holds
      for (const TrainerShard& s : trainer.shards(i))
        if (s.rank == trainer_rank) out[size_t(i)] = Fp8Source{s.box.length[0], s.box.length[1]};
  }
  return &fp8_sources_cache.emplace(std::make_pair(int(policy), key_rank), std::move(out)).first->second;
}

CopyDesc Engines::Impl::fp8_scales_copy(const ChunkPiece& piece) const {
  const ConsumerSide& cs = consumer_side;
  const int32_t ep = cs.plan->entries[size_t(piece.entry)].engine_param;
  const int32_t qi = cs.quant_of_param[size_t(ep)];
  const std::string& name = cs.plan->params[size_t(ep)].name;
  if (qi < 0) throw Error("fp8 wire: " + model.param(piece.hf).name + " arrives quantized into " + name + ", which the target does not quantize");
  const QuantParam& q = cs.quant[size_t(qi)];
  const int64_t rows = piece.copy.dims[0].size, cols = piece.copy.dims[1].size;
  const int64_t d0 = piece.copy.dst_offset, mat = d0 / (q.rows * q.cols), prow = d0 % (q.rows * q.cols) / q.cols,
                pcol = d0 % q.cols;
  const QuantRegion* region = nullptr;
  for (const QuantRegion& r : q.regions)
    if (r.matrix == mat && prow >= r.row0 && prow < r.row0 + r.rows) region = &r;
  if (!region || (rows > 1 && piece.copy.dims[0].dst_stride != q.cols) || (prow - region->row0) % 128 != 0 ||
      pcol % 128 != 0 || prow + rows > region->row0 + region->rows)
    throw InputError("--wire fp8", name,
                     "a piece of " + model.param(piece.hf).name + " lands at row " + std::to_string(prow) + ", column " +
                         std::to_string(pcol) + ": not on a 128 x 128 block of the parameter's weight_scale_inv");
  const int64_t br = (rows + 127) / 128, bc = (cols + 127) / 128;
  CopyDesc d;
  d.src_offset = 0;
  d.dst_offset = (mat * q.scale_rows() + region->scale_row0 + (prow - region->row0) / 128) * q.scale_cols() + pcol / 128;
  d.numel = br * bc;
  d.dims = {CopyDim{br, bc, q.scale_cols()}, CopyDim{bc, 1, 1}};
  return d;
}

const Routes& Engines::Impl::routes_for(SourcePolicy policy) {
  auto it = routes.find(int(policy));
  if (it == routes.end()) {
    Routes r = route_plans(model, trainer, plans, inference.layout().replicas, policy);
    if (opt.dedupe_node) {
      std::vector<int> host_of_local;
      for (int l = 0; l < inference.layout().ranks_per_replica(); ++l) host_of_local.push_back(host_of_rank[size_t(world.num_trainers + l)]);
      // An FP8 target's quantized weights are not shared (the sharer's process step quantizes
      // what landed; the codes and scales are not in the live bf16 weights a sharer reads).
      const bool fp8 = inference.layout().quant != Quant::kNone;
      dedupes[int(policy)] = dedupe_node(model, plans, inference.layout().replicas, r, host_of_local,
                                         [&](int32_t hf) { return !(fp8 && fp8_quantized_hf(model.param(hf))); });
    }
    it = routes.emplace(int(policy), std::move(r)).first;
  }
  return it->second;
}

namespace {
// A schedule per engine row, made once.
template <class S, class F>
const S& cached(std::map<int, S>& schedules, EngineKind e, F&& make) {
  auto it = schedules.find(int(e));
  if (it == schedules.end()) it = schedules.emplace(int(e), make()).first;
  return it->second;
}
}  // namespace

UnitSchedule Engines::Impl::unit_schedule(EngineKind e) const {
  UnitSchedule s;
  s.units = make_units(model, engine_spec(e).unit, opt.bucket_bytes);
  s.unit_of_hf = unit_of_tensor(s.units, model.params().size());
  return s;
}

const ProducerSchedule& Engines::Impl::producer_schedule(EngineKind e) {
  return cached(trainer_side.schedules, e, [&] {
    ProducerSchedule s;
    static_cast<UnitSchedule&>(s) = unit_schedule(e);
    s.expected.assign(s.units.size(), std::vector<std::vector<ChunkPiece>>(plans.size()));
    if (engine_spec(e).delivery != Delivery::kPull) return s;
    const Routes& r = routes_for(source_policy(e));
    s.direct_bytes.assign(plans.size(), 0);
    for (const RankPlan& p : plans)
      for (const Pull& pull : r.pulls[size_t(p.local_rank)]) {
        if (pull.trainer_rank != world.rank) continue;
        const PlanEntry& entry = p.entries[size_t(pull.entry)];
        ChunkPiece piece{entry.hf_param, pull.entry, pull.slab_lo, pull.copy, 0, 0, false, {}};
        if (reads_directly(source_policy(e), world.rank, piece))
          s.direct_bytes[size_t(p.local_rank)] += piece.copy.numel * dtype_bytes(model.param(piece.hf).dtype);
        else
          s.expected[size_t(s.unit_of_hf[size_t(entry.hf_param)])][size_t(p.local_rank)].push_back(std::move(piece));
      }
    if (opt.checksum) {
      s.direct.resize(plans.size());
      for (size_t l = 0; l < plans.size(); ++l)
        if (s.direct_bytes[l] > 0) s.direct[l] = direct_pieces(e, int(l), world.rank);
    }
    return s;
  });
}

const ConsumerSchedule& Engines::Impl::consumer_schedule(EngineKind e) {
  return cached(consumer_side.schedules, e, [&] {
    ConsumerSchedule s;
    static_cast<UnitSchedule&>(s) = unit_schedule(e);
    if (engine_spec(e).delivery != Delivery::kPull) return s;
    const Routes& r = routes_for(source_policy(e));
    s.pulls = make_rank_schedule(s.units, s.unit_of_hf, *consumer_side.plan, r.pulls[size_t(world.local_rank)]);
    s.chunks.resize(s.units.size());
    for (size_t u = 0; u < s.units.size(); ++u) {
      auto& per_trainer = s.pulls.pulls[u];
      for (auto& [t, pulls] : per_trainer) {  // one-pass pieces leave the packed schedule
        std::vector<ChunkPiece> packed;
        for (ChunkPiece& p : pulls) {
          if (reads_directly(source_policy(e), t, p)) {
            p.bytes = p.copy.numel * dtype_bytes(model.param(p.hf).dtype);
            s.direct_bytes += p.bytes;
            s.direct[t].push_back(std::move(p));
          } else {
            packed.push_back(std::move(p));
          }
        }
        pulls = std::move(packed);
      }
      std::erase_if(per_trainer, [](const auto& tp) { return tp.second.empty(); });
      for (const auto& [t, pulls] : per_trainer) {
        s.chunks[u].emplace_back(t, make_chunks(model, pulls, chunk_bytes, fp8_sources(source_policy(e), t)));
        for (Chunk& c : s.chunks[u].back().second)
          for (ChunkPiece& p : c.pieces)
            if (p.fp8) p.scales = fp8_scales_copy(p);
        s.num_chunks += int64_t(s.chunks[u].back().second.size());
      }
    }
    if (opt.dedupe_node) {
      const NodeDedupe& d = dedupes.at(int(source_policy(e)));
      const int L = world.local_rank;
      s.shares = d.shares[size_t(L)];
      std::set<int> pullers;
      for (const Share& sh : s.shares) {
        const int32_t ep = consumer_side.plan->entries[size_t(sh.entry)].engine_param;
        s.shared_group_bytes[consumer_side.group_of_param[size_t(ep)]] += sh.bytes;
        s.shared_bytes += sh.bytes;
        pullers.insert(world_rank_of_local(sh.from));
      }
      s.pullers.assign(pullers.begin(), pullers.end());
      for (int l : d.sharers[size_t(L)]) s.sharers.push_back(world_rank_of_local(l));
    }
    return s;
  });
}

Engines::Engines(World& world, const ModelSpec& model, const TrainerPlacement& trainer,
                 const InferencePlacement& inference, const std::vector<RankPlan>& plans, const SyncOptions& options)
    : impl_(std::make_unique<Impl>(world, model, trainer, inference, plans, options)) {}

Engines::~Engines() = default;

Engines::Impl::~Impl() {
  stop_watchdog = true;
  if (watchdog.joinable()) watchdog.join();
  for (const auto& [key, mapped] : opened) {
    try {
      device->ipc_close(mapped);
    } catch (const std::exception&) {  // a context already torn down: nothing left to close
    }
  }
}

bool Engines::Impl::shares_tables() const {
  return opt.weights == WeightsFrom::kCaller && world.comm != MPI_COMM_NULL && one_pass != OnePass::kContiguous &&
         !transport->supports_rejoin();
}

void Engines::Impl::share_tables() {
  tables_shared = true;
  std::vector<uint8_t> mine;
  if (world.trainer) {
    std::vector<std::pair<int32_t, std::string>> notes;
    mine = trainer_side.caller->share(model.params().size(), &notes).encode();
    if (!notes.empty() && device->kind() == MemKind::kCuda)  // once: a GPU tensor that costs a copy before every sync
      std::fprintf(stderr, "shardsync: trainer rank %d: %zu bound tensors are copied into their slots before each sync, "
                   "as the node's other processes cannot map them; first: %s: %s\n", world.rank, notes.size(),
                   model.param(notes.front().first).name.c_str(), notes.front().second.c_str());
  }
  waiting("exchanging the trainers' tensor tables at the first sync");
  int n = int(mine.size());
  std::vector<int> counts(size_t(world.size)), displs(size_t(world.size));
  MPI_Request req;
  MPI_CHECK(MPI_Iallgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, world.comm, &req));
  wait(&req);
  int total = 0;
  for (int r = 0; r < world.size; ++r) {
    displs[size_t(r)] = total;
    total += counts[size_t(r)];
  }
  std::vector<uint8_t> all(size_t(std::max(total, 1)));
  MPI_CHECK(MPI_Iallgatherv(mine.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, world.comm, &req));
  wait(&req);
  for (int t = 0; t < world.num_trainers; ++t) {
    const auto at = all.begin() + displs[size_t(t)];
    tables[t] = TensorTable::decode(std::vector<uint8_t>(at, at + counts[size_t(t)]), model.params().size());
  }
}

const uint8_t* Engines::Impl::caller_shard(int trainer_rank, int32_t hf) {
  auto it = tables.find(trainer_rank);
  if (it == tables.end()) return nullptr;
  const TensorTable& t = it->second;
  const int32_t seg = t.segment.at(size_t(hf));
  if (seg < 0) return nullptr;
  if (trainer_rank == world.rank) return trainer_side.source->data(hf);  // this rank's own memory
  auto [o, fresh] = opened.try_emplace({trainer_rank, seg}, nullptr);
  if (fresh) o->second = device->ipc_open(t.segments.at(size_t(seg)));
  return o->second + t.offset[size_t(hf)];
}

double Engines::bootstrap() {
  double t0 = now_s();
  Registration reg;
  reg.kind = impl_->device->kind();
  if (impl_->world.trainer) {
    reg.export_base = impl_->trainer_side.registered.data();
    reg.export_bytes = size_t(impl_->trainer_side.registered.size());
  } else {
    reg.landing_base = impl_->consumer_side.registered.data();
    reg.landing_bytes = size_t(impl_->consumer_side.registered.size());
    if (impl_->opt.dedupe_node) {  // the ranks of its node read its live weights
      reg.export_base = reg.landing_base;
      reg.export_bytes = reg.landing_bytes;
    }
  }
  impl_->transport->bootstrap(impl_->world.comm, reg);
  // Heartbeats: rank 0 draws the job's token; every rank learns every rank's contact.
  Impl& m = *impl_;
  uint64_t token = 0;
  if (m.world.rank == 0) {
    std::random_device rd;
    token = (uint64_t(rd()) << 32 | rd()) ^ uint64_t(getpid());
  }
  MPI_CHECK(MPI_Bcast(&token, 1, MPI_UINT64_T, 0, m.world.comm));
  m.heartbeats = std::make_unique<Heartbeats>(m.world.rank, m.world.size, token);
  const std::vector<uint8_t> mine = m.heartbeats->contact();
  std::vector<uint8_t> all(mine.size() * size_t(m.world.size));
  MPI_CHECK(MPI_Allgather(mine.data(), int(mine.size()), MPI_BYTE, all.data(), int(mine.size()), MPI_BYTE, m.world.comm));
  std::vector<std::vector<uint8_t>> contacts(size_t(m.world.size));
  for (int r = 0; r < m.world.size; ++r)
    if (r != m.world.rank) contacts[size_t(r)].assign(all.begin() + long(size_t(r) * mine.size()), all.begin() + long(size_t(r + 1) * mine.size()));
  m.start_heartbeats(contacts);
  impl_->publish_contact();
  MPI_CHECK(MPI_Barrier(impl_->world.comm));
  return now_s() - t0;
}

RankStats Engines::sync(EngineKind engine, int sync_index, uint64_t version) {
  Impl& m = *impl_;
  m.check_broken();
  if (!m.armed) m.arm();
  if (!m.tables_shared && m.shares_tables()) m.share_tables();  // every rank, at the first sync
  if (m.world.trainer) {
    // Peers may still read these weights for the previous sync (gathers by IPC reads): all
    // trainers are past it before any refills.
    m.waiting("at the trainers' barrier before a sync");
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(m.world.trainers, &req));
    m.wait(&req);
    const int64_t staged = m.trainer_side.source->prepare(version, sync_index);
    // Consumers may read the weights as soon as START arrives: every trainer has filled them.
    MPI_CHECK(MPI_Ibarrier(m.world.trainers, &req));
    m.wait(&req);
    // Replacements for dead ranks come in at the boundary (rank 0 decides).
    m.accept_joins(version);
    // A broadcast is a collective over every rank: once one has died, it cannot run.
    const bool broadcast = engine_spec(engine).delivery == Delivery::kBroadcast;
    int skip = m.world.rank == 0 && broadcast && m.liveness.failures;
    MPI_CHECK(MPI_Ibcast(&skip, 1, MPI_INT, 0, m.world.trainers, &req));
    m.wait(&req);
    // Every trainer starts with rank 0's view of which consumers are down (also a barrier).
    MPI_CHECK(MPI_Ibcast(m.liveness.down.data(), int(m.liveness.down.size()), MPI_BYTE, 0, m.world.trainers, &req));
    m.wait(&req);
    MPI_CHECK(MPI_Ibcast(m.liveness.dead.data(), int(m.liveness.dead.size()), MPI_BYTE, 0, m.world.trainers, &req));
    m.wait(&req);
    m.beat();
    for (int r = m.world.num_trainers; r < m.world.size; ++r)
      if (m.liveness.dead[size_t(r)]) m.transport->forget_peer(r);
    if (m.world.rank == 0) {
      CtrlMsg start;
      start.type = kMsgStart;
      start.a = sync_index;
      start.b = int(engine);
      start.c = skip;
      start.x = int64_t(version);
      m.liveness.live_at_start.clear();
      for (int r = m.world.num_trainers; r < m.world.size; ++r) {
        if (!m.liveness.down[size_t(r)]) {
          m.transport->send(r, start);
          if (!skip) m.liveness.live_at_start.push_back(r);
        } else if (!m.liveness.dead[size_t(r)]) {
          // Down but alive: told so at every sync (after the first time, a keep-alive for
          // its stall watchdog).
          CtrlMsg sd;
          sd.type = kMsgStandDown;
          m.transport->send(r, sd);
          m.liveness.notified_down[size_t(r)] = 1;
        }
      }
      // Before any blocking collective (broadcast); a consumer lost before it took its START
      // is dead (its reports will not be awaited).
      m.waiting("sending START to the inference ranks");
      for (int c : m.transport->flush_sends_unless(m.lost_fn()))
        if (c >= m.world.num_trainers) m.declare_dead(c);
    }
    if (skip) {
      RankStats st;
      st.rank = m.world.rank;
      st.trainer = 1;
      st.skipped = 1;
      return st;
    }
    RankStats st = broadcast ? m.run_broadcast_trainer(sync_index, version) : m.run_producer(engine, sync_index, version);
    st.staged_bytes = staged;
    return st;
  }
  if (m.consumer_side.stood_down) {
    // Down: wait for the START of this sync or a later one (the replica is back up, a
    // replacement having taken its dead rank's place), or the end of the run.
    if (m.wait_start_or_finish() && uint64_t(m.consumer_side.pending_start->x) == version) {
      m.consumer_side.stood_down = false;
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
  if (m.opt.weights == WeightsFrom::kCaller && st.reported && !st.stood_down && !st.skipped && !m.consumer_side.caller_in_place)
    st.staged_bytes = copy_out(m.consumer_side.param_slots, m.consumer_side.params_bound, *m.device);
  return st;
}

std::vector<TensorSlot> Engines::slots() const {
  const Impl& m = *impl_;
  if (!m.world.trainer) return m.consumer_side.param_slots;
  std::vector<TensorSlot> out;
  for (const TrainerShards::Shard& s : m.trainer_side.shards->shards())
    out.push_back(TensorSlot{m.model.param(s.hf).name, m.model.param(s.hf).dtype, s.box.length, s.data, s.bytes});
  return out;
}

void Engines::bind(size_t index, uint8_t* data) {
  Impl& m = *impl_;
  if (m.opt.weights != WeightsFrom::kCaller) throw Error("Engines::bind: this run's weights are synthetic");
  if (m.world.trainer)
    m.trainer_side.caller->bindings().bind(index, data);
  else
    m.consumer_side.params_bound.bind(index, data);
}

namespace {

// A barrier whose waiters sleep between tests, so the ranks still measuring have the cores.
void barrier_without_spinning(MPI_Comm comm) {
  MPI_Request barrier;
  MPI_CHECK(MPI_Ibarrier(comm, &barrier));
  IdleBackoff backoff;
  for (int flag = 0; !flag;) {
    MPI_CHECK(MPI_Test(&barrier, &flag, MPI_STATUS_IGNORE));
    if (!flag) backoff.pause();
  }
}

}  // namespace

double Engines::measure_copy(int iters) {
  Impl& m = *impl_;
  double gbps = 0;
  if (m.world.rank == 0) {
    const int64_t bytes = int64_t(256) << 20;
    DeviceBuffer a(m.device.get(), bytes), b(m.device.get(), bytes);
    auto once = [&] { m.device->memcpy(b.data(), a.data(), bytes); };
    for (const double w0 = now_s(); now_s() - w0 < 0.025;) {
      once();
      m.device->synchronize();
    }
    for (int round = 0; round < 3; ++round) {
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) once();
      m.device->synchronize();
      gbps = std::max(gbps, 2.0 * double(bytes) * iters / (now_s() - t0) / 1e9);
    }
  }
  barrier_without_spinning(m.world.comm);
  return gbps;
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
    // Warm-up of at least 25 ms (a GPU leaves its idle clocks), then three rounds of `iters`
    // gets; the fastest round is the link, so a floor derived from it is never too easy.
    for (const double w0 = now_s(); now_s() - w0 < 0.025;) once();
    for (int round = 0; round < 3; ++round) {
      const double t0 = now_s();
      for (int i = 0; i < iters; ++i) once();
      gbps = std::max(gbps, double(bytes) * iters / (now_s() - t0) / 1e9);
    }
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
  barrier_without_spinning(m.world.comm);
  return m.world.rank == 0 ? gbps : 0;
}

void Engines::shutdown() { impl_->transport->shutdown(); }

std::string Engines::transport_description() const { return impl_->transport->describe(); }

std::string Engines::device_description() const { return impl_->device->describe(); }

std::string Engines::collectives_description() const {
  const Impl& m = *impl_;
  std::string s;
  if (m.trainer_side.tp_comm) s += "gather " + m.trainer_side.trainers_comm->name();
  if (m.bcast_comm) s += std::string(s.empty() ? "" : ", ") + "bcast " + m.bcast_comm->name();
  return s.empty() ? "-" : s;
}

std::string Engines::one_pass_description() const {
  switch (impl_->one_pass) {
    case OnePass::kMapped: return "mapped (pieces of trainers' own shards: copy kernels through the transport's mapping)";
    case OnePass::kContiguous:
      return "contiguous (one-run pieces of trainers' own shards, " + fmt_human_bytes(impl_->opt.min_get_bytes) +
             " or more: one-sided gets into the live weights)";
    case OnePass::kOff: break;
  }
  if (impl_->opt.delta) return "off (--delta: every piece packed, each chunk compared with the one last sent)";
  return impl_->opt.layerwise ? "off (--layerwise: every piece packed)" : "off (--one-pass off)";
}

const RankPlan* Engines::my_plan() const { return impl_->consumer_side.plan; }

void stretch_sync_for_test(EngineKind e, double t0) {
  // NAME:F[,NAME:F...]: the factor of each named engine.
  static const std::map<std::string, double> hook = [] {
    std::map<std::string, double> m;
    const char* v = std::getenv("SHARDSYNC_TEST_SLOW_ENGINE");
    std::string rest = v ? v : "";
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string item = rest.substr(0, comma);
      const size_t colon = item.find(':');
      if (colon != std::string::npos) m[item.substr(0, colon)] = std::max(1.0, std::atof(item.c_str() + colon + 1));
      rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
    return m;
  }();
  const auto it = hook.find(engine_name(e));
  if (it == hook.end() || it->second <= 1) return;
  for (const double until = t0 + (now_s() - t0) * it->second; now_s() < until;) {
  }
}

}  // namespace shardsync
