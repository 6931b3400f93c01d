// Node-level dedupe (plan/dedupe.hpp): the network bytes a node takes in are the bytes of the
// distinct elements its ranks need (computed here element by element from the plans, not from
// the dedupe's own keys), every shared entry is the puller's same bytes at the same place, the
// sharers no longer pull it, and the pulls are spread over the node's ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "layout/parse.hpp"
#include "plan/dedupe.hpp"
#include "plan/routes.hpp"

namespace shardsync {
namespace {

struct Layouts {
  ModelSpec model;
  TrainerPlacement trainer;
  InferencePlacement inference;
  std::vector<RankPlan> plans;
  Layouts(const char* m, const char* t, const char* i)
      : model(load_model(m)), trainer(model, parse_trainer_spec(t)), inference(model, [&] {
          InferenceLayout l = parse_inference_spec(i);
          l.replicas = 1;
          return l;
        }()), plans(record_plans(model, inference)) {}
};

// Per host: the bytes of the distinct (HF tensor, element) pairs its ranks' plans read.
std::map<int, int64_t> distinct_bytes(const Layouts& s, const std::vector<int>& hosts) {
  std::map<int, std::map<int32_t, std::set<int64_t>>> elements;
  for (const RankPlan& p : s.plans)
    for (const PlanEntry& e : p.entries)
      if (!e.is_fill()) for_each_index(e.copy, [&](int64_t src, int64_t) { elements[hosts[size_t(p.local_rank)]][e.hf_param].insert(src); });
  std::map<int, int64_t> out;
  for (const auto& [h, per_tensor] : elements)
    for (const auto& [hf, set] : per_tensor) out[h] += int64_t(set.size()) * dtype_bytes(s.model.param(hf).dtype);
  return out;
}

int64_t route_bytes(const Layouts& s, const Routes& r, int local) {
  int64_t b = 0;
  for (const Pull& pull : r.pulls[size_t(local)])
    b += pull.copy.numel * dtype_bytes(s.model.param(s.plans[size_t(local)].entries[size_t(pull.entry)].hf_param).dtype);
  return b;
}

void check(const char* model, const char* trainer, const char* inference, const std::vector<int>& hosts, SourcePolicy policy,
           bool exact) {
  SCOPED_TRACE(std::string(model) + " " + trainer + " -> " + inference);
  Layouts s(model, trainer, inference);
  ASSERT_EQ(s.plans.size(), hosts.size());
  const Routes before = route_plans(s.model, s.trainer, s.plans, 1, policy);
  Routes r = before;
  const NodeDedupe d = dedupe_node(s.model, s.plans, 1, r, hosts, [](int32_t) { return true; });
  std::map<int, int64_t> network;
  int64_t moved_before = 0, moved_after = 0, copied = 0;
  for (size_t l = 0; l < hosts.size(); ++l) {
    const int L = int(l);
    // The counters are the routes' bytes: what the rank now pulls, and what it copies instead.
    EXPECT_EQ(d.network_bytes[l], route_bytes(s, r, L)) << "local rank " << l;
    network[hosts[l]] += d.network_bytes[l];
    moved_before += route_bytes(s, before, L);
    moved_after += route_bytes(s, r, L);
    copied += d.node_bytes[l];
    std::set<int32_t> still_pulled;
    for (const Pull& p : r.pulls[l]) still_pulled.insert(p.entry);
    for (const Share& sh : d.shares[l]) {
      const PlanEntry& mine = s.plans[l].entries[size_t(sh.entry)];
      const PlanEntry& theirs = s.plans[size_t(sh.from)].entries[size_t(sh.from_entry)];
      EXPECT_NE(sh.from, L);
      EXPECT_EQ(hosts[size_t(sh.from)], hosts[l]) << "a share crosses nodes";
      EXPECT_EQ(mine.hf_param, theirs.hf_param);
      EXPECT_EQ(mine.copy, theirs.copy);
      EXPECT_EQ(s.plans[l].params[size_t(mine.engine_param)].name, s.plans[size_t(sh.from)].params[size_t(theirs.engine_param)].name);
      EXPECT_EQ(s.plans[l].params[size_t(mine.engine_param)].shape, s.plans[size_t(sh.from)].params[size_t(theirs.engine_param)].shape);
      EXPECT_FALSE(still_pulled.count(sh.entry)) << "a sharer still pulls what it copies";
      bool puller_pulls = false;
      for (const Pull& p : r.pulls[size_t(sh.from)]) puller_pulls |= p.entry == sh.from_entry;
      EXPECT_TRUE(puller_pulls) << "the puller does not pull what it shares";
      int64_t runs = 0;
      for (const auto& [off, bytes] : sh.runs) runs += bytes;
      EXPECT_EQ(runs, mine.copy.numel * dtype_bytes(s.plans[l].params[size_t(mine.engine_param)].dtype));
      EXPECT_TRUE(std::count(d.sharers[size_t(sh.from)].begin(), d.sharers[size_t(sh.from)].end(), L));
    }
  }
  // Nothing lost: every byte pulled before is pulled or copied after.
  EXPECT_EQ(moved_after + copied, moved_before);
  const std::map<int, int64_t> distinct = distinct_bytes(s, hosts);
  for (const auto& [h, b] : network) {
    if (exact) EXPECT_EQ(b, distinct.at(h)) << "host " << h;
    else EXPECT_GE(b, distinct.at(h)) << "host " << h;
  }
}

// DP attention with EP: the attention, norms, embedding and head are every rank's; experts are one
// rank's each. Two nodes of two ranks, and one of four.
TEST(Dedupe, DpAttentionTakesEachReplicatedByteOnceANode) {
  for (SourcePolicy p : {SourcePolicy::kEverywhere, SourcePolicy::kStageLocal, SourcePolicy::kDirect}) {
    check("tiny-qwen3-moe", "tp2,ep2", "dp4,ep4", {0, 0, 1, 1}, p, true);
    check("tiny-qwen3-moe", "tp2,ep2", "dp4,ep4", {0, 0, 0, 0}, p, true);
    check("tiny-kimi", "tp2", "dp4,ep4", {0, 0, 0, 0}, p, true);
  }
}

// TP: norms (and the router) are every rank's, and KV heads fewer than TP ranks are replicated:
// those are shared; the TP shards are not.
TEST(Dedupe, TpSharesNormsAndReplicatedKvHeads) {
  check("tiny-qwen3", "tp1", "tp4", {0, 0, 0, 0}, SourcePolicy::kStageLocal, true);
  check("tiny-qwen3-moe", "tp2,pp2,ep2", "tp4", {0, 0, 0, 0}, SourcePolicy::kDirect, true);
  Layouts s("tiny-qwen3", "tp1", "tp4");
  Routes r = route_plans(s.model, s.trainer, s.plans, 1, SourcePolicy::kStageLocal);
  const NodeDedupe d = dedupe_node(s.model, s.plans, 1, r, {0, 0, 0, 0}, [](int32_t) { return true; });
  int64_t kv = 0, norms = 0;
  for (size_t l = 0; l < d.shares.size(); ++l)
    for (const Share& sh : d.shares[l]) {
      const std::string& name = s.model.param(s.plans[l].entries[size_t(sh.entry)].hf_param).name;
      if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) ++kv;
      if (name.find("norm") != std::string::npos) ++norms;
    }
  EXPECT_GT(kv, 0);
  EXPECT_GT(norms, 0);
}

// Nothing shared across nodes, or where no two ranks need the same entry.
TEST(Dedupe, OneRankANodeSharesNothing) {
  Layouts s("tiny-qwen3-moe", "tp2,ep2", "dp4,ep4");
  const Routes before = route_plans(s.model, s.trainer, s.plans, 1, SourcePolicy::kStageLocal);
  Routes r = before;
  const NodeDedupe d = dedupe_node(s.model, s.plans, 1, r, {0, 1, 2, 3}, [](int32_t) { return true; });
  for (size_t l = 0; l < 4; ++l) {
    EXPECT_TRUE(d.shares[l].empty());
    EXPECT_EQ(d.node_bytes[l], 0);
    EXPECT_EQ(r.pulls[l].size(), before.pulls[l].size());
  }
  EXPECT_EQ(r.served_bytes, before.served_bytes);
}

// A tensor that is not shareable (an FP8 target's quantized weights) is pulled by every rank.
TEST(Dedupe, UnshareableTensorsArePulledByEveryRank) {
  Layouts s("tiny-qwen3-moe", "tp2,ep2", "dp4,ep4");
  Routes r = route_plans(s.model, s.trainer, s.plans, 1, SourcePolicy::kStageLocal);
  const NodeDedupe d = dedupe_node(s.model, s.plans, 1, r, {0, 0, 0, 0}, [&](int32_t hf) {
    return s.model.param(hf).name.find("proj") == std::string::npos;
  });
  int shared = 0;
  for (size_t l = 0; l < 4; ++l)
    for (const Share& sh : d.shares[l]) {
      EXPECT_EQ(s.model.param(s.plans[l].entries[size_t(sh.entry)].hf_param).name.find("proj"), std::string::npos);
      ++shared;
    }
  EXPECT_GT(shared, 0);  // norms, embedding, head
}

// Which rank pulls is balanced: eight DP ranks of a node end within one entry of each other.
TEST(Dedupe, PullsSpreadOverTheNodesRanks) {
  Layouts s("tiny-qwen3-moe", "tp1", "dp8,ep8");
  Routes r = route_plans(s.model, s.trainer, s.plans, 1, SourcePolicy::kStageLocal);
  const NodeDedupe d = dedupe_node(s.model, s.plans, 1, r, std::vector<int>(8, 0), [](int32_t) { return true; });
  int64_t largest = 0;
  for (const auto& shares : d.shares)
    for (const Share& sh : shares) largest = std::max(largest, sh.bytes);
  const auto [lo, hi] = std::minmax_element(d.network_bytes.begin(), d.network_bytes.end());
  EXPECT_GT(largest, 0);
  EXPECT_LE(*hi - *lo, largest);
  for (size_t l = 0; l < 8; ++l) EXPECT_FALSE(d.sharers[l].empty()) << "local rank " << l << " pulls nothing shared";
}

// The runs of a place: one for a dense block, one a row for a column slice, none past the limit.
TEST(Dedupe, RunsOfAPlace) {
  CopyDesc dense{0, 128, 64 * 32, {CopyDim{64, 32, 32}, CopyDim{32, 1, 1}}};
  auto runs = dst_runs(dense, 2, kMaxShareRuns);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], std::make_pair(int64_t(256), int64_t(64 * 32 * 2)));
  CopyDesc cols{0, 8, 4 * 16, {CopyDim{4, 16, 64}, CopyDim{16, 1, 1}}};
  runs = dst_runs(cols, 2, kMaxShareRuns);
  ASSERT_EQ(runs.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(runs[size_t(i)], std::make_pair(int64_t((8 + 64 * i) * 2), int64_t(32)));
  CopyDesc many{0, 0, 100 * 2, {CopyDim{100, 2, 64}, CopyDim{2, 1, 1}}};
  EXPECT_TRUE(dst_runs(many, 2, kMaxShareRuns).empty());
  EXPECT_EQ(dst_runs(many, 2, 100).size(), 100u);
}

}  // namespace
}  // namespace shardsync
