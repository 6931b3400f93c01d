// The inference side of the sharded engines. Pieces whose source is a trainer's own shard
// are read in one pass from the trainer's weights into the live weights (OnePassReads),
// where the transport allows. The rest: on READY, pull the chunk one-sided from the
// trainer's registered send buffer into the registered receive buffer, copy its pieces to
// their final place (one copy() per chunk) and tell the trainer (DONE). The process is a
// copy, so pieces are written in place in the live weights; with --layerwise (vLLM's
// layerwise reload) they go to the layerwise buffer of their weight group instead, and a
// complete group is processed and copied into the live weights, on the background lane
// where the row says so (a second stream on GPUs, a thread on CPUs).
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "common/error.hpp"
#include "common/table.hpp"  // fmt_fixed
#include "engine/internal.hpp"

namespace shardsync {

bool Engines::Impl::take_start(EngineKind e, int sync_index, uint64_t version, std::deque<CtrlMsg>* early_readies,
                              CtrlMsg* start) {
  IdleBackoff wait_backoff;
  for (;;) {
    CtrlMsg m;
    if (consumer_side.pending_start) {
      m = std::move(*consumer_side.pending_start);
      consumer_side.pending_start.reset();
    } else if (!transport->poll(&m)) {
      transport->progress();
      check_broken();
      if (!opt.syncs_back_to_back) beat();  // the trainers' step between syncs is not a stall
      wait_backoff.pause();
      continue;
    }
    beat();
    if (m.type == kMsgStart) {
      if (m.a != sync_index || uint64_t(m.x) != version || m.b != int(e))
        throw Error("consumer: START of sync " + std::to_string(m.a) + " (version " + std::to_string(m.x) +
                    ") while expecting sync " + std::to_string(sync_index) + " (version " + std::to_string(version) + ")");
      for (CtrlMsg& r : consumer_side.stashed_readies)
        if (uint64_t(r.z) == version && early_readies) early_readies->push_back(std::move(r));
      consumer_side.stashed_readies.clear();
      *start = std::move(m);
      return true;
    }
    if (m.type == kMsgShareReady) {  // --dedupe-node: a puller of this node overtook our START
      consumer_side.share_ready.insert({m.a, m.from});
      continue;
    }
    if (m.type == kMsgShareDone) continue;  // a sharer later than our wait for it: nothing owed
    if (m.type == kMsgHashes) {  // --checksum: a trainer's sums of our one-pass pieces
      consumer_side.direct_hashes[m.from] = std::move(m);
      continue;
    }
    if (m.type == kMsgStandDown) {  // this replica was taken down: serve no syncs until it is back
      consumer_side.stood_down = true;
      return false;
    }
    if (m.type != kMsgReady || !early_readies)
      throw Error("consumer: unexpected message " + std::to_string(m.type) + " before START");
    early_readies->push_back(std::move(m));
  }
}

// One sync of a sharded engine on an inference rank, in named steps: start() waits for START and
// sends the requests, fill_padding() writes the loaders' zero rows, then each turn of run()'s
// loop reclaims finished device work, steps the one-pass reads, receive()s READYs, post()s gets
// for them, and land()s each completed get (its pieces copied into place, hashed, DONE sent);
// finish() checks the bytes, runs the process step, copies in the node and checks one-pass
// checksums; verify last. The rank's lasting state is Impl::consumer_side; this object holds one
// sync's.
class Consumer {
 public:
  Consumer(Engines::Impl& m, EngineKind e, int sync_index, uint64_t version)
      : m_(m), cs_(m.consumer_side), e_(e), sync_index_(sync_index), version_(version), sched_(m.consumer_schedule(e)),
        spec_(engine_spec(e)), in_place_(!m.opt.layerwise), arena_(cs_.landing.size()), chunks_left_(sched_.num_chunks) {
    st_.rank = m.world.rank;
    cs_.fp8_arrived = m.opt.wire_fp8 && !cs_.quant.empty();
    // The caller's parameters written in place (weights.hpp's ParamSink) unless something needs
    // them in the registered region: gets that land there, the node's sharers reading it,
    // layerwise buffers copied over whole groups, an FP8 target's process step.
    bool gets = false;
    for (const auto& [t, pieces] : sched_.direct) gets = gets || (m.one_pass == OnePass::kContiguous && !pieces.empty());
    cs_.caller_in_place = m.opt.weights == WeightsFrom::kCaller && in_place_ && !m.opt.dedupe_node && cs_.quant.empty() && !gets;
    group_left_ = cs_.group_copy_bytes;
    for (const auto& [g, bytes] : sched_.shared_group_bytes) group_left_[g] -= bytes;  // copied in the node after
    meter_.add(cs_.landing.size());
  }

  RankStats run() {
    if (!start()) {  // this replica was taken down
      st_.reported = 0;
      st_.stood_down = 1;
      return st_;
    }
    fill_padding();
    const bool corrupt = sync_index_ == m_.opt.corrupt_at_sync && m_.world.inference_rank == 0;  // test hook
    OnePassReads direct(m_, sched_, transfer_, corrupt && m_.opt.corrupt_in == SyncOptions::CorruptIn::kAny);
    corrupted_ = direct.corrupted();
    double idle_since = -1;
    IdleBackoff backoff;
    while (chunks_left_ > 0 || !direct.done()) {
      bool progressed = reclaim();
      progressed |= direct.step(st_, [&] { after_landing(); });
      progressed |= receive();
      m_.transport->progress();
      progressed |= post();
      progressed |= complete();
      if (!progressed && gets_.empty()) {
        if (idle_since < 0) idle_since = now_s();
      } else if (idle_since >= 0) {
        st_.wait_s += now_s() - idle_since;
        idle_since = -1;
      }
      if (progressed) {
        m_.beat();
        backoff.progress();
      } else {
        m_.waiting("pulling a sync's chunks", gets_.empty() ? -1 : gets_.begin()->second.trainer);
        m_.check_broken();
        backoff.pause();
      }
    }
    finish(direct);
    return st_;
  }

 private:
  struct InFlight {
    int32_t unit, chunk;
    int trainer;
    int64_t offset, bytes;
    std::vector<uint8_t> sums;  // --checksum: the trainer's, from its READY
  };
  struct Pending {  // device work whose completion frees something
    Fence fence;
    int64_t offset = 0, bytes = 0;  // a landing region, or
    DeviceBuffer buffer;            // a layerwise buffer back to the pool
  };

  // Waits for the trainer's START (READYs of this sync may overtake it), then sends the metadata:
  // every sync, or once where the row caches requests on the trainer. False: stood down.
  bool start() {
    CtrlMsg start;
    m_.waiting("waiting for a sync's START", 0);
    if (!m_.take_start(e_, sync_index_, version_, &readies_, &start)) return false;
    t0_ = now_s();
    if (m_.opt.delta) cs_.kept.keep_only(int32_t(e_));
    if (!spec_.cache_requests || !cs_.requests_sent[int(e_)]) {
      for (size_t u = 0; u < sched_.units.size(); ++u)
        for (const auto& [t, pulls] : sched_.pulls.pulls[u]) {
          CtrlMsg r;
          r.type = kMsgRequest;
          r.a = int32_t(u);
          r.b = m_.world.local_rank;
          r.payload = encode_pulls(pulls);
          m_.transport->send(t, r);
          ++st_.messages;
        }
      cs_.requests_sent[int(e_)] = true;
    }
    return true;
  }

  // Padding rows (the loaders' zero_() entries), in place; layerwise buffers get theirs when made.
  void fill_padding() {
    if (!in_place_) return;
    std::vector<SynthJob> fills;
    for (const PlanEntry& en : cs_.plan->entries)
      if (en.is_fill())
        fills.push_back(SynthJob{cs_.param(en.engine_param), 0, en.copy,
                                 int32_t(dtype_bytes(cs_.plan->params[size_t(en.engine_param)].dtype)), true});
    m_.device->synth(fills);
  }

  // READYs (and the messages that may come with them) into the queue of gets to post.
  bool receive() {
    bool any = false;
    CtrlMsg msg;
    while (m_.transport->poll(&msg)) {
      if (msg.type == kMsgShareReady) {
        cs_.share_ready.insert({msg.a, msg.from});
        continue;
      }
      if (msg.type == kMsgShareDone) continue;  // a sharer later than our wait for it
      if (msg.type == kMsgHashes) {
        cs_.direct_hashes[msg.from] = std::move(msg);
        continue;
      }
      if (msg.type != kMsgReady) throw Error("consumer: unexpected message " + std::to_string(msg.type));
      readies_.push_back(std::move(msg));
      any = true;
    }
    return any;
  }

  // A get for each READY the landing region has room for, in order.
  bool post() {
    bool any = false;
    while (!readies_.empty()) {
      const CtrlMsg& r = readies_.front();
      const auto& per_trainer = sched_.chunks.at(size_t(r.a));
      auto it = std::find_if(per_trainer.begin(), per_trainer.end(), [&](const auto& x) { return x.first == r.from; });
      if (it == per_trainer.end() || r.b < 0 || r.b >= int32_t(it->second.size()) || uint64_t(r.z) != version_ ||
          (m_.opt.delta ? r.y < kDeltaHeaderBytes || r.y > delta_record_capacity(it->second[size_t(r.b)].bytes)
                        : it->second[size_t(r.b)].bytes != r.y))
        throw Error("consumer: READY from rank " + std::to_string(r.from) + " for unit " + std::to_string(r.a) +
                    " chunk " + std::to_string(r.b) + " does not match this rank's schedule");
      auto off = arena_.alloc(r.y);
      if (!off) break;
      Transport::GetId id = m_.transport->get(r.from, size_t(r.x), size_t(*off), size_t(r.y));
      gets_.emplace(id, InFlight{r.a, r.b, r.from, *off, r.y, r.payload});
      transfer_.begin(now_s());
      ++st_.gets;
      readies_.pop_front();
      any = true;
    }
    return any;
  }

  bool complete() {
    bool any = false;
    for (auto it = gets_.begin(); it != gets_.end();) {
      if (m_.transport->test(it->first)) {
        transfer_.end(now_s());
        land(it->second);
        it = gets_.erase(it);
        any = true;
      } else {
        ++it;
      }
    }
    return any;
  }

  // Landing regions and layerwise buffers whose device work has finished, back to their pools.
  bool reclaim() {
    bool any = false;
    while (!landing_free_.empty() && m_.device->done(landing_free_.front().fence)) {
      arena_.release(landing_free_.front().offset, landing_free_.front().bytes);
      landing_free_.pop_front();
      any = true;
    }
    while (!buffer_free_.empty() && m_.device->done(buffer_free_.front().fence)) {
      meter_.sub(buffer_free_.front().buffer.size());
      cs_.layerwise_pool.give(std::move(buffer_free_.front().buffer));
      buffer_free_.pop_front();
      any = true;
    }
    return any;
  }

  // Test hooks after a chunk or a one-pass read landed: this rank dies, or straggles.
  void after_landing() {
    if (sync_index_ == m_.opt.fail_at_sync && m_.world.rank == m_.opt.fail_rank) {
      m_.transport->flush_sends();
      std::raise(SIGKILL);  // test hook: this rank dies mid-sync
    }
    if (m_.world.rank == m_.opt.slow_rank && m_.opt.slow_ms > 0)  // test hook: a straggler
      std::this_thread::sleep_for(std::chrono::milliseconds(m_.opt.slow_ms));
  }

  // --delta: the record brings the kept chunk to this version; its pieces are placed from there.
  uint8_t* apply_delta(const InFlight& f, const Chunk& ch, uint8_t* base) {
    PhaseTimer t(st_.process_s);
    bool fresh = false;
    KeptChunk& kept = cs_.kept.at({int32_t(e_), f.unit, int32_t(f.trainer), f.chunk}, ch.bytes, m_.device.get(), &fresh);
    DeltaRecord r;
    try {
      r = m_.device->delta_apply(DeltaApplyJob{base, f.bytes, kept.bytes.data(), ch.bytes, !fresh, kept.version});
    } catch (const Error& x) {
      throw Error("consumer rank " + std::to_string(m_.world.rank) + ", unit " + std::to_string(f.unit) + " chunk " +
                  std::to_string(f.chunk) + " from trainer rank " + std::to_string(f.trainer) + ": " + x.what());
    }
    kept.version = version_;
    st_.delta_full_bytes += ch.bytes;
    st_.delta_index_bytes += r.index_bytes;
    st_.delta_whole_chunks += r.whole;
    ++st_.delta_chunks;
    return kept.bytes.data();
  }

  // Test hook: one flipped bit must fail verification (the chunk's first byte, or the first FP8
  // piece's first code or scale).
  void corrupt_for_test(const Chunk& ch, uint8_t* base) {
    if (sync_index_ != m_.opt.corrupt_at_sync || m_.world.inference_rank != 0 || corrupted_) return;
    uint8_t* at = m_.opt.corrupt_in == SyncOptions::CorruptIn::kAny ? base : nullptr;
    for (const ChunkPiece& p : ch.pieces)
      if (!at && p.fp8)
        at = base + p.buf_offset + (m_.opt.corrupt_in == SyncOptions::CorruptIn::kFp8Scale ? fp8_scales_at(p) : 0);
    if (at) {
      flip_bit(at);
      corrupted_ = true;
    }
  }

  void flip_bit(uint8_t* at) {
    uint8_t b = 0;
    m_.device->to_host(&b, at, 1);
    b ^= 0x01;
    m_.device->from_host(at, &b, 1);
  }

  // A chunk in the landing region: its pieces copied to their place (the live weights, or their
  // group's layerwise buffer; FP8 codes and scales into the live FP8 weights), hashed where they
  // landed with --checksum, complete groups processed, DONE to the trainer.
  void land(const InFlight& f) {
    const auto& per_trainer = sched_.chunks[size_t(f.unit)];
    auto it = std::find_if(per_trainer.begin(), per_trainer.end(), [&](const auto& x) { return x.first == f.trainer; });
    const Chunk& ch = it->second[size_t(f.chunk)];
    uint8_t* base = cs_.landing.data() + f.offset;
    if (m_.opt.delta) base = apply_delta(f, ch, base);
    corrupt_for_test(ch, base);
    PhaseTimer t(st_.process_s);
    std::vector<CopyJob> jobs;
    std::vector<int32_t> completed;
    for (const ChunkPiece& p : ch.pieces) {
      int32_t ep = cs_.plan->entries[size_t(p.entry)].engine_param;
      int32_t g = cs_.group_of_param[size_t(ep)];
      const int32_t eb = int32_t(dtype_bytes(cs_.plan->params[size_t(ep)].dtype));
      const int64_t plan_bytes = p.copy.numel * eb;  // what the piece places, in the plan's dtype
      if (p.fp8) {  // codes and scales straight into the live FP8 weights, in place or layerwise
        const int32_t qi = cs_.quant_of_param[size_t(ep)];
        uint8_t* fp8 = cs_.fp8.data();
        jobs.push_back(CopyJob{base + p.buf_offset, fp8 + cs_.codes_offset[size_t(qi)], unpack_copy(p.copy), 1});
        jobs.push_back(CopyJob{base + p.buf_offset + fp8_scales_at(p), fp8 + cs_.scale_offset[size_t(qi)], p.scales, 4});
      } else {
        uint8_t* dst = cs_.param(ep);
        if (!in_place_)
          dst = m_.layerwise(g, buffers_, meter_).data() + (cs_.param_offset[size_t(ep)] - cs_.group_span.at(g).first);
        // --checksum: hashed inside this copy, at its HF element indices (p.copy's source side);
        // a job per piece then (FP8 on the wire is refused with checksums)
        jobs.push_back(CopyJob{base + p.buf_offset, dst, unpack_copy(p.copy), eb, m_.opt.checksum ? p.hf : -1, &p.copy});
      }
      packed_landed_ += plan_bytes;
      if ((group_left_[g] -= plan_bytes) == 0 && !in_place_) completed.push_back(g);
    }
    if (m_.opt.checksum) {  // the sums are read once the copy is done (check_sums), not waited for here
      sums_owed_.push_back(OwedSums{m_.device->copy_hashed(jobs), m_.device->fence(Lane::kMain), &ch.pieces, f.sums, f.trainer});
      check_sums(false);
    } else {
      m_.device->copy(jobs);
    }
    landing_free_.push_back(Pending{m_.device->fence(Lane::kMain), f.offset, f.bytes, {}});
    for (int32_t g : completed) complete_group(g);
    // The bytes are in our receive buffer: the trainer may reuse its region now.
    CtrlMsg done{kMsgDone, -1, f.unit, f.chunk, m_.world.local_rank, 0, 0, 0, {}};
    m_.transport->send(f.trainer, done);
    ++st_.messages;
    st_.bytes_in += f.bytes;
    --chunks_left_;
    after_landing();
  }

  // --checksum: the landed chunks' sums against their trainers', for every chunk whose hashed
  // copy is done (all of them with `wait`).
  void check_sums(bool wait) {
    while (!sums_owed_.empty() && (wait || m_.device->done(sums_owed_.front().copied))) {
      const OwedSums o = std::move(sums_owed_.front());
      sums_owed_.pop_front();
      PhaseTimer th(st_.hash_s);
      m_.compare_sums(*o.pieces, m_.device->sums(o.ticket), o.sent, o.trainer, st_);
    }
  }

  // --layerwise: a group whose pieces have all landed in its buffer is processed (identity for
  // bf16 weights; an FP8 target's quantize) and copied into the live weights, on the row's lane.
  void complete_group(int32_t g) {
    if (!buffers_.count(g)) return;  // every piece of the group was FP8, placed as it landed
    DeviceBuffer buf = std::move(buffers_.at(g));
    buffers_.erase(g);
    const auto& span = cs_.group_span.at(g);
    const bool background = spec_.background_process;
    Lane lane = background ? Lane::kBackground : Lane::kMain;
    if (background) m_.device->after(Lane::kBackground, m_.device->fence(Lane::kMain));
    m_.device->memcpy(cs_.live.data() + span.first, buf.data(), buf.size(), lane);
    m_.quantize_group(g, buf.data(), span.first, lane, st_);  // an FP8 target's process step
    // The buffer stays staged until that copy completed (reclaim), not merely queued.
    buffer_free_.push_back(Pending{m_.device->fence(lane), 0, 0, std::move(buf)});
  }

  // Every chunk and read is in: the bytes the plan promised, the process step of an FP8 target
  // in place, the pools back, the copies in the node, the test hooks, one-pass checksums, stats.
  void finish(const OnePassReads& direct) {
    check_complete(direct);
    m_.stall_for_test(SyncOptions::StallIn::kProcess, sync_index_);
    if (in_place_ && !cs_.quant.empty() && !cs_.fp8_arrived) {  // an FP8 target: quantize every group now
      m_.quantize_group(-1, cs_.live.data(), 0, Lane::kMain, st_);
      PhaseTimer t(st_.quantize_s);
      m_.device->synchronize();
    }
    check_sums(true);  // before synchronize() recycles the fences
    m_.device->synchronize();  // every fence has passed (and fences are recycled): release all
    for (auto& p : landing_free_) arena_.release(p.offset, p.bytes);
    for (auto& p : buffer_free_) cs_.layerwise_pool.give(std::move(p.buffer));
    landing_free_.clear();
    buffer_free_.clear();
    m_.transport->flush_sends();
    st_.network_bytes = packed_landed_ + direct.bytes();
    std::set<int32_t> lost;  // entries whose shared bytes a dead puller never made ready
    if (m_.opt.dedupe_node) m_.share_in_node(sched_, sync_index_, st_, &lost);
    if (sync_index_ == m_.opt.corrupt_at_sync && m_.world.inference_rank == 0 && !corrupted_ && direct.first_dst())
      flip_bit(direct.first_dst());  // test hook, every piece read in one pass: one flipped bit must fail verification
    m_.check_direct_sums(sched_, direct, version_, st_);
    stretch_sync_for_test(e_, t0_);
    st_.total_s = now_s() - t0_;
    st_.transfer_s += transfer_.total();  // with the copies in the node
    st_.peak_staging_bytes = meter_.peak();
    st_.delta_kept_bytes = cs_.kept.bytes();
    m_.stall_for_test(SyncOptions::StallIn::kVerify, sync_index_);
    if (m_.opt.verify) m_.verify(version_, st_, lost);
  }

  void check_complete(const OnePassReads& direct) const {
    if (in_place_) {
      int64_t expected = 0;
      for (const auto& [g, bytes] : cs_.group_copy_bytes) expected += bytes;
      expected -= sched_.shared_bytes;
      if (packed_landed_ + direct.bytes() != expected)
        throw Error("consumer: " + std::to_string(packed_landed_ + direct.bytes()) + " bytes written of the plan's " +
                    std::to_string(expected) + " at the end of the sync");
    } else {
      for (const auto& [g, left] : group_left_)
        if (left != 0) throw Error("consumer: weight group " + std::to_string(g) + " incomplete at the end of the sync");
    }
  }

  Engines::Impl& m_;
  ConsumerSide& cs_;
  const EngineKind e_;
  const int sync_index_;
  const uint64_t version_;
  const ConsumerSchedule& sched_;
  const EngineSpec& spec_;
  const bool in_place_;
  RankStats st_;
  double t0_ = 0;
  std::deque<CtrlMsg> readies_;
  StagingMeter meter_;
  RangeAllocator arena_;
  std::map<int32_t, DeviceBuffer> buffers_;  // --layerwise: each group's buffer while it fills
  struct OwedSums {  // --checksum: a landed chunk's hashed copy and the trainer's sums
    HashTicket ticket;
    Fence copied;
    const std::vector<ChunkPiece>* pieces;
    std::vector<uint8_t> sent;
    int trainer;
  };
  std::deque<OwedSums> sums_owed_;
  std::map<int32_t, int64_t> group_left_;    // bytes each group still waits for
  std::map<Transport::GetId, InFlight> gets_;
  std::deque<Pending> landing_free_, buffer_free_;
  int64_t chunks_left_ = 0;
  int64_t packed_landed_ = 0;
  bool corrupted_ = false;
  BusyTime transfer_;  // wall time with a read in flight, packed or one pass
};

RankStats Engines::Impl::run_consumer(EngineKind e, int sync_index, uint64_t version) {
  return Consumer(*this, e, sync_index, version).run();
}

void Engines::Impl::stall_for_test(SyncOptions::StallIn where, int sync_index) {
  if (sync_index != opt.stall_at_sync || world.rank != opt.stall_rank || opt.stall_in != where) return;
  waiting(where == SyncOptions::StallIn::kVerify ? "stalled before verification (--stall-at)" : "stalled in the process step (--stall-at)");
  // A rank busy in a long step: its own watchdog counts the stall as progress, so that what a
  // test sees is the peers' view of it (their watchdogs, their liveness), never a race with
  // this rank's own watchdog ending it first.
  for (const double until = now_s() + opt.stall_s; now_s() < until;) {
    beat();
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.1, std::max(0.0, until - now_s()))));
  }
}

void Engines::Impl::share_in_node(const ConsumerSchedule& s, int sync_index, RankStats& st, std::set<int32_t>* lost) {
  st.host = host_of_rank.empty() ? -1 : host_of_rank[size_t(world.rank)];
  auto send_all = [&](const std::vector<int>& to, uint32_t type) {
    for (int r : to) {
      CtrlMsg m;
      m.type = type;
      m.a = sync_index;
      transport->send(r, m);
      ++st.messages;
    }
  };
  // A rank of the node that is lost (heartbeats stopped for the failure timeout, or its process
  // gone) has died (its replica, which is ours, goes down with it); a puller still pulling is
  // waited for while its heartbeats come. Ranks found dead are not waited on again.
  std::set<int> dead;
  // Waits until `want` holds every live rank of `from` for this sync (messages of either kind
  // kept as they come), or the rest are lost; returns those seen.
  auto await = [&](const std::vector<int>& from, std::set<std::pair<int, int>>& want, const char* phase) {
    std::set<int> seen;
    const double t0 = now_s();
    IdleBackoff backoff;
    for (;;) {
      int pending = -1;
      for (int p : from) {
        if (!dead.count(p) && want.erase({sync_index, p})) seen.insert(p);
        if (!dead.count(p) && !seen.count(p) && this->lost(p)) dead.insert(p);
        if (!dead.count(p) && !seen.count(p) && pending < 0) pending = p;
      }
      if (pending < 0) break;
      waiting(phase, pending);
      CtrlMsg m;
      if (transport->poll(&m)) {
        if (m.type == kMsgShareReady) consumer_side.share_ready.insert({m.a, m.from});
        else if (m.type == kMsgShareDone) consumer_side.share_done.insert({m.a, m.from});
        else throw Error("consumer: unexpected message " + std::to_string(m.type) + " while copying in the node");
        beat();
        continue;
      }
      transport->progress();
      check_broken();
      backoff.pause();
    }
    st.wait_s += now_s() - t0;
    return seen;
  };
  // This rank's live weights are complete: its sharers may read them. Sent before waiting on
  // its own pullers, so that no two ranks wait on each other. A sharer that died never takes
  // its message: the send is dropped once it is lost, so that no later flush waits.
  send_all(s.sharers, kMsgShareReady);
  if (!s.sharers.empty()) {
    waiting("telling this node's sharers the live weights are complete");
    for (int r : transport->flush_sends_unless(lost_fn())) {
      transport->forget_peer(r);
      dead.insert(r);
    }
  }
  if (!s.shares.empty()) {
    const std::set<int> ready = await(s.pullers, consumer_side.share_ready, "waiting for this node's pullers (SHARE_READY)");
    for (int p : s.pullers)
      if (!ready.count(p)) dead.insert(p);
    // The copies: one read a contiguous run, from the puller's live weights into ours (the same
    // offsets of the same parameter), a bounded number in flight.
    const double t1 = now_s();
    const std::vector<int64_t>& mine = consumer_side.param_offset;
    std::deque<std::array<int64_t, 4>> queue;  // peer, remote offset, local offset, bytes
    for (const Share& sh : s.shares) {
      const int peer = world_rank_of_local(sh.from);
      const int32_t ep = consumer_side.plan->entries[size_t(sh.entry)].engine_param;
      if (!ready.count(peer)) {  // its pieces are lost, not wrong
        st.node_lost_bytes += sh.bytes;
        lost->insert(sh.entry);
        continue;
      }
      const int32_t from_ep = plans.at(size_t(sh.from)).entries[size_t(sh.from_entry)].engine_param;
      const int64_t src = live_base() + param_offsets(sh.from)[size_t(from_ep)], dst = live_base() + mine[size_t(ep)];
      for (const auto& [off, bytes] : sh.runs) queue.push_back({peer, src + off, dst + off, bytes});
      st.node_bytes += sh.bytes;
    }
    std::vector<Transport::GetId> in_flight;
    constexpr size_t kMaxInFlight = 64;
    while (!queue.empty() || !in_flight.empty()) {
      while (!queue.empty() && in_flight.size() < kMaxInFlight) {
        const auto& g = queue.front();
        in_flight.push_back(transport->get(int(g[0]), size_t(g[1]), size_t(g[2]), size_t(g[3])));
        ++st.gets;
        queue.pop_front();
      }
      transport->progress();
      std::erase_if(in_flight, [&](Transport::GetId id) { return transport->test(id); });
      if (now_s() - t1 > std::max(60.0, 10 * opt.failure_timeout_s))  // a puller gone after its SHARE_READY: an error, not a hang
        throw Error("consumer rank " + std::to_string(world.rank) + ": copies from its node's pullers did not complete in " +
                    fmt_fixed(now_s() - t1, 1) + " s");
    }
    st.transfer_s += now_s() - t1;
    // Our pullers may leave the sync: a transport whose reads need the target's progress (UCX
    // emulating gets with active messages, MPI RMA without a progress thread) is served by
    // pullers that keep progressing until their sharers are done.
    send_all(std::vector<int>(ready.begin(), ready.end()), kMsgShareDone);
  }
  if (!s.sharers.empty()) await(s.sharers, consumer_side.share_done, "waiting for this node's sharers (SHARE_DONE)");
  beat();
}

DeviceBuffer& Engines::Impl::layerwise(int32_t group, std::map<int32_t, DeviceBuffer>& buffers, StagingMeter& meter) {
  auto it = buffers.find(group);
  if (it != buffers.end()) return it->second;
  int64_t bytes = consumer_side.group_span.at(group).second;
  DeviceBuffer& buf = buffers[group];
  buf = consumer_side.layerwise_pool.take(bytes);
  meter.add(bytes);
  // Padding rows of this group's parameters: the loaders' zero_() entries.
  int64_t base = consumer_side.group_span.at(group).first;
  std::vector<SynthJob> fills;
  for (const PlanEntry& e : consumer_side.plan->entries)
    if (e.is_fill() && consumer_side.group_of_param[size_t(e.engine_param)] == group)
      fills.push_back(SynthJob{buf.data() + (consumer_side.param_offset[size_t(e.engine_param)] - base), 0, e.copy,
                               int32_t(dtype_bytes(consumer_side.plan->params[size_t(e.engine_param)].dtype)), true});
  device->synth(fills);
  return buf;
}

void Engines::Impl::verify(uint64_t version, RankStats& st, const std::set<int32_t>& skip_entries) {
  if (opt.weights != WeightsFrom::kSynthetic) return;  // the caller's values: no expected values here
  PhaseTimer t(st.verify_s);
  std::vector<SynthJob> jobs;
  std::vector<int32_t> job_param;
  for (int32_t i = 0; i < int32_t(consumer_side.plan->entries.size()); ++i) {
    const PlanEntry& e = consumer_side.plan->entries[size_t(i)];
    if (skip_entries.count(i)) continue;  // bytes lost to a dead puller (node_lost_bytes)
    const EngineParam& ep = consumer_side.plan->params[size_t(e.engine_param)];
    // FP8 on the wire writes no bf16 image of a quantized parameter: verify_fp8 checks it.
    if (consumer_side.fp8_arrived && consumer_side.quant_of_param[size_t(e.engine_param)] >= 0) continue;
    job_param.push_back(e.engine_param);
    jobs.push_back(SynthJob{consumer_side.live.data() + consumer_side.param_offset[size_t(e.engine_param)],
                            e.is_fill() ? SynthKey(0) : weight_key(model, e.hf_param, version, opt.updates), e.copy,
                            int32_t(dtype_bytes(ep.dtype)),
                            e.is_fill()});
  }
  device->synchronize();
  VerifyResult r = device->verify(jobs);
  st.mismatches = r.mismatches;
  if (r.mismatches > 0) {
    st.bad_param = job_param[size_t(r.first_job)];
    st.bad_index = r.first_index;
  }
  verify_fp8(version, st);  // an FP8 target's codes and scales
}

}  // namespace shardsync
