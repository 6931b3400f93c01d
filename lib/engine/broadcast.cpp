// The broadcast baseline (SkyRL's NCCL broadcast on GPUs, MPI here): the trainer gathers
// each HF tensor in full on rank 0, packs buckets of tensors and broadcasts each bucket to
// every inference rank, which applies its plan to the full tensors and discards the rest.
#include <climits>

#include "common/error.hpp"
#include "engine/internal.hpp"

namespace shardsync {

namespace {

int64_t align16(int64_t x) { return (x + 15) & ~int64_t(15); }

// Byte offset of each tensor of a bucket, and the bucket's size.
std::vector<int64_t> bucket_layout(const ModelSpec& model, const Unit& u, int64_t* total) {
  std::vector<int64_t> off;
  int64_t pos = 0;
  for (int32_t hf : u.tensors) {
    off.push_back(pos);
    pos = align16(pos + model.param(hf).bytes());
  }
  *total = pos;
  return off;
}

void bcast_bytes(uint8_t* data, int64_t bytes, MPI_Comm comm) {
  constexpr int64_t kPiece = int64_t(1) << 30;  // MPI counts are int
  for (int64_t off = 0; off < bytes; off += kPiece)
    MPI_CHECK(MPI_Bcast(data + off, int(std::min(kPiece, bytes - off)), MPI_BYTE, 0, comm));
}

}  // namespace

RankStats Engines::Impl::run_broadcast_trainer(int, uint64_t) {
  RankStats st;
  st.rank = world.rank;
  st.trainer = 1;
  const double t0 = now_s();
  const ProducerSchedule& sched = producer_schedule(EngineKind::kBroadcast);
  GatherContext gctx{&model, &trainer, shards.get(), &world};
  StagingMeter meter;
  std::vector<uint8_t> bucket;
  for (const Unit& u : sched.units) {
    std::unique_ptr<UnitGather> g;
    {
      PhaseTimer t(st.gather_s);
      g = std::make_unique<UnitGather>(gctx, u, SourcePolicy::kRootOnly);
      meter.add(g->staging_bytes());
      g->wait();
    }
    if (world.rank == 0) {
      int64_t total = 0;
      std::vector<int64_t> off = bucket_layout(model, u, &total);
      if (int64_t(bucket.size()) < total) {
        meter.add(total - int64_t(bucket.size()));
        bucket.resize(size_t(total));
      }
      {
        PhaseTimer t(st.pack_s);
        for (size_t i = 0; i < u.tensors.size(); ++i) {
          const SlabRef* s = g->slab(u.tensors[i]);
          std::memcpy(bucket.data() + off[i], s->data, size_t(model.param(u.tensors[i]).bytes()));
        }
      }
      PhaseTimer t(st.transfer_s);
      bcast_bytes(bucket.data(), total, world.bcast);
      st.bytes_out += total;
    }
    meter.sub(g->staging_bytes());
  }
  st.total_s = now_s() - t0;
  st.peak_staging_bytes = meter.peak();
  return st;
}

RankStats Engines::Impl::run_broadcast_consumer(int sync_index, uint64_t version) {
  RankStats st;
  st.rank = world.rank;
  for (;;) {
    CtrlMsg m;
    if (transport->poll(&m)) {
      if (m.type != kMsgStart || m.a != sync_index || uint64_t(m.x) != version)
        throw Error("broadcast consumer: expected START of sync " + std::to_string(sync_index));
      break;
    }
    idle_pause();
  }
  const double t0 = now_s();
  const ConsumerSchedule& sched = consumer_schedule(EngineKind::kBroadcast);
  std::vector<std::vector<int32_t>> entries_of(model.params().size());
  for (int32_t i = 0; i < int32_t(plan->entries.size()); ++i)
    if (!plan->entries[size_t(i)].is_fill()) entries_of[size_t(plan->entries[size_t(i)].hf_param)].push_back(i);
  StagingMeter meter;
  std::map<int32_t, std::vector<uint8_t>> buffers;
  std::map<int32_t, int64_t> group_left = group_copy_bytes;
  std::vector<uint8_t> bucket;
  for (const Unit& u : sched.units) {
    int64_t total = 0;
    std::vector<int64_t> off = bucket_layout(model, u, &total);
    if (int64_t(bucket.size()) < total) {
      meter.add(total - int64_t(bucket.size()));
      bucket.resize(size_t(total));
    }
    {
      PhaseTimer t(st.transfer_s);
      bcast_bytes(bucket.data(), total, world.bcast);
    }
    st.bytes_in += total;
    PhaseTimer t(st.process_s);
    for (size_t i = 0; i < u.tensors.size(); ++i)
      for (int32_t ei : entries_of[size_t(u.tensors[i])]) {
        const PlanEntry& e = plan->entries[size_t(ei)];
        int32_t g = group_of_param[size_t(e.engine_param)];
        std::vector<uint8_t>& buf = layerwise(g, buffers, meter);
        int64_t eb = dtype_bytes(plan->params[size_t(e.engine_param)].dtype);
        execute_copy(e.copy, bucket.data() + off[i], buf.data() + (param_offset[size_t(e.engine_param)] - group_span.at(g).first), eb);
        if ((group_left[g] -= e.numel() * eb) == 0) {
          const auto& span = group_span.at(g);
          std::memcpy(live.data() + span.first, buf.data(), buf.size());
          meter.sub(int64_t(buf.size()));
          buffers.erase(g);
        }
      }
  }
  st.total_s = now_s() - t0;
  st.peak_staging_bytes = meter.peak();
  if (opt.verify) verify(version, st);
  return st;
}

}  // namespace shardsync
