// The broadcast baseline (SkyRL's NCCL broadcast; MPI on host memory): the trainer gathers
// each HF tensor in full on rank 0, packs buckets of tensors and broadcasts each bucket to
// every inference rank, which applies its plan to the full tensors and discards the rest.
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

// The bucket buffer, grown to hold `bytes` (staging counted). It is kept across syncs, as a
// trainer keeps its broadcast bucket: one allocated afresh every sync has its pages faulted
// in again each time, and on a VM whose host reclaims freed guest memory that first touch
// took 0.4-1 s in one sync of three (broadcast of small-qwen3-moe over MPI on the 2-core dev
// VM: 0.05 s syncs among 0.4-1.1 s ones), timing the allocator instead of the broadcast.
void grow_bucket(DeviceBuffer& bucket, int64_t bytes, Device* device, StagingMeter& meter) {
  if (bucket.size() >= bytes) return;
  meter.sub(bucket.size());
  bucket = DeviceBuffer(device, bytes);
  meter.add(bytes);
}

// While set, this rank is in the broadcast, a collective over every rank: a lost peer then
// ends the run (Impl::on_peer_lost), as nothing unblocks the collective.
class InBroadcast {
 public:
  InBroadcast(std::atomic<bool>& flag) : flag_(flag) { flag_ = true; }
  ~InBroadcast() { flag_ = false; }

 private:
  std::atomic<bool>& flag_;
};

}  // namespace

RankStats Engines::Impl::run_broadcast_trainer(int, uint64_t) {
  RankStats st;
  st.rank = world.rank;
  st.trainer = 1;
  InBroadcast phase(in_broadcast);
  waiting("in the broadcast (gathers to rank 0, buckets to every inference rank)");
  const double t0 = now_s();
  const ProducerSchedule& sched = producer_schedule(EngineKind::kBroadcast);
  GatherContext gctx = gather_context();
  StagingMeter meter;
  DeviceBuffer& bucket = trainer_side.bcast_bucket;
  meter.add(bucket.size());
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
      grow_bucket(bucket, total, device.get(), meter);
      {
        PhaseTimer t(st.pack_s);
        for (size_t i = 0; i < u.tensors.size(); ++i)
          device->memcpy(bucket.data() + off[i], g->slab(u.tensors[i])->data, model.param(u.tensors[i]).bytes());
      }
      PhaseTimer t(st.transfer_s);
      bcast_comm->bcast(bucket.data(), total, 0);
      st.bytes_out += total;
    }
    beat();
    meter.sub(g->staging_bytes());
  }
  device->synchronize();
  stretch_sync_for_test(EngineKind::kBroadcast, t0);
  st.total_s = now_s() - t0;
  st.peak_staging_bytes = meter.peak();
  return st;
}

RankStats Engines::Impl::run_broadcast_consumer(int sync_index, uint64_t version) {
  RankStats st;
  st.rank = world.rank;
  consumer_side.fp8_arrived = false;  // bf16 on the wire: the process step quantizes
  consumer_side.caller_in_place = false;  // buckets land in the live weights' groups: copied out after
  CtrlMsg start;
  waiting("waiting for a sync's START", 0);
  if (!take_start(EngineKind::kBroadcast, sync_index, version, nullptr, &start)) {
    st.reported = 0;
    st.stood_down = 1;
    return st;
  }
  if (start.c == 1) {  // a rank has died: the broadcast (a collective over all) is skipped
    st.reported = 0;
    st.skipped = 1;
    return st;
  }
  InBroadcast phase(in_broadcast);
  waiting("in the broadcast (buckets from rank 0)", 0);
  const double t0 = now_s();
  const ConsumerSchedule& sched = consumer_schedule(EngineKind::kBroadcast);
  std::vector<std::vector<int32_t>> entries_of(model.params().size());
  for (int32_t i = 0; i < int32_t(consumer_side.plan->entries.size()); ++i)
    if (!consumer_side.plan->entries[size_t(i)].is_fill()) entries_of[size_t(consumer_side.plan->entries[size_t(i)].hf_param)].push_back(i);
  StagingMeter meter;
  std::map<int32_t, DeviceBuffer> buffers;
  std::map<int32_t, int64_t> group_left = consumer_side.group_copy_bytes;
  DeviceBuffer& bucket = consumer_side.bcast_bucket;
  meter.add(bucket.size());
  std::deque<DeviceBuffer> done_buffers;
  for (const Unit& u : sched.units) {
    int64_t total = 0;
    std::vector<int64_t> off = bucket_layout(model, u, &total);
    grow_bucket(bucket, total, device.get(), meter);
    {
      PhaseTimer t(st.transfer_s);
      bcast_comm->bcast(bucket.data(), total, 0);
    }
    beat();
    st.bytes_in += total;
    PhaseTimer t(st.process_s);
    std::vector<CopyJob> jobs;
    std::vector<int32_t> completed;
    for (size_t i = 0; i < u.tensors.size(); ++i)
      for (int32_t ei : entries_of[size_t(u.tensors[i])]) {
        const PlanEntry& e = consumer_side.plan->entries[size_t(ei)];
        int32_t g = consumer_side.group_of_param[size_t(e.engine_param)];
        DeviceBuffer& buf = layerwise(g, buffers, meter);
        int64_t eb = dtype_bytes(consumer_side.plan->params[size_t(e.engine_param)].dtype);
        jobs.push_back(CopyJob{bucket.data() + off[i],
                               buf.data() + (consumer_side.param_offset[size_t(e.engine_param)] - consumer_side.group_span.at(g).first), e.copy,
                               int32_t(eb)});
        if ((group_left[g] -= e.numel() * eb) == 0) completed.push_back(g);
      }
    device->copy(jobs);
    for (int32_t g : completed) {
      const auto& span = consumer_side.group_span.at(g);
      DeviceBuffer buf = std::move(buffers.at(g));
      buffers.erase(g);
      device->memcpy(consumer_side.live.data() + span.first, buf.data(), buf.size());
      quantize_group(g, buf.data(), span.first, Lane::kMain, st);  // an FP8 target's process step
      meter.sub(buf.size());
      done_buffers.push_back(std::move(buf));
    }
    // The next bucket overwrites this one: its copies must have run.
    device->synchronize();
    while (!done_buffers.empty()) {
      consumer_side.layerwise_pool.give(std::move(done_buffers.front()));
      done_buffers.pop_front();
    }
  }
  in_broadcast = false;  // every bucket is here: a loss from now on is survivable
  stall_for_test(SyncOptions::StallIn::kProcess, sync_index);
  stretch_sync_for_test(EngineKind::kBroadcast, t0);
  st.total_s = now_s() - t0;
  st.peak_staging_bytes = meter.peak();
  stall_for_test(SyncOptions::StallIn::kVerify, sync_index);
  if (opt.verify) verify(version, st);
  return st;
}

}  // namespace shardsync
