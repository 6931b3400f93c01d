// The simulator: its byte counts are the engine's, contention is modelled, PP serialization
// matters, and a published row no cost was fitted on is predicted (test_sim_arithmetic.cpp holds
// its times to arithmetic done by hand).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "layout/parse.hpp"
#include "plan/quant.hpp"
#include "sim/calibrate.hpp"
#include "sim/simulator.hpp"

namespace shardsync {
namespace {

struct SimCase {
  ModelSpec model;
  TrainerPlacement trainer;
  InferencePlacement inference;
  std::vector<RankPlan> plans;
  SimCase(const LayoutFile& f)
      : model(load_model(f.model)), trainer(model, f.trainer), inference(model, f.inference),
        plans(record_plans(model, inference)) {}
  SimCase(const char* m, const char* t, const char* i, int replicas)
      : model(load_model(m)), trainer(model, parse_trainer_spec(t)), inference(model, [&] {
          InferenceLayout l = parse_inference_spec(i);
          l.replicas = replicas;
          return l;
        }()), plans(record_plans(model, inference)) {}
};

// DGX H100 hardware with shardsync's own per-tensor costs (every engine row has one), for tests
// of bytes and structure that do not depend on whose costs they are.
ClusterSpec dgx_shardsync() { return with_costs_of(load_cluster("h100-ib400"), load_cluster("h200x2-nvlink")); }

SimBytes sim_bytes(bool fp8_wire, bool dedupe_node, bool delta = false, UpdateModel updates = {}) {
  SimBytes b;
  b.fp8_wire = fp8_wire;
  b.dedupe_node = dedupe_node;
  b.delta = delta;
  b.updates = updates;
  return b;
}

// The one published row no cost was fitted on (h100-ib400's fitted_on names only Qwen3-235B
// rows): Kimi K2's V3 from the per-tensor cost fitted on Qwen3-235B, a prediction, within 25% of
// the blog's 7.53 s. The Qwen3-235B rows are fits (the costs were chosen to give them) and test
// nothing here; the model's arithmetic is held by hand in test_sim_arithmetic.cpp. Bytes and the
// speed of light use no fitted cost: about 2 TB into each of 4 replicas (7.9 TB), ~1.25 s
// absolute, ~5 s with PP serialized (the blog's figures).
TEST(Sim, PredictsKimiK2FromCostsFittedOnAnotherModel) {
  ClusterSpec c = load_cluster("h100-ib400");
  ASSERT_EQ(c.fitted_terms("kimi-k2-published v3"), "") << "a cost fitted on this row makes it a fit, not a prediction";
  SimCase k(load_layout("kimi-k2-published"));
  const SimResult r = Simulator(k.model, k.trainer, k.inference, k.plans, c).run(EngineKind::kV3);
  EXPECT_NEAR(r.total_s, 7.53, 0.25 * 7.53);
  EXPECT_NEAR(double(r.bytes_moved) / 1e12, 7.9, 0.9);
  EXPECT_NEAR(r.sol_abs_s, 1.25, 0.25);
  EXPECT_NEAR(r.sol_pp_serial_s, 5.0, 1.0);
  // The same two from the bytes by hand: every byte crosses a NIC (inference on nodes of its own),
  // at the line rate, 50 GB/s a GPU; 4 equal replicas of 32 GPUs; trainer stages of tp8 x dp4 = 32
  // GPUs each, one after another, together sending every byte.
  EXPECT_NEAR(r.sol_abs_s, double(r.bytes_moved) / 4 / (32 * 50e9), 1e-9);
  EXPECT_NEAR(r.sol_pp_serial_s, double(r.bytes_moved) / (32 * 50e9), 1e-9);
}

// Both FP8 modes: FP8 on the wire sends each quantized element as one byte plus its block's
// scale, so Qwen3-235B at the published DP16/EP16 moves about half the bf16 bytes (its
// embedding, lm_head, norms and routers stay bf16); receiver-side quantization moves the
// bf16 bytes. FP8 on the wire without an FP8 target is refused.
TEST(Sim, Fp8OnTheWireMovesAboutHalfTheBytes) {
  ClusterSpec c = dgx_shardsync();
  LayoutFile f = load_layout("qwen3-235b-published");
  f.inference.quant = Quant::kFp8Block128;
  SimCase fp8(f);
  SimCase bf16(load_layout("qwen3-235b-published"));
  for (EngineKind e : {EngineKind::kBroadcast, EngineKind::kV3, EngineKind::kV4}) {
    const SimResult plain = Simulator(bf16.model, bf16.trainer, bf16.inference, bf16.plans, c).run(e);
    const SimResult receiver = Simulator(fp8.model, fp8.trainer, fp8.inference, fp8.plans, c).run(e);
    const SimResult wire = Simulator(fp8.model, fp8.trainer, fp8.inference, fp8.plans, c, sim_bytes(true, false)).run(e);
    EXPECT_EQ(receiver.bytes_moved, plain.bytes_moved) << engine_name(e);
    // Receivers quantize a rank's weights after the last piece: 1.5 bytes per bf16 byte at HBM speed.
    EXPECT_GT(receiver.process_s, plain.process_s) << engine_name(e);
    EXPECT_NEAR(receiver.total_s - plain.total_s, receiver.process_s - plain.process_s, 1e-9) << engine_name(e);
    const double ratio = double(wire.bytes_moved) / double(plain.bytes_moved);
    EXPECT_GT(ratio, 0.50) << engine_name(e);  // codes are half; scales and unquantized tensors add
    EXPECT_LT(ratio, 0.56) << engine_name(e);
    EXPECT_LE(wire.transfer_s, plain.transfer_s) << engine_name(e);
  }
  EXPECT_THROW(Simulator(bf16.model, bf16.trainer, bf16.inference, bf16.plans, c, sim_bytes(true, false)), InputError);
}

TEST(Sim, BytesAreTheEnginesBytes) {
  SimCase s("tiny-qwen3-moe", "tp2,pp2,ep2,etp1", "dp2,ep2", 3);
  ClusterSpec c = dgx_shardsync();
  Simulator sim(s.model, s.trainer, s.inference, s.plans, c);
  int64_t needed = 0;
  for (int r = 0; r < s.inference.world_size(); ++r) needed += s.inference.needed_bytes(r);
  for (const EngineSpec& e : engine_table())
    if (e.delivery == Delivery::kPull) {
      EXPECT_EQ(sim.run(e).bytes_moved, needed) << e.name;
    }
  EXPECT_EQ(sim.run(EngineKind::kBroadcast).bytes_moved, s.model.total_bytes() * s.inference.world_size());
}

TEST(Sim, ModelsEveryRowOfTheEngineTable) {
  // Trainer TP2 against inference TP1: V3 gathers within TP, V4 pulls both shards directly.
  SimCase s("tiny-qwen3-moe", "tp2,pp2,ep2", "tp1", 2);
  Simulator sim(s.model, s.trainer, s.inference, s.plans, dgx_shardsync());
  for (const EngineSpec& e : engine_table()) {
    ASSERT_NE(e.sim, SimModel::kNone) << e.name << " has no schedule model";
    SimResult r = sim.run(e);
    EXPECT_EQ(r.engine, e.name);
    EXPECT_GT(r.total_s, 0) << e.name;
    EXPECT_EQ(r.gather_s == 0, e.source == SourcePolicy::kDirect) << e.name;
  }
  SimResult v3 = sim.run(EngineKind::kV3), v4 = sim.run(EngineKind::kV4);
  EXPECT_LT(v4.trainer_peak_bytes, v3.trainer_peak_bytes);
  EXPECT_LT(v4.total_s, v3.total_s);
}

TEST(Sim, RefusesAnEngineItCannotModelByName) {
  SimCase s("tiny-qwen3", "tp2", "tp1", 1);
  Simulator sim(s.model, s.trainer, s.inference, s.plans, load_cluster("h100-ib400"));
  EngineSpec unmodelled = engine_spec(EngineKind::kV3);
  unmodelled.name = "v9-unmodelled";
  unmodelled.sim = SimModel::kNone;
  try {
    sim.run(unmodelled);
    FAIL() << "an engine row without a schedule model was simulated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("engine v9-unmodelled has no schedule model"), std::string::npos) << e.what();
  }
}

TEST(Sim, SharedLinksSlowTransfersDown) {
  // One trainer GPU serves every replica: twice the replicas, about twice the transfer time.
  ClusterSpec c = load_cluster("h100-ib400");
  c.tensor_us["v3"] = 0;
  c.group_us = 0;
  SimCase one("qwen3-8b", "tp1", "tp1", 1), two("qwen3-8b", "tp1", "tp1", 2);
  double t1 = Simulator(one.model, one.trainer, one.inference, one.plans, c).run(EngineKind::kV3).transfer_s;
  double t2 = Simulator(two.model, two.trainer, two.inference, two.plans, c).run(EngineKind::kV3).transfer_s;
  EXPECT_NEAR(t2 / t1, 2.0, 0.05);
  // Within a node the same bytes move over NVLink, ten times faster here.
  ClusterSpec packed = c;
  packed.separate_nodes = false;
  double tn = Simulator(one.model, one.trainer, one.inference, one.plans, packed).run(EngineKind::kV3).transfer_s;
  EXPECT_NEAR(t1 / tn, c.nvlink_gbps / c.nic_gbps, 0.5);
}

// Trainer PP stages overlap in the schedule exactly when the engine table says the engine serves
// them concurrently (stages_concurrent: no collective spans stages), on the shardsync profile; the
// published stack's profile serves them one after another whatever the row.
TEST(Sim, PipelineStagesOverlapExactlyWhenTheEngineTableSaysSo) {
  SimCase s("qwen3-8b", "tp2,pp2", "tp2", 2);
  for (const char* cluster : {"h200x2-nvlink", "cpu-devvm", "h100-ib400"}) {
    ClusterSpec c = load_cluster(cluster);
    Simulator sim(s.model, s.trainer, s.inference, s.plans, c);
    int overlapping = 0;
    for (const EngineSpec& e : engine_table()) {
      if (!c.has_tensor_cost(e.name)) continue;
      const SimResult r = sim.run(e);
      const bool expect = c.profile == CostProfile::kShardsync && stages_concurrent(e);
      EXPECT_EQ(r.stages_overlap, expect) << cluster << " " << e.name;
      if (r.pulls_overlap_iterator || e.delivery == Delivery::kBroadcast) {
        EXPECT_EQ(r.stage_s.size(), 1u) << cluster << " " << e.name << ": one stream";
        EXPECT_FALSE(r.stages_overlap) << cluster << " " << e.name;
        continue;
      }
      ASSERT_EQ(r.stage_s.size(), 2u) << cluster << " " << e.name;
      const double sum = r.stage_s[0] + r.stage_s[1], most = std::max(r.stage_s[0], r.stage_s[1]);
      ASSERT_GT(std::min(r.stage_s[0], r.stage_s[1]), 0.2 * most) << cluster << " " << e.name << ": two real stages";
      // Stages at once share the inference ranks' links: bounded below by every pull in one phase.
      EXPECT_EQ(r.pulls_together_s > 0, expect) << cluster << " " << e.name;
      EXPECT_NEAR(r.total_s, expect ? std::max(most, r.pulls_together_s) : sum, 1e-12 * sum) << cluster << " " << e.name;
      overlapping += expect;
    }
    // The rows: V2, V3 and V4 serve stages at once (stage-local or direct sources), V1 and the
    // broadcast do not (every trainer rank takes part in every tensor).
    EXPECT_EQ(overlapping, c.profile == CostProfile::kShardsync ? 3 : 0) << cluster;
  }
  // Kimi K2's published topology, stages at once (PP8): the receivers' NICs bound the sync, so V3
  // takes the busiest replica's bytes over its GPUs' effective NIC rate, not a stage's share.
  SimCase k(load_layout("kimi-k2-published"));
  const ClusterSpec dgx = dgx_shardsync();
  const SimResult v3 = Simulator(k.model, k.trainer, k.inference, k.plans, dgx).run(EngineKind::kV3);
  ASSERT_TRUE(v3.stages_overlap);
  EXPECT_GE(v3.total_s, v3.pulls_together_s);
  EXPECT_NEAR(v3.pulls_together_s, v3.sol_abs_s * dgx.nic_raw_gbps / dgx.nic_gbps, 0.02 * v3.sol_abs_s);
  EXPECT_FALSE(stages_concurrent(engine_spec(EngineKind::kV1)));
  EXPECT_FALSE(stages_concurrent(engine_spec(EngineKind::kBroadcast)));
  EXPECT_TRUE(stages_concurrent(engine_spec(EngineKind::kV3)));
}

// The simulator's bytes against real runs: each committed bench result (CPU VM and GPU host, full
// syncs, bf16, every engine of the run) moved per sync exactly the bytes the simulator counts for the
// same model, layouts and engine (bytes_moved of the result is one sync's, summed over ranks).
TEST(Sim, BytesEqualTheBytesRealRunsMoved) {
  ClusterSpec c = load_cluster("cpu-devvm");
  int checked = 0;
  for (const char* run : {"cpu/v4/mini-moe-tp2ep2", "cpu/v4/qwen3-0.6b-tp2-tp1", "gpu/v4/moe-tp2ep2-dp2ep2",
                          "gpu/v4/qwen3-8b-tp2-tp1"}) {
    const std::string path = std::string(SHARDSYNC_SOURCE_DIR) + "/results/" + run + ".json";
    std::ifstream f(path);
    ASSERT_TRUE(f) << path;
    const nlohmann::json j = nlohmann::json::parse(f);
    const nlohmann::json& cfg = j["config"];
    ASSERT_FALSE(cfg.value("delta", false)) << path;
    const std::string inf = cfg["inference"].get<std::string>();
    SimCase s(cfg["model"].get<std::string>().c_str(), cfg["trainer"].get<std::string>().c_str(),
              inf.substr(0, inf.find(' ')).c_str(), cfg["replicas"].get<int>());
    Simulator sim(s.model, s.trainer, s.inference, s.plans, c);
    for (const nlohmann::json& e : j["engines"]) {
      const EngineSpec* spec = find_engine(e["engine"].get<std::string>());
      ASSERT_NE(spec, nullptr);
      const SimResult r = sim.run(*spec);
      EXPECT_EQ(r.bytes_moved, e["bytes_moved"].get<int64_t>()) << run << " " << spec->name;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 14);  // 5 + 5 engines on the CPU VM, 2 + 2 on the GPU host
}

bool is_expert_tensor(TensorKind k) {
  return k == TensorKind::kExpertGate || k == TensorKind::kExpertUp || k == TensorKind::kExpertDown ||
         k == TensorKind::kFusedExpertsGateUp || k == TensorKind::kFusedExpertsDown;
}

// Node-level dedupe against hand arithmetic (issue 21): Qwen3-235B at the published DP16/EP16,
// 8 ranks a node. Each rank needs every non-expert tensor whole (R bytes: attention, norms,
// routers, embedding, head) and 1/16 of the experts (E). Without dedupe a node takes in 8R + E/2;
// with it R + E/2, and its 7 other ranks copy 7R inside the node.
TEST(Sim, DedupeNodeNetworkBytesMatchTheArithmetic) {
  SimCase s(load_layout("qwen3-235b-published"));
  ClusterSpec c = dgx_shardsync();
  int64_t replicated = 0, experts = 0;
  for (const ParamMeta& p : s.model.params()) (is_expert_tensor(p.kind) ? experts : replicated) += p.bytes();
  ASSERT_EQ(experts % 2, 0);
  const SimBytes dedupe = sim_bytes(false, true);
  for (EngineKind e : {EngineKind::kV1, EngineKind::kV2, EngineKind::kV3, EngineKind::kV4}) {
    const SimResult full = Simulator(s.model, s.trainer, s.inference, s.plans, c).run(e);
    const SimResult dd = Simulator(s.model, s.trainer, s.inference, s.plans, c, dedupe).run(e);
    EXPECT_EQ(full.node_ingress_max, 8 * replicated + experts / 2) << engine_name(e);
    EXPECT_EQ(full.bytes_in_node, 0) << engine_name(e);
    EXPECT_EQ(dd.node_ingress_max, replicated + experts / 2) << engine_name(e);
    EXPECT_EQ(dd.bytes_moved, 2 * replicated + experts) << engine_name(e);
    EXPECT_EQ(dd.bytes_in_node, 2 * 7 * replicated) << engine_name(e);
    EXPECT_EQ(dd.bytes_full, dd.bytes_moved) << engine_name(e);
    // Time: the copies inside the nodes are a phase after the pulls (as in the engines: a sharer
    // copies once its puller's sync is complete), so the sync takes at least the pulls' time and
    // that phase; the grouped engines' pulls, whose phases hold many tensors, gain from fewer
    // bytes over each NIC enough to more than pay for it in the transfer time.
    EXPECT_GT(dd.total_s, 0) << engine_name(e);
    if (engine_spec(e).sim == SimModel::kGroupPipeline) {
      EXPECT_LT(dd.transfer_s, full.transfer_s) << engine_name(e);
    }
  }
  // The issue's own figures: 355 GB a node without dedupe, 243 GB with it.
  const double per_node_full = double(8 * replicated + experts / 2) / 1e9, per_node_dd = double(replicated + experts / 2) / 1e9;
  EXPECT_NEAR(per_node_full, 355, 2);
  EXPECT_NEAR(per_node_dd, 243, 2);
  // One rank a node: nothing to share, the same bytes as without dedupe.
  c.gpus_per_node = 1;
  const SimResult one = Simulator(s.model, s.trainer, s.inference, s.plans, c, dedupe).run(EngineKind::kV3);
  EXPECT_EQ(one.bytes_in_node, 0);
  EXPECT_EQ(one.bytes_moved, 16 * replicated + experts);
}

// Dedupe never crosses replicas (plan/dedupe.hpp): 8 replicas of one rank on a node each pull
// the whole model; one replica of 8 DP ranks shares its replicated weights.
TEST(Sim, DedupeNodeSharesWithinAReplicaOnly) {
  ClusterSpec c = load_cluster("h100-ib400");
  SimCase replicas("tiny-qwen3", "tp1", "tp1", 8);
  const SimResult r = Simulator(replicas.model, replicas.trainer, replicas.inference, replicas.plans, c, sim_bytes(false, true))
                          .run(EngineKind::kV3);
  EXPECT_EQ(r.bytes_moved, 8 * replicas.model.total_bytes());
  EXPECT_EQ(r.bytes_in_node, 0);
  SimCase dp("tiny-qwen3-moe", "tp1", "dp8,ep8", 1);
  int64_t replicated = 0, experts = 0;
  for (const ParamMeta& p : dp.model.params()) (is_expert_tensor(p.kind) ? experts : replicated) += p.bytes();
  const SimResult d = Simulator(dp.model, dp.trainer, dp.inference, dp.plans, c, sim_bytes(false, true)).run(EngineKind::kV3);
  EXPECT_EQ(d.bytes_moved, replicated + experts);
  EXPECT_EQ(d.bytes_in_node, 7 * replicated);
}

// The delta model's expected record sizes at the densities the tests and benchmarks use.
TEST(Sim, DeltaRecordModel) {
  UpdateModel none{0.0, false}, uniform{0.02, false}, rows{0.02, true}, every{1.0, false};
  const double b = 1 << 20;
  EXPECT_NEAR(expected_delta_bytes(b, 2, 4096, 4096, none) / b, 4.0 / 2048, 1e-12);      // prefix counts only
  EXPECT_NEAR(expected_delta_bytes(b, 2, 4096, 4096, uniform) / b, 0.0845, 0.0005);    // + every bitmap + 2%
  EXPECT_DOUBLE_EQ(expected_delta_bytes(b, 2, 4096, 4096, every), b);                  // whole
  // Rows: long rows leave most segments unchanged; short runs of many rows touch most of them.
  EXPECT_LT(expected_delta_bytes(b, 2, 4096, 4096, rows), 0.025 * b);
  EXPECT_GT(expected_delta_bytes(b, 2, 8, 4096, rows), expected_delta_bytes(b, 2, 4096, 4096, rows));
  EXPECT_DOUBLE_EQ(expected_delta_bytes(0, 2, 1, 1, uniform), 0);
}

// The model against the engine: the committed delta runs (results/cpu/delta on the CPU VM,
// results/gpu/delta on one H200) moved the bytes the simulator predicts for the same plans and
// update model, within 12%.
TEST(Sim, DeltaBytesMatchTheEnginesMeasuredBytes) {
  ClusterSpec c = load_cluster("cpu-devvm");
  int checked = 0;
  for (const char* run : {"cpu/delta/qwen3-0.6b-tp1x2-delta-1", "cpu/delta/tiny-moe-uniform-delta-1",
                          "cpu/delta/tiny-moe-rows-delta-1", "gpu/delta/qwen3-8b-uniform-delta-1",
                          "gpu/delta/qwen3-8b-rows-delta-1"}) {
    const std::string path = std::string(SHARDSYNC_SOURCE_DIR) + "/results/" + run + ".json";
    std::ifstream f(path);
    ASSERT_TRUE(f) << path;
    const nlohmann::json j = nlohmann::json::parse(f);
    const nlohmann::json& cfg = j["config"];
    ASSERT_TRUE(cfg["delta"].get<bool>()) << path;
    const std::string inf = cfg["inference"].get<std::string>();
    SimCase s(cfg["model"].get<std::string>().c_str(), cfg["trainer"].get<std::string>().c_str(),
              inf.substr(0, inf.find(' ')).c_str(), cfg["replicas"].get<int>());
    SimBytes bytes;
    bytes.delta = true;
    bytes.updates = UpdateModel{cfg["update_density"].get<double>(), cfg["update_pattern"] == "rows"};
    Simulator sim(s.model, s.trainer, s.inference, s.plans, c, bytes);
    for (const nlohmann::json& e : j["engines"]) {
      const EngineSpec* spec = find_engine(e["engine"].get<std::string>());
      ASSERT_NE(spec, nullptr);
      if (spec->delivery != Delivery::kPull) continue;  // broadcast sends every tensor whole
      const SimResult r = sim.run(*spec);
      EXPECT_EQ(r.bytes_full, e["delta"]["full_bytes"].get<int64_t>()) << run << " " << spec->name;
      const double measured = e["bytes_moved"].get<double>();
      EXPECT_NEAR(double(r.bytes_moved) / measured, 1.0, 0.12) << run << " " << spec->name << ": predicted "
                                                               << r.bytes_moved << ", measured " << measured;
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
}

// Delta at density 1 sends everything whole; at density 0 only the index.
TEST(Sim, DeltaAtTheEnds) {
  SimCase s("tiny-qwen3-moe", "tp2,pp2,ep2,etp1", "dp2,ep2", 2);
  ClusterSpec c = load_cluster("h100-ib400");
  const SimBytes every = sim_bytes(false, false, true, UpdateModel{1.0, false}), none = sim_bytes(false, false, true, UpdateModel{0.0, false});
  const SimResult full = Simulator(s.model, s.trainer, s.inference, s.plans, c).run(EngineKind::kV3);
  const SimResult d1 = Simulator(s.model, s.trainer, s.inference, s.plans, c, every).run(EngineKind::kV3);
  const SimResult d0 = Simulator(s.model, s.trainer, s.inference, s.plans, c, none).run(EngineKind::kV3);
  EXPECT_EQ(d1.bytes_moved, full.bytes_moved);
  EXPECT_EQ(d1.bytes_full, full.bytes_moved);
  EXPECT_GT(d1.detect_s, 0);
  EXPECT_NEAR(double(d0.bytes_moved) / double(full.bytes_moved), 4.0 / 2048, 0.001);
  EXPECT_LT(d0.transfer_s, full.transfer_s);
  // FP8 on the wire with delta is not modelled: refused by name.
  EXPECT_THROW(Simulator(s.model, s.trainer, s.inference, s.plans, c, sim_bytes(true, false, true)), InputError);
}

TEST(Sim, BadClusterFilesAreRefused) {
  auto refused = [](const std::string& text, const std::string& expected) {
    try {
      parse_cluster_json(text, "c.json", "c");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  };
  const std::string ok = R"("profile": "shardsync", "costs": {"tensor_us": {"v3": 1}})";
  EXPECT_NO_THROW(parse_cluster_json("{\"gpus_per_node\": 8, " + ok + "}", "c.json", "c"));
  refused("{\"nic_gbps\": 45, " + ok + "}", "c.json: field 'gpus_per_node'");
  refused("{\"gpus_per_node\": 8, \"nic_gbps\": -1, " + ok + "}", "field 'nic_gbps'");
  refused("{\"gpus_per_node\": 8, \"nvlink_gbps\": 0, " + ok + "}", "c.json: field 'nvlink_gbps'");
  refused(R"({"gpus_per_node": 8, "costs": {"tensor_us": {"v3": 1}}})", "field 'profile'");
  refused(R"({"gpus_per_node": 8, "profile": "mine", "costs": {"tensor_us": {"v3": 1}}})", "field 'profile'");
  refused(R"({"gpus_per_node": 8, "profile": "shardsync"})", "field 'costs'");
  refused(R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"tensor_us": {"v3": "x"}}})", "costs.tensor_us.v3");
  refused(R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"tensor_us": {"v9": 1}}})", "costs.tensor_us.v9");
  refused(R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"group_us": -1, "tensor_us": {}}})", "costs.group_us");
  // Fields of the earlier format are refused by name, not silently ignored.
  refused("{\"gpus_per_node\": 8, \"pp_serial\": true, " + ok + "}", "field 'pp_serial'");
  refused("{\"gpus_per_node\": 8, \"v2_overlap\": false, " + ok + "}", "field 'v2_overlap'");
  refused(R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"v3_tensor_us": 1, "tensor_us": {}}})",
          "costs.v3_tensor_us");
  refused("{\"gpus_per_node\": 8, \"fitted_on\": {\"tensor_us.v3\": \"x\"}, " + ok + "}", "fitted_on.tensor_us.v3");
  refused("{\"gpus_per_node\": 8, \"fitted_on\": [\"tensor_us.v3\"], " + ok + "}", "field 'fitted_on'");
  EXPECT_THROW(load_cluster("no-such-cluster"), InputError);
  // An engine the profile has no cost for is refused by name when simulated.
  SimCase s("tiny-qwen3", "tp1", "tp1", 1);
  Simulator sim(s.model, s.trainer, s.inference, s.plans, load_cluster("h100-ib400"));
  try {
    sim.run(EngineKind::kV4);
    ADD_FAILURE() << "v4 simulated on the published profile";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("costs.tensor_us.v4"), std::string::npos) << e.what();
  }
}

// Which rows a cluster file's costs were fitted on: those are fits, every other row a prediction.
TEST(Sim, FittedRowsAreNamedByTheClusterFile) {
  ClusterSpec c = load_cluster("h100-ib400");
  EXPECT_EQ(c.profile, CostProfile::kVllmPublished);
  EXPECT_EQ(c.fitted_terms("qwen3-235b-published v3"), "tensor_us.v3");
  EXPECT_EQ(c.fitted_terms("qwen3-235b-published v2"), "tensor_us.v1, tensor_us.v2");
  EXPECT_EQ(c.fitted_terms("kimi-k2-published v3"), "");
  ClusterSpec two = parse_cluster_json(
      R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"tensor_us": {}},
          "fitted_on": {"a_us": ["s e"], "b_us": ["s e", "t e"]}})",
      "c.json", "c");
  EXPECT_EQ(two.fitted_terms("s e"), "a_us, b_us");
  EXPECT_EQ(two.fitted_terms("t e"), "b_us");
  // --costs: the hardware of one file, the profile and costs of another.
  const ClusterSpec mixed = with_costs_of(c, load_cluster("h200x2-nvlink"));
  EXPECT_EQ(mixed.profile, CostProfile::kShardsync);
  EXPECT_EQ(mixed.nic_gbps, c.nic_gbps);
  EXPECT_EQ(mixed.gpus_per_node, c.gpus_per_node);
  EXPECT_EQ(mixed.tensor_cost_us("v4"), load_cluster("h200x2-nvlink").tensor_cost_us("v4"));
  EXPECT_EQ(mixed.fitted_terms("qwen3-235b-published v3"), "");
}

// A per-byte cost is a slower copy: every pull, gather and copy of that engine at
// 1 / (1 / bandwidth + byte_ps), nothing else; the bytes and the speed of light stay.
TEST(Sim, PerByteCostSlowsTheEnginesCopiesOnly) {
  SimCase s("tiny-qwen3-moe", "tp2,ep2,etp1", "dp2,ep2", 2);
  ClusterSpec c = load_cluster("cpu-devvm");
  const SimResult plain = Simulator(s.model, s.trainer, s.inference, s.plans, c).run(EngineKind::kV3);
  c.byte_ps["v3"] = 500;  // 0.5 ns a byte
  const ClusterSpec seen = c.as_seen_by("v3");
  EXPECT_NEAR(seen.nvlink_gbps, 1.0 / (1.0 / c.nvlink_gbps + 0.5), 1e-9);
  EXPECT_NEAR(seen.hbm_gbps, 1.0 / (1.0 / c.hbm_gbps + 0.5), 1e-9);
  EXPECT_EQ(seen.nic_raw_gbps, c.nic_raw_gbps);
  EXPECT_EQ(c.as_seen_by("v2").nvlink_gbps, c.nvlink_gbps);  // another row: its own (none)
  Simulator sim(s.model, s.trainer, s.inference, s.plans, c);
  const SimResult slow = sim.run(EngineKind::kV3);
  EXPECT_EQ(slow.byte_ps, 500);
  EXPECT_GT(slow.transfer_s, plain.transfer_s * 2);
  EXPECT_GT(slow.total_s, plain.total_s);
  EXPECT_EQ(slow.bytes_moved, plain.bytes_moved);
  EXPECT_DOUBLE_EQ(slow.sol_abs_s, plain.sol_abs_s);
  const SimResult other = sim.run(EngineKind::kV2);
  EXPECT_EQ(other.byte_ps, 0);
  // In a cluster file: costs.byte_ps.<engine>, only for a row with a per-tensor cost.
  const ClusterSpec parsed = parse_cluster_json(
      R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"tensor_us": {"v3": 1}, "byte_ps": {"v3": 7}}})", "c.json", "c");
  EXPECT_EQ(parsed.byte_cost_ps("v3"), 7);
  EXPECT_EQ(parse_cluster_json(cluster_json(parsed), "d.json", "d").byte_cost_ps("v3"), 7);
  try {
    parse_cluster_json(R"({"gpus_per_node": 8, "profile": "shardsync", "costs": {"tensor_us": {"v3": 1}, "byte_ps": {"v2": 7}}})",
                       "c.json", "c");
    ADD_FAILURE() << "a per-byte cost without a per-tensor cost was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("costs.byte_ps.v2"), std::string::npos) << e.what();
  }
}

// The fit inverts the model: times the simulator gives with known per-tensor and per-byte costs,
// on a dense and a MoE setup (other tensors per byte), give those costs back; from one setup
// alone, a per-tensor cost only.
TEST(Sim, CalibrationRecoversTheTermsThatMadeTheTimes) {
  SimCase dense("tiny-qwen3", "tp2", "tp1", 2), moe("tiny-qwen3-moe", "tp2,ep2,etp1", "dp2,ep2", 1);
  auto setup = [](const SimCase& s, const char* name) {
    CalibrationSetup cs;
    cs.setup = name;
    cs.model = &s.model;
    cs.trainer = &s.trainer;
    cs.inference = &s.inference;
    cs.plans = &s.plans;
    return cs;
  };
  CalibrationRun run;
  run.ranks = 4;
  run.link_gbps = 20;
  run.copy_gbps = 40;
  run.provenance = {{"host", "test"}};
  run.setups = {setup(dense, "dense"), setup(moe, "moe")};
  for (auto& cs : run.setups) cs.measured_s = {{"v2", 1.0}, {"v3", 1.0}};
  ClusterSpec truth = calibrate_cluster(run);  // the hardware a calibration builds; costs set below
  const std::map<std::string, std::pair<double, double>> terms{{"v2", {35.0, 250.0}}, {"v3", {80.0, 40.0}}};
  for (const auto& [engine, t] : terms) {
    truth.tensor_us[engine] = t.first;
    truth.byte_ps[engine] = t.second;
  }
  for (auto& cs : run.setups) {
    Simulator sim(*cs.model, *cs.trainer, *cs.inference, *cs.plans, truth);
    for (const auto& [engine, t] : terms) cs.measured_s[engine] = sim.run(*find_engine(engine)).total_s;
  }
  const ClusterSpec fitted = calibrate_cluster(run);
  for (const auto& [engine, t] : terms) {
    EXPECT_NEAR(fitted.tensor_cost_us(engine), t.first, 0.02 * t.first) << engine;
    EXPECT_NEAR(fitted.byte_cost_ps(engine), t.second, 0.02 * t.second) << engine;
    EXPECT_EQ(fitted.fitted_terms("moe " + engine), "byte_ps." + engine + ", tensor_us." + engine);
  }
  run.setups.pop_back();
  const ClusterSpec one = calibrate_cluster(run);
  EXPECT_TRUE(one.byte_ps.empty());
  EXPECT_EQ(one.fitted_terms("dense v3"), "tensor_us.v3");
  Simulator sim(*run.setups[0].model, *run.setups[0].trainer, *run.setups[0].inference, *run.setups[0].plans, one);
  EXPECT_NEAR(sim.run(EngineKind::kV3).total_s, run.setups[0].measured_s.at("v3"), 1e-6);
}

}  // namespace
}  // namespace shardsync
