// The trainer side of the sharded engines: gather a unit, pack each consumer's pulls into
// chunks of the registered send buffer, tell the consumers (READY), and release the unit
// once every live consumer has pulled its last chunk (DONE). V3 keeps up to `inflight`
// units gathered, so the next gather overlaps the current pulls, and packs chunk k+1
// while chunk k is being read. Chunks of different local ranks are packed together, a
// round at a time.
#include <algorithm>
#include <cstdint>
#include <set>

#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

namespace {

struct PackedChunk {
  int64_t offset = 0, bytes = 0;
  std::set<int> waiting;  // consumers that have not sent DONE
  Fence packed = 0;       // the pack kernel's fence; READY goes out once it has passed
  bool ready = false;
  bool released = false;
};

struct LocalRankWork {
  std::vector<Chunk> chunks;
  bool have_request = false;
  size_t next = 0;                 // next chunk to pack
  std::vector<PackedChunk> packed;
  std::set<int> requested;         // consumers (world ranks) that asked (V1) or all (cached)
  std::vector<std::set<int>> sent; // per chunk: consumers told READY
};

struct UnitWork {
  int32_t unit = 0;
  std::unique_ptr<UnitGather> gather;
  bool gathered = false;
  std::vector<LocalRankWork> locals;
  int64_t outstanding = 0;  // DONEs still expected
  int64_t staged = 0;       // staging bytes counted for this unit
};

// When each consumer was last heard from, and how many chunks it still owes a DONE for.
struct Liveness {
  std::map<int, double> last_heard;
  std::map<int, int> owed;
};

}  // namespace

RankStats Engines::Impl::run_producer(EngineKind e, int sync_index, uint64_t version) {
  RankStats st;
  st.rank = world.rank;
  st.trainer = 1;
  const double t0 = now_s();
  const ProducerSchedule& sched = producer_schedule(e);
  const SourcePolicy policy = source_policy(e);
  const EngineSpec& spec = engine_spec(e);
  const bool per_sync_requests = !spec.cache_requests;
  const int inflight = spec.depth > 0 ? spec.depth : std::max(1, opt.inflight);
  const int num_units = int(sched.units.size());
  const int num_locals = int(plans.size());
  auto& cache = request_cache[int(e)];
  if (cache.empty() || per_sync_requests)
    cache.assign(size_t(num_units), std::vector<std::optional<std::vector<ChunkPiece>>>(size_t(num_locals)));
  std::vector<std::vector<std::set<int>>> early_requests(static_cast<size_t>(num_units),
                                                         std::vector<std::set<int>>(static_cast<size_t>(num_locals)));

  StagingMeter meter;
  meter.add(send_buffer.size());
  RangeAllocator arena(send_buffer.size());
  GatherContext gctx = gather_context();
  std::map<int32_t, std::unique_ptr<UnitWork>> active;
  int next_gather = 0, released = 0;
  IdleBackoff backoff;
  Liveness peers;
  auto release_chunk = [&](UnitWork& w, PackedChunk& pc) {
    if (!pc.released && pc.waiting.empty()) {
      arena.release(pc.offset, pc.bytes);
      pc.released = true;
    }
    (void)w;
  };
  // A consumer silent past the failure timeout while it owes DONEs is dead: stop waiting for
  // it everywhere (its replica goes down at the sync boundary).
  auto drop_consumer = [&](int c) {
    declare_dead(c);
    ++st.peers_lost;
    peers.owed.erase(c);
    for (auto& [u, w] : active)
      for (LocalRankWork& lw : w->locals)
        for (PackedChunk& pc : lw.packed)
          if (pc.waiting.erase(c)) {
            --w->outstanding;
            release_chunk(*w, pc);
          }
  };

  auto consumers_with_request = [&](int32_t u, int l) {
    std::set<int> c;
    if (!per_sync_requests && cache[size_t(u)][size_t(l)]) {
      for (int r : consumers_of_local(l)) c.insert(r);
    } else {
      c = early_requests[size_t(u)][size_t(l)];
    }
    return c;
  };

  auto build_local = [&](UnitWork& w, int l) {
    LocalRankWork& lw = w.locals[size_t(l)];
    if (lw.have_request || !cache[size_t(w.unit)][size_t(l)]) return;
    const std::vector<ChunkPiece>& pulls = *cache[size_t(w.unit)][size_t(l)];
    if (pulls.size() != sched.expected[size_t(w.unit)][size_t(l)].size())
      throw Error("producer: request of local rank " + std::to_string(l) + " for unit " + std::to_string(w.unit) +
                  " does not match the routes of trainer rank " + std::to_string(world.rank));
    lw.chunks = make_chunks(model, pulls, chunk_bytes);
    lw.packed.resize(lw.chunks.size());
    lw.sent.resize(lw.chunks.size());
    lw.have_request = true;
  };

  auto handle = [&](const CtrlMsg& m) {
    if (m.from >= 0) peers.last_heard[m.from] = now_s();
    if (m.type == kMsgRequest) {
      if (m.a < 0 || m.a >= num_units || m.b < 0 || m.b >= num_locals) throw Error("producer: bad REQUEST");
      auto& slot = cache[size_t(m.a)][size_t(m.b)];
      if (!slot) slot = decode_pulls(m.payload, int32_t(model.params().size()));
      early_requests[size_t(m.a)][size_t(m.b)].insert(m.from);
      auto it = active.find(m.a);
      if (it != active.end()) build_local(*it->second, m.b);
    } else if (m.type == kMsgDone) {
      auto it = active.find(m.a);
      if (dead[size_t(m.from)]) return;  // declared dead already: too late
      if (it == active.end()) throw Error("producer: DONE for a unit that is not active");
      UnitWork& w = *it->second;
      PackedChunk& pc = w.locals.at(size_t(m.c)).packed.at(size_t(m.b));
      if (pc.waiting.erase(m.from)) {
        --w.outstanding;
        --peers.owed[m.from];
        release_chunk(w, pc);
      }
    } else if (m.type == kMsgReport && world.rank == 0) {
      early_reports.push_back(m);  // a consumer finished before this rank did
    } else if (m.type == kMsgJoin && world.rank == 0) {
      absorb_join(CtrlMsg(m));  // taken (or not) at the next sync boundary
    } else {
      throw Error("producer: unexpected message type " + std::to_string(m.type) + " from rank " + std::to_string(m.from));
    }
  };

  auto start_unit = [&](int32_t u) {
    auto w = std::make_unique<UnitWork>();
    w->unit = u;
    {
      PhaseTimer t(st.gather_s);
      w->gather = std::make_unique<UnitGather>(gctx, sched.units[size_t(u)], policy);
    }
    w->staged = w->gather->staging_bytes();
    meter.add(w->staged);
    w->locals.resize(size_t(num_locals));
    for (int l = 0; l < num_locals; ++l)
      if (!sched.expected[size_t(u)][size_t(l)].empty()) build_local(*w, l);
    active.emplace(u, std::move(w));
  };

  auto send_ready = [&](const UnitWork& w, int l, size_t j, int consumer) {
    const LocalRankWork& lw = w.locals[size_t(l)];
    CtrlMsg r{kMsgReady, -1, w.unit, int32_t(j), l, lw.packed[j].offset, lw.chunks[j].bytes, int64_t(version), {}};
    try {
      transport->send(consumer, r);
    } catch (const PeerFailure&) {
      // detected on the next poll or by the timeout
    }
    ++st.messages;
  };

  // Packs what the send buffer has room for, and sends READY for chunks whose pack has
  // finished; returns true if anything happened. Packs go in rounds of one chunk per local
  // rank, one launch a round: the local ranks of a replica take the same units in the same
  // order, so a round's chunks (the same index of each) are mostly different columns of the
  // same rows (a TP-sharded expert), which the CPU copy then reads once
  // (execute_copies_fast).
  auto pack_some = [&](UnitWork& w) {
    bool did = false;
    for (int l = 0; l < num_locals; ++l) {
      LocalRankWork& lw = w.locals[size_t(l)];
      if (!lw.have_request) continue;
      std::set<int> want = consumers_with_request(w.unit, l);
      for (size_t j = 0; j < lw.next; ++j) {
        PackedChunk& pc = lw.packed[j];
        if (!pc.ready) {
          if (!device->done(pc.packed)) continue;
          pc.ready = true;
        }
        for (int c : want)
          if (!lw.sent[j].count(c)) {
            send_ready(w, l, j, c);
            lw.sent[j].insert(c);
            did = true;
          }
      }
    }
    std::vector<CopyJob> jobs;
    std::vector<int> round;  // local ranks whose next chunk is in `jobs`
    for (;;) {
      jobs.clear();
      round.clear();
      // The local ranks furthest behind, so that a round holds the same chunk index of every
      // rank (columns of the same rows) again after a request that came late (V1).
      size_t behind = SIZE_MAX;
      for (const LocalRankWork& lw : w.locals)
        if (lw.have_request && lw.next < lw.chunks.size()) behind = std::min(behind, lw.next);
      for (int l = 0; l < num_locals; ++l) {
        const LocalRankWork& lw = w.locals[size_t(l)];
        if (lw.have_request && lw.next < lw.chunks.size() && lw.next == behind) round.push_back(l);
      }
      if (round.empty()) break;
      // A round goes whole or waits for send-buffer space; only an idle send buffer too
      // small for a whole round packs part of one (and the rest catches up next).
      const bool idle = arena.idle();
      size_t fit = 0;
      for (; fit < round.size(); ++fit) {
        LocalRankWork& lw = w.locals[size_t(round[fit])];
        auto off = arena.alloc(lw.chunks[lw.next].bytes);
        if (!off) break;
        lw.packed[lw.next].offset = *off;
      }
      if (fit < round.size() && !idle) {
        for (size_t k = 0; k < fit; ++k) {
          const LocalRankWork& lw = w.locals[size_t(round[k])];
          arena.release(lw.packed[lw.next].offset, lw.chunks[lw.next].bytes);
        }
        break;
      }
      round.resize(fit);
      if (round.empty()) break;
      {
        PhaseTimer t(st.pack_s);
        for (int l : round) {
          const LocalRankWork& lw = w.locals[size_t(l)];
          const int64_t off = lw.packed[lw.next].offset;
          for (const ChunkPiece& p : lw.chunks[lw.next].pieces) {
            const SlabRef* s = w.gather->slab(p.hf);
            if (!s) throw Error("producer: rank " + std::to_string(world.rank) + " has no slab of " + model.param(p.hf).name);
            CopyDesc d = pack_copy(p.copy);
            d.src_offset = p.copy.src_offset - s->lo;
            jobs.push_back(CopyJob{s->data, send_buffer.data() + off + p.buf_offset, d,
                                   int32_t(dtype_bytes(model.param(p.hf).dtype))});
          }
        }
        const int64_t together = device->copies_together();
        device->copy(jobs);  // the CPU's main lane is synchronous: its count is current here
        st.pack_copies_together += device->copies_together() - together;
      }
      ++st.pack_launches;
      st.pack_copies += int64_t(jobs.size());
      st.chunks_packed += int64_t(round.size());
      const Fence packed = device->fence(Lane::kMain);
      for (int l : round) {
        LocalRankWork& lw = w.locals[size_t(l)];
        const Chunk& ch = lw.chunks[lw.next];
        std::vector<int> consumers = consumers_of_local(l);
        PackedChunk& pc = lw.packed[lw.next];
        pc = PackedChunk{pc.offset, ch.bytes, std::set<int>(consumers.begin(), consumers.end()), packed, false, false};
        for (int c : consumers) {
          if (!peers.owed[c]++ && !peers.last_heard.count(c)) peers.last_heard[c] = now_s();
        }
        w.outstanding += int64_t(consumers.size());
        st.bytes_out += ch.bytes * int64_t(consumers.size());
        if (consumers.empty()) release_chunk(w, pc);
        ++lw.next;
      }
      did = true;
    }
    return did;
  };

  auto fully_packed = [&](UnitWork& w) {
    if (!w.gathered) return false;
    for (int l = 0; l < num_locals; ++l) {
      const LocalRankWork& lw = w.locals[size_t(l)];
      if (consumers_of_local(l).empty()) continue;
      if (!sched.expected[size_t(w.unit)][size_t(l)].empty() && !lw.have_request) return false;
      if (lw.next < lw.chunks.size()) return false;
      for (const PackedChunk& pc : lw.packed)
        if (!pc.ready && !pc.waiting.empty()) return false;
    }
    return true;
  };

  auto unit_finished = [&](UnitWork& w) {
    if (!w.gathered) return false;
    for (int l = 0; l < num_locals; ++l) {
      const LocalRankWork& lw = w.locals[size_t(l)];
      bool any_live = !consumers_of_local(l).empty();
      if (!any_live) continue;  // every replica of this local rank is down: nothing to serve
      if (!lw.chunks.empty() && (!lw.have_request || lw.next < lw.chunks.size())) return false;
      if (!sched.expected[size_t(w.unit)][size_t(l)].empty() && !lw.have_request) return false;
      for (const PackedChunk& pc : lw.packed)
        if (!pc.ready && !pc.waiting.empty()) return false;
    }
    return w.outstanding == 0;
  };

  double next_check = now_s() + 0.1;
  while (released < num_units) {
    bool progressed = false;
    CtrlMsg m;
    try {
      while (transport->poll(&m)) {
        handle(m);
        progressed = true;
      }
    } catch (const PeerFailure& failure) {
      drop_consumer(failure.peer());
      progressed = true;
    }
    if (now_s() > next_check) {
      next_check = now_s() + 0.1;
      std::vector<int> silent;
      for (auto& [c, owed] : peers.owed)
        if (owed > 0 && now_s() - peers.last_heard[c] > opt.failure_timeout_s) silent.push_back(c);
      for (int c : silent) drop_consumer(c);
    }
    transport->progress();
    // `inflight` bounds the units whose gathered tensors are held; a unit drops them once
    // every chunk is packed, and waits for its consumers' DONEs on send-buffer space only,
    // so a straggler holds other replicas back only when the send buffer is full.
    int holding = 0;
    for (const auto& [u, w] : active) holding += w->gather != nullptr;
    while (next_gather < num_units && holding < inflight) {
      start_unit(next_gather++);
      ++holding;
    }
    for (auto it = active.begin(); it != active.end();) {
      UnitWork& w = *it->second;
      if (!w.gathered) {
        PhaseTimer t(st.gather_s);
        w.gathered = w.gather->test();
        if (w.gathered) {  // the collective's send/receive buffers are gone; slabs remain
          meter.sub(w.staged - w.gather->staging_bytes());
          w.staged = w.gather->staging_bytes();
          progressed = true;
        }
      }
      if (w.gathered) progressed |= pack_some(w);
      if (w.gather && fully_packed(w)) {  // the gathered tensors are no longer needed
        meter.sub(w.staged);
        w.staged = 0;
        w.gather.reset();
        progressed = true;
      }
      if (unit_finished(w)) {
        meter.sub(w.staged);
        it = active.erase(it);
        ++released;
        progressed = true;
      } else {
        ++it;
      }
    }
    // Non-blocking collectives progress only inside MPI calls: keep testing while one is in
    // flight (yield, no sleep).
    bool gathering = false;
    for (const auto& [u, w] : active) gathering = gathering || !w->gathered;
    if (progressed) beat();
    if (progressed || gathering) backoff.progress();
    if (!progressed) backoff.pause();
  }
  // A consumer that died after its last DONE may still hold undelivered messages.
  for (int c : transport->flush_sends_within(opt.failure_timeout_s))
    if (c >= world.num_trainers && !dead[size_t(c)]) {
      declare_dead(c);
      ++st.peers_lost;
    }
  device->synchronize();
  st.total_s = now_s() - t0;
  st.peak_staging_bytes = meter.peak();
  (void)sync_index;
  return st;
}

}  // namespace shardsync
