// The simulator against arithmetic done by hand: a tiny model on a cluster of round numbers,
// each expected time written out from the formulas of docs/simulator.md ("Model") in the
// comments, never from the simulator's own output.
//
// The model, tiny-qwen3 (configs/models/tiny-qwen3.json: hidden 64, 8 heads of 16, 2 KV heads,
// intermediate 128, 4 layers, vocab 1000, tied embeddings, bf16 = 2 B an element):
//   embed_tokens [1000, 64]                      128,000 B  (group "embed")
//   per layer, 11 tensors:                        90,432 B  (groups "layer.0" .. "layer.3")
//     q_proj [128, 64] 16,384; k_proj, v_proj [32, 64] 4,096 each; o_proj [64, 128] 16,384;
//     gate_proj, up_proj [128, 64] and down_proj [64, 128] 16,384 each;
//     q_norm, k_norm [16] 32 each; input/post_attention_layernorm [64] 128 each
//     (TP-split under Megatron: q, k, v, o, gate, up, down = 90,432 - 320 = 90,112 B)
//   norm [64]                                        128 B  (group "head"; lm_head is tied)
//   46 tensors, 6 groups, 128,000 + 4 x 90,432 + 128 = 489,856 B.
//
// The cluster (hand_cluster): 8 GPUs a node, NIC 1 GB/s (a byte takes 1 ns; line rate 2 GB/s),
// NVLink 10 GB/s, HBM 100 GB/s, NIC latency 5 us, NVLink latency 3 us, 30 us a collective,
// 2 us a weight group, 10 us a tensor for every engine. Trainer rank r on GPU r (node 0),
// inference ranks from GPU 8 (node 1): every pull crosses a NIC.
#include <gtest/gtest.h>

#include "layout/parse.hpp"
#include "sim/simulator.hpp"

namespace shardsync {
namespace {

struct HandCase {
  ModelSpec model;
  TrainerPlacement trainer;
  InferencePlacement inference;
  std::vector<RankPlan> plans;
  HandCase(const char* trainer_spec, const char* inference_spec, int replicas)
      : model(load_model("tiny-qwen3")),
        trainer(model, parse_trainer_spec(trainer_spec)),
        inference(model,
                  [&] {
                    InferenceLayout l = parse_inference_spec(inference_spec);
                    l.replicas = replicas;
                    return l;
                  }()),
        plans(record_plans(model, inference)) {}
  SimResult run(const ClusterSpec& c, EngineKind e, int64_t bucket_bytes = int64_t(1) << 30) const {
    return Simulator(model, trainer, inference, plans, c).run(e, bucket_bytes);
  }
};

ClusterSpec hand_cluster(CostProfile profile = CostProfile::kShardsync) {
  ClusterSpec c;
  c.name = "hand";
  c.profile = profile;
  c.gpus_per_node = 8;
  c.nic_gbps = 1;
  c.nic_raw_gbps = 2;
  c.nvlink_gbps = 10;
  c.hbm_gbps = 100;
  c.nic_latency_us = 5;
  c.nvlink_latency_us = 3;
  c.collective_launch_us = 30;
  c.group_us = 2;
  c.tensor_us = {{"broadcast", 10}, {"v1", 10}, {"v2", 10}, {"v3", 10}, {"v4", 10}};
  return c;
}

constexpr double kUs = 1e-6;
// Sums of a few hundred microseconds, each term exact to a few ulps: 1 ps is far below any
// term a changed formula would move.
constexpr double kTol = 1e-12;

TEST(Sim, ModelIsTheSizeTheArithmeticAssumes) {
  HandCase s("tp1", "tp1", 1);
  EXPECT_EQ(s.model.total_bytes(), 489856);
  EXPECT_EQ(s.model.params().size(), 46u);
  ASSERT_EQ(s.model.groups().size(), 6u);
  EXPECT_EQ(s.model.groups()[0].bytes, 128000);
  EXPECT_EQ(s.model.groups()[1].bytes, 90432);
  EXPECT_EQ(s.model.groups()[1].num_params, 11);
  EXPECT_EQ(s.model.groups()[5].bytes, 128);
}

// V3 and V4, one trainer GPU -> one inference GPU. Per group (docs: "a group costs max(pull,
// replay, next gather) plus a per-group cost"; no gathers at TP1), a pull is one phase: its
// bytes through the NIC plus the NIC latency; the replay is 10 us a tensor:
//   embed:   pull 128,000 B / 1 GB/s + 5 = 133 us,     replay 1 x 10 = 10 us   -> 133 us
//   layer:   pull  90,432 B / 1 GB/s + 5 = 95.432 us,  replay 11 x 10 = 110 us -> 110 us (x 4)
//   head:    pull     128 B / 1 GB/s + 5 = 5.128 us,   replay 1 x 10 = 10 us   -> 10 us
//   + 6 groups x 2 us = 12 us; stage = 133 + 440 + 10 + 12 = 595 us
//   + the last group's process, not hidden: 128 B x 2 (read + write) / 100 GB/s = 0.00256 us
//   total 595.00256 us.
// transfer = 133 + 4 x 95.432 + 5.128 = 519.856 us; overhead = 46 x 10 + 6 x 2 = 472 us.
// Every pull as one phase (the bound on overlapping stages): 489,856 B / 1 GB/s + 5 = 494.856 us,
// below the one stage's 595, so it does not bind.
// Speed of light: 489,856 B over one GPU at line rate 2 GB/s = 244.928 us, absolute and PP serial.
TEST(Sim, GroupPipelineOnOnePairIsTheHandArithmetic) {
  HandCase s("tp1", "tp1", 1);
  for (EngineKind e : {EngineKind::kV3, EngineKind::kV4}) {
    for (CostProfile profile : {CostProfile::kShardsync, CostProfile::kVllmPublished}) {
      const SimResult r = s.run(hand_cluster(profile), e);
      const std::string what = std::string(engine_name(e)) + " " + profile_name(profile);
      EXPECT_NEAR(r.total_s, 595.00256 * kUs, kTol) << what;
      EXPECT_NEAR(r.transfer_s, 519.856 * kUs, kTol) << what;
      EXPECT_NEAR(r.overhead_s, 472 * kUs, kTol) << what;
      EXPECT_NEAR(r.process_s, 0.00256 * kUs, kTol) << what;
      EXPECT_EQ(r.gather_s, 0) << what;
      EXPECT_EQ(r.bytes_moved, 489856) << what;
      EXPECT_EQ(r.bytes_ib, 489856) << what;
      EXPECT_EQ(r.bytes_nvlink, 0) << what;
      EXPECT_EQ(r.groups, 6) << what;
      EXPECT_NEAR(r.sol_abs_s, 244.928 * kUs, kTol) << what;
      EXPECT_NEAR(r.sol_pp_serial_s, 244.928 * kUs, kTol) << what;
      EXPECT_NEAR(r.aggregate_gbps, 489856.0 / (595.00256 * kUs) / 1e9, 1e-9) << what;
      // Only the shardsync profile overlaps stages (one here) and computes their bound.
      EXPECT_NEAR(r.pulls_together_s, profile == CostProfile::kShardsync ? 494.856 * kUs : 0.0,
                  kTol)
          << what;
    }
  }
}

// One trainer GPU serving two replicas: the busiest endpoint is now the sender, whose NIC carries
// every pull twice, so the pulls outgrow the replay:
//   embed: 2 x 128,000 B / 1 GB/s + 5 = 261 us       (replay 10)
//   layer: 2 x  90,432 B / 1 GB/s + 5 = 185.864 us   (replay 110)  x 4 = 743.456 us
//   head:  2 x     128 B / 1 GB/s + 5 = 5.256 us     (replay 10)   -> 10 us
//   + 12 us of groups + 0.00256 us process (the last group over the replica's 1 rank)
//   = 261 + 743.456 + 10 + 12 + 0.00256 = 1026.45856 us.
// transfer = 261 + 743.456 + 5.256 = 1009.712 us; every pull at once 2 x 489.856 + 5 = 984.712 us.
TEST(Sim, PullPhaseIsBoundByItsBusiestEndpoint) {
  HandCase s("tp1", "tp1", 2);
  const SimResult r = s.run(hand_cluster(), EngineKind::kV3);
  EXPECT_NEAR(r.total_s, 1026.45856 * kUs, kTol);
  EXPECT_NEAR(r.transfer_s, 1009.712 * kUs, kTol);
  EXPECT_NEAR(r.pulls_together_s, 984.712 * kUs, kTol);
  EXPECT_EQ(r.bytes_moved, 2 * 489856);
  // Speed of light: the busiest replica's 489,856 B over its 1 GPU at 2 GB/s; PP serial: the one
  // stage's 979,712 B out of its 1 GPU at 2 GB/s.
  EXPECT_NEAR(r.sol_abs_s, 244.928 * kUs, kTol);
  EXPECT_NEAR(r.sol_pp_serial_s, 489.856 * kUs, kTol);
}

// Trainer PP2 (4 layers: 2 a stage; GPU 0 holds embed and layers 0-1, GPU 1 layers 2-3 and the
// norm), one inference GPU. Per stage, with the group costs of GroupPipelineOnOnePair:
//   stage 0: embed 133 + 2 x 110 + 3 groups x 2 + process of layer.1 (90,432 x 2 / 100 GB/s =
//            1.80864 us) = 360.80864 us
//   stage 1: 2 x 110 + head 10 + 3 x 2 + process of head 0.00256 = 236.00256 us
// Shardsync profile (V3 serves stages at once): the slower stage, 360.80864 us, but never below
// every pull in one phase, whose 489,856 B all enter the one receiver: 494.856 us. That binds.
// Published profile (stages one after another): 360.80864 + 236.00256 = 596.8112 us.
TEST(Sim, OverlappingStagesAreBoundByTheSharedReceiver) {
  HandCase s("pp2", "tp1", 1);
  const SimResult at_once = s.run(hand_cluster(), EngineKind::kV3);
  ASSERT_EQ(at_once.stage_s.size(), 2u);
  EXPECT_NEAR(at_once.stage_s[0], 360.80864 * kUs, kTol);
  EXPECT_NEAR(at_once.stage_s[1], 236.00256 * kUs, kTol);
  EXPECT_TRUE(at_once.stages_overlap);
  EXPECT_NEAR(at_once.pulls_together_s, 494.856 * kUs, kTol);
  EXPECT_NEAR(at_once.total_s, 494.856 * kUs, kTol);
  const SimResult serial = s.run(hand_cluster(CostProfile::kVllmPublished), EngineKind::kV3);
  EXPECT_FALSE(serial.stages_overlap);
  EXPECT_NEAR(serial.total_s, 596.8112 * kUs, kTol);
  // PP serial speed of light: each stage's bytes out of its 1 GPU at 2 GB/s, one after another:
  // (128,000 + 2 x 90,432) / 2 + (2 x 90,432 + 128) / 2 B/ns = 154.432 + 90.496 = 244.928 us.
  EXPECT_NEAR(serial.sol_pp_serial_s, 244.928 * kUs, kTol);
}

// Trainer TP2 on GPUs 0 and 1 (one node): V3 all-gathers every TP-split tensor within the group
// first (docs: each member receives (n-1)/n of the tensor over NVLink, plus (n-1) latencies and a
// launch). Launch 1 us here, so that every gather hides under its neighbour's pull or replay (the
// pairing of gathers with pulls then cannot change the total):
//   embed:  128,000 B x 1/2 / 10 GB/s + 1 x 3 + 1 = 6.4 + 4 = 10.4 us
//   layer:  7 split tensors, 90,112 B: 90,112 x 1/2 / 10 GB/s + 7 x (3 + 1) = 4.5056 + 28
//           = 32.5056 us, below the 110 us of every layer slot and the embed's 133
// The embed's gather is exposed (nothing before it); the rest is GroupPipelineOnOnePair's:
//   total = 10.4 + 595.00256 = 605.40256 us; gather = 10.4 + 4 x 32.5056 = 140.4224 us.
// Gathered bytes: each member receives the other's half, 1 x the tensor over NVLink: 128,000 +
// 4 x 90,112 = 488,448 B. V4 pulls the shards directly: no gather, GroupPipelineOnOnePair's time.
TEST(Sim, TpGatherWithinANodeIsTheHandArithmetic) {
  HandCase s("tp2", "tp1", 1);
  ClusterSpec c = hand_cluster();
  c.collective_launch_us = 1;
  const SimResult v3 = s.run(c, EngineKind::kV3);
  EXPECT_NEAR(v3.gather_s, 140.4224 * kUs, kTol);
  EXPECT_NEAR(v3.total_s, 605.40256 * kUs, kTol);
  EXPECT_EQ(v3.bytes_nvlink, 488448);
  EXPECT_EQ(v3.bytes_ib, 489856);
  const SimResult v4 = s.run(c, EngineKind::kV4);
  EXPECT_EQ(v4.gather_s, 0);
  EXPECT_NEAR(v4.total_s, 595.00256 * kUs, kTol);
  EXPECT_EQ(v4.bytes_nvlink, 0);
}

// The same TP2 group across two nodes (1 GPU a node: trainer GPUs 0 and 1 on nodes 0 and 1, the
// inference GPU on node 2). The docs: every node receives the other nodes' (k-1)/k through its
// members' NICs; the slower of NVLink and NIC sets the pace; latencies are the NIC's:
//   embed:  max(128,000 / 2 / 10 GB/s, 128,000 x 1/2 / (1 x 1 GB/s)) + 1 x 5 + 1 = 64 + 6 = 70 us
//   layer:  90,112 / 2 / 1 GB/s + 7 x (5 + 1) = 45.056 + 42 = 87.056 us (below 110: hidden)
//   total = 70 + 595.00256 = 665.00256 us; gather = 70 + 4 x 87.056 = 418.224 us.
// Gathered bytes cross nodes now: (k-1) x the tensor = 488,448 B over NICs, besides the pulls.
TEST(Sim, TpGatherAcrossNodesIsTheHandArithmetic) {
  HandCase s("tp2", "tp1", 1);
  ClusterSpec c = hand_cluster();
  c.collective_launch_us = 1;
  c.gpus_per_node = 1;
  const SimResult v3 = s.run(c, EngineKind::kV3);
  EXPECT_NEAR(v3.gather_s, 418.224 * kUs, kTol);
  EXPECT_NEAR(v3.total_s, 665.00256 * kUs, kTol);
  EXPECT_EQ(v3.bytes_ib, 488448 + 489856);
  EXPECT_EQ(v3.bytes_nvlink, 0);
}

// V1 and V2 (one tensor after another; at TP1 nothing to gather), one pair: each tensor costs
// 10 us of iterator and its own pull phase (bytes / 1 GB/s + 5 us):
//   46 x 10 + 489,856 B / 1 GB/s + 46 x 5 = 460 + 489.856 + 230 = 1179.856 us.
// The published profile hands V2's pulls (requests cached) to an asynchronous thread: the larger
// of the iterator, 46 x 10 = 460 us, and every pull as one phase, 489.856 + 5 = 494.856 us; at
// 20 us a tensor the iterator's 920 us. V1 (requests every sync) stays one after another there.
TEST(Sim, TensorIteratorIsTheHandArithmetic) {
  HandCase s("tp1", "tp1", 1);
  for (EngineKind e : {EngineKind::kV1, EngineKind::kV2}) {
    const SimResult r = s.run(hand_cluster(), e);
    EXPECT_FALSE(r.pulls_overlap_iterator) << engine_name(e);
    EXPECT_NEAR(r.total_s, 1179.856 * kUs, kTol) << engine_name(e);
    EXPECT_NEAR(r.transfer_s, 719.856 * kUs, kTol) << engine_name(e);
    EXPECT_NEAR(r.overhead_s, 460 * kUs, kTol) << engine_name(e);
  }
  ClusterSpec published = hand_cluster(CostProfile::kVllmPublished);
  EXPECT_NEAR(s.run(published, EngineKind::kV1).total_s, 1179.856 * kUs, kTol);
  const SimResult v2 = s.run(published, EngineKind::kV2);
  EXPECT_TRUE(v2.pulls_overlap_iterator);
  EXPECT_NEAR(v2.total_s, 494.856 * kUs, kTol);  // pull-bound
  published.tensor_us["v2"] = 20;
  EXPECT_NEAR(s.run(published, EngineKind::kV2).total_s, 920 * kUs, kTol);  // iterator-bound
}

// The broadcast, one pair (trainer rank 0 holds every tensor whole: no gather). Per tensor 10 us;
// per bucket the bucket's bytes at the root's NIC rate (the receiver is on another node) and a
// 30 us collective; then the root packs the model and the rank replays it, each a device copy
// (read + write) at 100 GB/s:
//   one 1 GiB bucket:  460 + (489.856 + 30) + (2 x 489,856 + 2 x 489,856) B / 100 GB/s
//                    = 460 + 519.856 + 19.59424 = 999.45024 us
//   1-byte buckets (one a tensor, 46): transfer 489.856 + 46 x 30 = 1869.856 us,
//                    total 460 + 1869.856 + 19.59424 = 2349.45024 us.
TEST(Sim, BucketBroadcastIsTheHandArithmetic) {
  HandCase s("tp1", "tp1", 1);
  const SimResult one = s.run(hand_cluster(), EngineKind::kBroadcast);
  EXPECT_EQ(one.gather_s, 0);
  EXPECT_NEAR(one.overhead_s, 460 * kUs, kTol);
  EXPECT_NEAR(one.transfer_s, 519.856 * kUs, kTol);
  EXPECT_NEAR(one.process_s, 19.59424 * kUs, kTol);
  EXPECT_NEAR(one.total_s, 999.45024 * kUs, kTol);
  EXPECT_EQ(one.bytes_moved, 489856);
  const SimResult each = s.run(hand_cluster(), EngineKind::kBroadcast, 1);
  EXPECT_NEAR(each.transfer_s, 1869.856 * kUs, kTol);
  EXPECT_NEAR(each.total_s, 2349.45024 * kUs, kTol);
}

// With gathers slower than the pulls (launch 30 us): docs/simulator.md's pipeline, "group N+1
// is gathered while N is pulled, so a group costs max(pull, replay, next gather)", gives
//   G_embed + max(133, 10, G_layer) + 3 x max(110, G_layer) + max(110, 0) + max(10, 0)
//     + 12 + 0.00256, with G_embed = 6.4 + 33 = 39.4 us, G_layer = 4.5056 + 7 x 33 = 235.5056 us,
//   = 39.4 + 4 x 235.5056 + 110 + 10 + 12 + 0.00256 = 1113.42496 us.
// (Simulator::run once paired each group's pull with that group's own gather, 1136.42496 us.)
TEST(Sim, GroupPipelineHidesTheNextGroupsGatherUnderThisGroupsPull) {
  HandCase s("tp2", "tp1", 1);
  const SimResult v3 = s.run(hand_cluster(), EngineKind::kV3);
  EXPECT_NEAR(v3.gather_s, (39.4 + 4 * 235.5056) * kUs, kTol);
  EXPECT_NEAR(v3.total_s, 1113.42496 * kUs, kTol);
}

}  // namespace
}  // namespace shardsync
