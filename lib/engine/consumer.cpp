// The inference side of the sharded engines: on READY, pull the chunk one-sided from the
// trainer's registered send buffer into the registered receive buffer, copy its pieces
// into the layerwise buffer of their weight group, tell the trainer (DONE), and when a
// group is complete run process + copy into the live weights (V3: on a background thread,
// so the receive buffer takes the next chunk at once).
#include <atomic>

#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

RankStats Engines::Impl::run_consumer(EngineKind e, int sync_index, uint64_t version) {
  RankStats st;
  st.rank = world.rank;
  const ConsumerSchedule& sched = consumer_schedule(e);
  const int L = world.local_rank;
  std::deque<CtrlMsg> readies;

  // Wait for the trainer's START; READYs of this sync may overtake it.
  for (;;) {
    CtrlMsg m;
    if (transport->poll(&m)) {
      if (m.type == kMsgStart) {
        if (m.a != sync_index || uint64_t(m.x) != version || m.b != int(e))
          throw Error("consumer: START for sync " + std::to_string(m.a) + " while expecting sync " +
                      std::to_string(sync_index));
        break;
      }
      if (m.type != kMsgReady) throw Error("consumer: unexpected message " + std::to_string(m.type) + " before START");
      readies.push_back(std::move(m));
      continue;
    }
    transport->progress();
    idle_pause();
  }
  const double t0 = now_s();

  // Metadata: V1 asks for every tensor every sync; V2/V3 send it once and the trainer caches it.
  if (e == EngineKind::kV1 || !requests_sent[int(e)]) {
    for (size_t u = 0; u < sched.units.size(); ++u)
      for (const auto& [t, pulls] : sched.pulls.pulls[u]) {
        CtrlMsg r;
        r.type = kMsgRequest;
        r.a = int32_t(u);
        r.b = L;
        r.payload = encode_pulls(pulls);
        transport->send(t, r);
        ++st.messages;
      }
    requests_sent[int(e)] = true;
  }

  StagingMeter meter;
  meter.add(int64_t(landing.size()));
  RangeAllocator arena(int64_t(landing.size()));
  std::map<int32_t, std::vector<uint8_t>> buffers;
  std::map<int32_t, int64_t> group_left = group_copy_bytes;
  struct InFlight {
    int32_t unit, chunk;
    int trainer;
    int64_t offset, bytes;
    double posted;
  };
  std::map<Transport::GetId, InFlight> gets;
  int64_t chunks_left = sched.num_chunks;
  std::unique_ptr<BackgroundWorker> bg;
  if (e == EngineKind::kV3) bg = std::make_unique<BackgroundWorker>();
  std::atomic<int64_t> process_ns{0};
  bool corrupted = false;

  auto complete_group = [&](int32_t g) {
    std::vector<uint8_t> buf = std::move(buffers.at(g));
    buffers.erase(g);
    auto task = [this, g, &meter, &process_ns, b = std::move(buf)]() {
      double t = now_s();
      const auto& span = group_span.at(g);
      // process: identity for bf16 weights; copy into the live weights' fixed storage.
      std::memcpy(live.data() + span.first, b.data(), b.size());
      meter.sub(int64_t(b.size()));
      process_ns += int64_t((now_s() - t) * 1e9);
    };
    if (bg) bg->submit(std::move(task));
    else task();
  };

  auto land = [&](const InFlight& f) {
    const auto& per_trainer = sched.chunks[size_t(f.unit)];
    auto it = std::find_if(per_trainer.begin(), per_trainer.end(), [&](const auto& x) { return x.first == f.trainer; });
    const Chunk& ch = it->second[size_t(f.chunk)];
    uint8_t* base = landing.data() + f.offset;
    if (sync_index == opt.corrupt_at_sync && world.inference_rank == 0 && !corrupted) {
      base[0] ^= 0x01;  // test hook: one flipped bit must fail verification
      corrupted = true;
    }
    double t = now_s();
    for (const ChunkPiece& p : ch.pieces) {
      int32_t ep = plan->entries[size_t(p.entry)].engine_param;
      int32_t g = group_of_param[size_t(ep)];
      std::vector<uint8_t>& buf = layerwise(g, buffers, meter);
      uint8_t* dst = buf.data() + (param_offset[size_t(ep)] - group_span.at(g).first);
      execute_copy(with_contiguous_src(p.copy), base + p.buf_offset, dst, dtype_bytes(plan->params[size_t(ep)].dtype));
      if ((group_left[g] -= p.bytes) == 0) complete_group(g);
    }
    process_ns += int64_t((now_s() - t) * 1e9);
    CtrlMsg done{kMsgDone, -1, f.unit, f.chunk, L, 0, 0, 0, {}};
    transport->send(f.trainer, done);
    ++st.messages;
    arena.release(f.offset, f.bytes);
    st.bytes_in += f.bytes;
    --chunks_left;
  };

  double idle_since = -1;
  while (chunks_left > 0) {
    bool progressed = false;
    CtrlMsg m;
    while (transport->poll(&m)) {
      if (m.type != kMsgReady) throw Error("consumer: unexpected message " + std::to_string(m.type));
      readies.push_back(std::move(m));
      progressed = true;
    }
    transport->progress();
    while (!readies.empty()) {
      const CtrlMsg& r = readies.front();
      auto off = arena.alloc(r.y);
      if (!off) break;
      const auto& per_trainer = sched.chunks.at(size_t(r.a));
      auto it = std::find_if(per_trainer.begin(), per_trainer.end(), [&](const auto& x) { return x.first == r.from; });
      if (it == per_trainer.end() || r.b < 0 || r.b >= int32_t(it->second.size()) || it->second[size_t(r.b)].bytes != r.y ||
          uint64_t(r.z) != version)
        throw Error("consumer: READY from rank " + std::to_string(r.from) + " for unit " + std::to_string(r.a) +
                    " chunk " + std::to_string(r.b) + " does not match this rank's schedule");
      Transport::GetId id = transport->get(r.from, size_t(r.x), size_t(*off), size_t(r.y));
      gets.emplace(id, InFlight{r.a, r.b, r.from, *off, r.y, now_s()});
      ++st.gets;
      readies.pop_front();
      progressed = true;
    }
    for (auto it = gets.begin(); it != gets.end();) {
      if (transport->test(it->first)) {
        st.transfer_s += now_s() - it->second.posted;
        land(it->second);
        it = gets.erase(it);
        progressed = true;
      } else {
        ++it;
      }
    }
    if (!progressed && gets.empty()) {
      if (idle_since < 0) idle_since = now_s();
    } else if (idle_since >= 0) {
      st.wait_s += now_s() - idle_since;
      idle_since = -1;
    }
    if (!progressed) idle_pause();
  }
  if (bg) bg->drain();
  for (const auto& [g, left] : group_left)
    if (left != 0) throw Error("consumer: weight group " + std::to_string(g) + " incomplete at the end of the sync");
  transport->flush_sends();
  st.total_s = now_s() - t0;
  st.process_s = double(process_ns.load()) / 1e9;
  st.peak_staging_bytes = meter.peak();
  if (opt.verify) verify(version, st);
  return st;
}

}  // namespace shardsync
