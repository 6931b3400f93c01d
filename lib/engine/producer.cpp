// The trainer side of the sharded engines: gather a unit, pack each consumer's pulls into
// chunks of the registered send buffer, tell the consumers (READY), and release the unit
// once every live consumer has pulled its last chunk (DONE). Pieces consumers read in one
// pass from the weights themselves need nothing from the trainer but to keep its weights
// unchanged until each such consumer says READ_DONE. V3 keeps up to `inflight`
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
  int64_t offset = 0, bytes = 0;  // bytes: what consumers pull (--delta: the record)
  int64_t held = 0;               // of the send buffer (--delta: the record's capacity)
  std::set<int> waiting;  // consumers that have not sent DONE
  Fence packed = 0;       // the pack kernel's fence; READY goes out once it has passed
  bool ready = false;
  bool released = false;
  std::vector<uint8_t> hashes;  // --checksum: its pieces' sums where they lie (READY's payload)
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

// One sync of a sharded engine on a trainer rank, in named steps: receive() takes requests
// and DONEs, drop_lost() declares lost consumers dead, start_gathers() keeps the engine's depth
// of units in flight, advance() moves each unit through gather -> pack rounds -> READY ->
// release.
class Producer {
 public:
  Producer(Engines::Impl& m, EngineKind e, uint64_t version)
      : m_(m), spec_(engine_spec(e)), sched_(m.producer_schedule(e)), version_(version),
        per_sync_requests_(!spec_.cache_requests),
        inflight_(spec_.depth > 0 ? spec_.depth : std::max(1, m.opt.inflight)),
        num_units_(int(sched_.units.size())), num_locals_(int(m.plans.size())), cache_(m.trainer_side.request_cache[int(e)]),
        early_requests_(size_t(num_units_), std::vector<std::set<int>>(size_t(num_locals_))),
        arena_(m.trainer_side.send_buffer.size()), gctx_(m.gather_context()) {
    st_.rank = m.world.rank;
    st_.trainer = 1;
    if (m.opt.delta) {
      // An anchor (every chunk whole): the engine's first sync, every anchor_every-th after its
      // last anchor, and any sync a replacement joined at (it holds nothing; its replica's
      // other ranks missed versions while it was down). Every trainer decides alike.
      auto last = m.trainer_side.last_anchor.find(int(e));
      anchor_ = last == m.trainer_side.last_anchor.end() || version - last->second >= uint64_t(m.opt.anchor_every) ||
                m.rejoin.taken_now;
      if (anchor_) m.trainer_side.last_anchor[int(e)] = version;
      m.trainer_side.kept.keep_only(int32_t(e));
    }
    if (cache_.empty() || per_sync_requests_)
      cache_.assign(size_t(num_units_), std::vector<std::optional<std::vector<ChunkPiece>>>(size_t(num_locals_)));
    meter_.add(m.trainer_side.send_buffer.size());
    for (int l = 0; l < num_locals_; ++l)
      if (sched_.direct_bytes[size_t(l)] > 0)
        for (int c : m.consumers_of_local(l)) {
          direct_waiting_[c] = sched_.direct_bytes[size_t(l)];
          ++owed_[c];
        }
    if (m.opt.checksum) send_direct_sums();
  }

  RankStats run() {
    const double t0 = now_s();
    double next_check = now_s() + 0.1;
    while (released_ < num_units_ || !direct_waiting_.empty()) {
      bool progressed = receive();
      if (now_s() > next_check) {
        next_check = now_s() + 0.1;
        drop_lost();
        m_.check_broken();
      }
      m_.transport->progress();
      start_gathers();
      progressed |= advance();
      pace(progressed);
    }
    // A consumer that died after its last DONE may still hold undelivered messages.
    m_.waiting("delivering this sync's last messages");
    for (int c : m_.transport->flush_sends_unless(m_.lost_fn()))
      if (c >= m_.world.num_trainers && !m_.liveness.dead[size_t(c)]) {
        m_.declare_dead(c);
        ++st_.peers_lost;
      }
    m_.device->synchronize();
    stretch_sync_for_test(spec_.kind, t0);
    st_.total_s = now_s() - t0;
    st_.peak_staging_bytes = meter_.peak();
    st_.delta_kept_bytes = m_.trainer_side.kept.bytes();
    return st_;
  }

 private:
  // ---- messages --------------------------------------------------------------------------

  // --checksum: the sums of the pieces each local rank reads in one pass from this trainer's
  // weights, hashed where they lie, to every consumer of that local rank.
  void send_direct_sums() {
    PhaseTimer t(st_.hash_s);
    for (int l = 0; l < num_locals_; ++l) {
      if (sched_.direct_bytes[size_t(l)] == 0) continue;
      std::vector<HashJob> jobs;
      for (const ChunkPiece& p : sched_.direct[size_t(l)])
        jobs.push_back(piece_hash_at_trainer(p, m_.trainer_side.source->data(p.hf), p.slab_lo,
                                             int32_t(dtype_bytes(m_.model.param(p.hf).dtype))));
      CtrlMsg h;
      h.type = kMsgHashes;
      h.z = int64_t(version_);
      for (uint64_t v : m_.device->checksum(jobs)) append_u64(h.payload, v);
      st_.checksum_pieces += int64_t(jobs.size());
      for (int c : m_.consumers_of_local(l)) {
        if (m_.liveness.dead[size_t(c)] || m_.liveness.down[size_t(c)]) continue;
        try {
          m_.transport->send(c, h);
        } catch (const PeerFailure&) {
          // detected on the next poll or by its heartbeats
        }
        ++st_.messages;
      }
    }
  }

  bool receive() {
    bool any = false;
    CtrlMsg msg;
    try {
      while (m_.transport->poll(&msg)) {
        handle(msg);
        any = true;
      }
    } catch (const PeerFailure& failure) {
      drop_consumer(failure.peer());
      any = true;
    }
    return any;
  }

  void handle(const CtrlMsg& msg) {
    if (msg.type == kMsgRequest) {
      take_request(msg);
    } else if (msg.type == kMsgDone) {
      take_done(msg);
    } else if (msg.type == kMsgReadDone) {
      auto it = direct_waiting_.find(msg.from);
      if (it != direct_waiting_.end() && !m_.liveness.dead[size_t(msg.from)]) {
        st_.bytes_out += it->second;
        --owed_[msg.from];
        direct_waiting_.erase(it);
      }
    } else if (msg.type == kMsgReport && m_.world.rank == 0) {
      m_.liveness.early_reports.push_back(msg);  // a consumer finished before this rank did
    } else if (msg.type == kMsgJoin && m_.world.rank == 0) {
      m_.absorb_join(CtrlMsg(msg));  // taken (or not) at the next sync boundary
    } else {
      throw Error("producer: unexpected message type " + std::to_string(msg.type) + " from rank " +
                  std::to_string(msg.from));
    }
  }

  void take_request(const CtrlMsg& msg) {
    if (msg.a < 0 || msg.a >= num_units_ || msg.b < 0 || msg.b >= num_locals_) throw Error("producer: bad REQUEST");
    auto& slot = cache_[size_t(msg.a)][size_t(msg.b)];
    if (!slot) slot = decode_pulls(msg.payload, int32_t(m_.model.params().size()));
    early_requests_[size_t(msg.a)][size_t(msg.b)].insert(msg.from);
    auto it = active_.find(msg.a);
    if (it != active_.end()) build_local(*it->second, msg.b);
  }

  void take_done(const CtrlMsg& msg) {
    if (m_.liveness.dead[size_t(msg.from)]) return;  // declared dead already: too late
    auto it = active_.find(msg.a);
    if (it == active_.end()) throw Error("producer: DONE for a unit that is not active");
    UnitWork& w = *it->second;
    PackedChunk& pc = w.locals.at(size_t(msg.c)).packed.at(size_t(msg.b));
    if (pc.waiting.erase(msg.from)) {
      --w.outstanding;
      --owed_[msg.from];
      release_chunk(pc);
    }
  }

  // ---- liveness --------------------------------------------------------------------------

  // A consumer that owes DONEs (or a READ_DONE) and is lost (its heartbeats stopped for the
  // failure timeout, or its process is gone) is dead; a slow one is waited for. The stall
  // watchdog names one that owes.
  void drop_lost() {
    std::vector<int> lost;
    int owing = -1;
    for (auto& [c, owed] : owed_) {
      if (owed > 0 && m_.lost(c)) lost.push_back(c);
      if (owed > 0 && owing < 0) owing = c;
    }
    for (int c : lost) drop_consumer(c);
    m_.waiting("serving a sync's pulls (DONE or READ_DONE owed)", owing);
  }

  // Stop waiting for a dead consumer everywhere (its replica goes down at the sync boundary).
  void drop_consumer(int c) {
    m_.declare_dead(c);
    ++st_.peers_lost;
    owed_.erase(c);
    direct_waiting_.erase(c);
    for (auto& [u, w] : active_)
      for (LocalRankWork& lw : w->locals)
        for (PackedChunk& pc : lw.packed)
          if (pc.waiting.erase(c)) {
            --w->outstanding;
            release_chunk(pc);
          }
  }

  // ---- units -----------------------------------------------------------------------------

  // `inflight` bounds the units whose gathered tensors are held; a unit drops them once
  // every chunk is packed, and waits for its consumers' DONEs on send-buffer space only,
  // so a straggler holds other replicas back only when the send buffer is full.
  void start_gathers() {
    int holding = 0;
    for (const auto& [u, w] : active_) holding += w->gather != nullptr;
    for (; next_gather_ < num_units_ && holding < inflight_; ++holding) start_unit(next_gather_++);
  }

  void start_unit(int32_t u) {
    auto w = std::make_unique<UnitWork>();
    w->unit = u;
    {
      PhaseTimer t(st_.gather_s);
      w->gather = std::make_unique<UnitGather>(gctx_, sched_.units[size_t(u)], spec_.source);
    }
    w->staged = w->gather->staging_bytes();
    meter_.add(w->staged);
    w->locals.resize(size_t(num_locals_));
    for (int l = 0; l < num_locals_; ++l)
      if (!sched_.expected[size_t(u)][size_t(l)].empty()) build_local(*w, l);
    active_.emplace(u, std::move(w));
  }

  void build_local(UnitWork& w, int l) {
    LocalRankWork& lw = w.locals[size_t(l)];
    if (lw.have_request || !cache_[size_t(w.unit)][size_t(l)]) return;
    const std::vector<ChunkPiece>& pulls = *cache_[size_t(w.unit)][size_t(l)];
    if (pulls.size() != sched_.expected[size_t(w.unit)][size_t(l)].size())
      throw Error("producer: request of local rank " + std::to_string(l) + " for unit " + std::to_string(w.unit) +
                  " does not match the routes of trainer rank " + std::to_string(m_.world.rank));
    lw.chunks = make_chunks(m_.model, pulls, m_.chunk_bytes, m_.fp8_sources(spec_.source, m_.world.rank));
    lw.packed.resize(lw.chunks.size());
    lw.sent.resize(lw.chunks.size());
    lw.have_request = true;
  }

  // Each active unit one step on: gather finished -> pack rounds and READYs -> gathered
  // tensors dropped once packed -> released once every live consumer has pulled.
  bool advance() {
    bool any = false;
    for (auto it = active_.begin(); it != active_.end();) {
      UnitWork& w = *it->second;
      if (!w.gathered) {
        PhaseTimer t(st_.gather_s);
        w.gathered = w.gather->test();
        if (w.gathered) {  // the collective's send/receive buffers are gone; slabs remain
          meter_.sub(w.staged - w.gather->staging_bytes());
          w.staged = w.gather->staging_bytes();
          any = true;
        }
      }
      if (w.gathered) {
        any |= send_readies(w);
        any |= pack_rounds(w);
      }
      if (w.gather && fully_packed(w)) {  // the gathered tensors are no longer needed
        meter_.sub(w.staged);
        w.staged = 0;
        w.gather.reset();
        any = true;
      }
      if (unit_finished(w)) {
        meter_.sub(w.staged);
        it = active_.erase(it);
        ++released_;
        any = true;
      } else {
        ++it;
      }
    }
    return any;
  }

  // Non-blocking collectives progress only inside MPI calls: while one is in flight keep
  // testing (yield, no sleep).
  void pace(bool progressed) {
    bool gathering = false;
    for (const auto& [u, w] : active_) gathering = gathering || !w->gathered;
    if (progressed) m_.beat();
    if (progressed || gathering) backoff_.progress();
    if (!progressed) backoff_.pause();
  }

  // ---- chunks ----------------------------------------------------------------------------

  std::set<int> consumers_with_request(int32_t u, int l) const {
    if (!per_sync_requests_ && cache_[size_t(u)][size_t(l)]) {
      std::vector<int> all = m_.consumers_of_local(l);
      return std::set<int>(all.begin(), all.end());
    }
    return early_requests_[size_t(u)][size_t(l)];
  }

  // READY for every packed chunk whose pack has finished, to each consumer that asked.
  bool send_readies(UnitWork& w) {
    bool any = false;
    for (int l = 0; l < num_locals_; ++l) {
      LocalRankWork& lw = w.locals[size_t(l)];
      if (!lw.have_request) continue;
      std::set<int> want = consumers_with_request(w.unit, l);
      for (size_t j = 0; j < lw.next; ++j) {
        PackedChunk& pc = lw.packed[j];
        if (!pc.ready) {
          if (!m_.device->done(pc.packed)) continue;
          pc.ready = true;
        }
        for (int c : want)
          if (!lw.sent[j].count(c)) {
            send_ready(w, l, j, c);
            lw.sent[j].insert(c);
            any = true;
          }
      }
    }
    return any;
  }

  void send_ready(const UnitWork& w, int l, size_t j, int consumer) {
    const LocalRankWork& lw = w.locals[size_t(l)];
    CtrlMsg r{kMsgReady, -1, w.unit, int32_t(j), l, lw.packed[j].offset, lw.packed[j].bytes, int64_t(version_),
              lw.packed[j].hashes};
    try {
      m_.transport->send(consumer, r);
    } catch (const PeerFailure&) {
      // detected on the next poll or by the timeout
    }
    ++st_.messages;
  }

  // Packs what the send buffer has room for, in rounds of one chunk per local rank, one
  // launch a round: the local ranks of a replica take the same units in the same order, so
  // a round's chunks (the same index of each) are mostly different columns of the same rows
  // (a TP-sharded expert), which the CPU copy then reads once (execute_copies_fast).
  bool pack_rounds(UnitWork& w) {
    bool any = false;
    std::vector<int> round;
    while (next_round(w, &round)) {
      pack_round(w, round);
      any = true;
    }
    return any;
  }

  // The local ranks furthest behind (so a round holds the same chunk index of every rank
  // again after a request that came late, V1), with send-buffer space for their chunks. A
  // round goes whole or waits for space; only an idle send buffer too small for a whole
  // round packs part of one (and the rest catches up next).
  bool next_round(UnitWork& w, std::vector<int>* round) {
    round->clear();
    size_t behind = SIZE_MAX;
    for (const LocalRankWork& lw : w.locals)
      if (lw.have_request && lw.next < lw.chunks.size()) behind = std::min(behind, lw.next);
    for (int l = 0; l < num_locals_; ++l) {
      const LocalRankWork& lw = w.locals[size_t(l)];
      if (lw.have_request && lw.next < lw.chunks.size() && lw.next == behind) round->push_back(l);
    }
    if (round->empty()) return false;
    const bool idle = arena_.idle();
    size_t fit = 0;
    for (; fit < round->size(); ++fit) {
      LocalRankWork& lw = w.locals[size_t((*round)[fit])];
      const int64_t held = held_bytes(lw.chunks[lw.next]);
      auto off = arena_.alloc(held);
      if (!off) break;
      lw.packed[lw.next].offset = *off;
      lw.packed[lw.next].held = held;
    }
    if (fit < round->size() && !idle) {
      for (size_t k = 0; k < fit; ++k) {
        const LocalRankWork& lw = w.locals[size_t((*round)[k])];
        arena_.release(lw.packed[lw.next].offset, lw.packed[lw.next].held);
      }
      return false;
    }
    round->resize(fit);
    return !round->empty();
  }

  void pack_round(UnitWork& w, const std::vector<int>& round) {
    std::vector<CopyJob> jobs;
    std::vector<QuantJob> quantized;  // FP8 on the wire: pieces quantized into the chunk
    {
      PhaseTimer t(st_.pack_s);
      for (int l : round) {
        const LocalRankWork& lw = w.locals[size_t(l)];
        // --delta: the chunk is packed where a whole record carries it, after the header.
        const int64_t off = lw.packed[lw.next].offset + (m_.opt.delta ? kDeltaHeaderBytes : 0);
        for (const ChunkPiece& p : lw.chunks[lw.next].pieces) {
          const SlabRef* s = w.gather->slab(p.hf);
          if (!s)
            throw Error("producer: rank " + std::to_string(m_.world.rank) + " has no slab of " + m_.model.param(p.hf).name);
          uint8_t* dst = m_.trainer_side.send_buffer.data() + off + p.buf_offset;
          if (p.fp8) {  // codes [rows, cols] in the piece's order, then its blocks' scales
            const int64_t rows = p.copy.dims[0].size, cols = p.copy.dims[1].size;
            quantized.push_back(QuantJob{s->data + 2 * (p.copy.src_offset - s->lo), p.copy.dims[0].src_stride, dst, cols,
                                         reinterpret_cast<float*>(dst + fp8_scales_at(p)),
                                         (cols + 127) / 128, rows, cols});
            continue;
          }
          CopyDesc d = pack_copy(p.copy);
          d.src_offset = p.copy.src_offset - s->lo;
          jobs.push_back(CopyJob{s->data, dst, d, int32_t(dtype_bytes(m_.model.param(p.hf).dtype))});
        }
      }
      const int64_t together = m_.device->copies_together();
      m_.device->copy(jobs);  // the CPU's main lane is synchronous: its count is current here
      st_.pack_copies_together += m_.device->copies_together() - together;
    }
    if (!quantized.empty()) {
      PhaseTimer t(st_.quantize_s);  // the launch (the work itself on a CPU)
      m_.device->quantize_fp8(quantized, Lane::kMain);
    }
    std::vector<std::vector<uint8_t>> hashes(round.size());
    if (m_.opt.checksum) {  // each piece hashed where it lies (the shard, or the gathered slab)
      PhaseTimer t(st_.hash_s);
      std::vector<HashJob> hj;
      std::vector<size_t> of_round;
      for (size_t i = 0; i < round.size(); ++i) {
        const LocalRankWork& lw = w.locals[size_t(round[i])];
        for (const ChunkPiece& p : lw.chunks[lw.next].pieces) {
          const SlabRef* sl = w.gather->slab(p.hf);
          hj.push_back(piece_hash_at_trainer(p, sl->data, sl->lo, int32_t(dtype_bytes(m_.model.param(p.hf).dtype))));
          of_round.push_back(i);
        }
      }
      const std::vector<uint64_t> sums = m_.device->checksum(hj);
      for (size_t k = 0; k < sums.size(); ++k) append_u64(hashes[of_round[k]], sums[k]);
      st_.checksum_pieces += int64_t(sums.size());
    }
    ++st_.pack_launches;
    st_.pack_copies += int64_t(jobs.size());
    st_.chunks_packed += int64_t(round.size());
    const Fence packed = m_.device->fence(Lane::kMain);
    const std::vector<DeltaRecord> records = m_.opt.delta ? encode_delta(w, round) : std::vector<DeltaRecord>{};
    for (size_t i = 0; i < round.size(); ++i) {
      const int l = round[i];
      LocalRankWork& lw = w.locals[size_t(l)];
      const Chunk& ch = lw.chunks[lw.next];
      std::vector<int> consumers = m_.consumers_of_local(l);
      PackedChunk& pc = lw.packed[lw.next];
      const int64_t bytes = m_.opt.delta ? records[i].bytes : ch.bytes;
      pc = PackedChunk{pc.offset, bytes, pc.held, std::set<int>(consumers.begin(), consumers.end()), packed, false, false,
                       std::move(hashes[i])};
      for (int c : consumers) ++owed_[c];
      w.outstanding += int64_t(consumers.size());
      st_.bytes_out += bytes * int64_t(consumers.size());
      if (consumers.empty()) release_chunk(pc);
      ++lw.next;
    }
  }

  // Send-buffer bytes a chunk takes: the chunk, or with --delta its record's capacity.
  int64_t held_bytes(const Chunk& ch) const { return m_.opt.delta ? delta_record_capacity(ch.bytes) : ch.bytes; }

  // --delta: the round's chunks just packed (each after its record's header) become their records,
  // compared with the chunks as last sent, which then hold them (one device call for the round).
  std::vector<DeltaRecord> encode_delta(const UnitWork& w, const std::vector<int>& round) {
    PhaseTimer t(st_.delta_detect_s);
    std::vector<DeltaEncodeJob> jobs;
    std::vector<KeptChunk*> kept;
    for (int l : round) {
      const LocalRankWork& lw = w.locals[size_t(l)];
      const int64_t chunk_bytes = lw.chunks[lw.next].bytes;
      bool first = false;
      KeptChunk& k = m_.trainer_side.kept.at({int32_t(spec_.kind), w.unit, int32_t(l), int32_t(lw.next)}, chunk_bytes,
                                             m_.device.get(), &first);
      jobs.push_back(DeltaEncodeJob{m_.trainer_side.send_buffer.data() + lw.packed[lw.next].offset, chunk_bytes,
                                    k.bytes.data(), k.version, version_, anchor_ || first});
      kept.push_back(&k);
    }
    std::vector<DeltaRecord> records = m_.device->delta_encode(jobs);
    for (KeptChunk* k : kept) k->version = version_;
    return records;
  }

  void release_chunk(PackedChunk& pc) {
    if (!pc.released && pc.waiting.empty()) {
      arena_.release(pc.offset, pc.held);
      pc.released = true;
    }
  }

  // Every chunk of every local rank with a live consumer packed (and its pack finished).
  bool fully_packed(const UnitWork& w) const {
    if (!w.gathered) return false;
    for (int l = 0; l < num_locals_; ++l) {
      const LocalRankWork& lw = w.locals[size_t(l)];
      if (m_.consumers_of_local(l).empty()) continue;
      if (!sched_.expected[size_t(w.unit)][size_t(l)].empty() && !lw.have_request) return false;
      if (lw.next < lw.chunks.size()) return false;
      for (const PackedChunk& pc : lw.packed)
        if (!pc.ready && !pc.waiting.empty()) return false;
    }
    return true;
  }

  // Fully packed, and every live consumer has pulled every chunk (DONE).
  bool unit_finished(const UnitWork& w) const { return fully_packed(w) && w.outstanding == 0; }

  Engines::Impl& m_;
  const EngineSpec& spec_;
  const ProducerSchedule& sched_;
  const uint64_t version_;
  const bool per_sync_requests_;
  const int inflight_, num_units_, num_locals_;
  std::vector<std::vector<std::optional<std::vector<ChunkPiece>>>>& cache_;  // requests kept across syncs
  std::vector<std::vector<std::set<int>>> early_requests_;                  // [unit][local]: who asked
  RankStats st_;
  StagingMeter meter_;
  RangeAllocator arena_;
  GatherContext gctx_;
  std::map<int32_t, std::unique_ptr<UnitWork>> active_;
  int next_gather_ = 0, released_ = 0;
  IdleBackoff backoff_;
  std::map<int, int> owed_;  // per consumer: DONEs (and a READ_DONE) it still owes this sync
  std::map<int, int64_t> direct_waiting_;  // consumers reading this rank's weights in one pass: their bytes
  bool anchor_ = false;                    // --delta: every chunk goes whole this sync
};

}  // namespace

RankStats Engines::Impl::run_producer(EngineKind e, int, uint64_t version) { return Producer(*this, e, version).run(); }

}  // namespace shardsync
