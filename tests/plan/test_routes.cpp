// Routes: every pulled piece comes from a trainer rank that holds those bytes after the
// engine's gather (or, for direct pulls, in its own shard), and the pieces rebuild exactly
// what the reference loaders produce.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "layout/parse.hpp"
#include "plan/box_copy.hpp"
#include "plan/routes.hpp"
#include "tensor/real_tensor.hpp"

namespace shardsync {
namespace {

struct World {
  ModelSpec model;
  TrainerPlacement trainer;
  InferencePlacement inference;
  World(const char* m, const char* t, const char* i, int replicas)
      : model(load_model(m)), trainer(model, parse_trainer_spec(t)), inference(model, [&] {
          InferenceLayout l = parse_inference_spec(i);
          l.replicas = replicas;
          return l;
        }()) {}
};

// The box of `hf` that trainer `rank` holds, stored row-major on its own (what a trainer
// shard is), cut out of the full tensor.
RealTensor shard_of(const RealTensor& full, const ParamMeta& p, const Box& box) {
  SubView v = SubView::contiguous(p.shape);
  for (size_t d = 0; d < p.shape.size(); ++d) v.narrow(int(d), box.start[d], box.length[d]);
  RealTensor out = RealTensor::zeros(p.dtype, box.length);
  execute_copy(make_pack_desc(v, 0), full.storage(), out.storage(), dtype_bytes(p.dtype));
  return out;
}

// `straddling`: how many entries more than one trainer rank serves (parts of each).
void check_routes(const char* m, const char* t, const char* i, SourcePolicy policy, int64_t* straddling = nullptr) {
  SCOPED_TRACE(std::string(m) + " " + t + " -> " + i);
  World s(m, t, i, 2);
  std::vector<RankPlan> plans = record_plans(s.model, s.inference);
  Routes routes = route_plans(s.model, s.trainer, plans, 2, policy);
  // HF data, and the slab each trainer rank serves from.
  std::vector<RealTensor> hf;
  for (int32_t p = 0; p < int32_t(s.model.params().size()); ++p)
    hf.push_back(RealTensor::generate(s.model.param(p).dtype, s.model.param(p).shape,
                                      [p](int64_t e) { return uint64_t(p) * 7919 + uint64_t(e) * 104729 + 1; }));
  int64_t total_bytes = 0;
  std::map<std::pair<int, int32_t>, std::set<int>> servers;  // (local rank, entry) -> trainer ranks
  for (const RankPlan& plan : plans) {
    std::vector<int64_t> pulled(plan.entries.size(), 0);
    std::vector<RealTensor> out;
    for (const auto& ep : plan.params) out.push_back(RealTensor::zeros(ep.dtype, ep.shape));
    for (const Pull& pull : routes.pulls[size_t(plan.local_rank)]) {
      const PlanEntry& e = plan.entries[size_t(pull.entry)];
      int64_t eb = dtype_bytes(s.model.param(e.hf_param).dtype);
      servers[{plan.local_rank, pull.entry}].insert(pull.trainer_rank);
      if (policy == SourcePolicy::kDirect) {
        // The source indexes the serving rank's own shard: serve from that alone.
        std::optional<TrainerShard> held;
        for (const TrainerShard& sh : s.trainer.shards(e.hf_param))
          if (sh.rank == pull.trainer_rank) held = sh;
        ASSERT_TRUE(held) << "rank " << pull.trainer_rank << " holds no shard of " << s.model.param(e.hf_param).name;
        int64_t lo = 0, hi = 0;
        source_range(pull.copy, &lo, &hi);
        EXPECT_EQ(pull.slab_lo, 0);
        ASSERT_TRUE(lo >= 0 && hi <= held->box.numel()) << "pull reads outside the shard of rank " << pull.trainer_rank;
        RealTensor shard = shard_of(hf[size_t(e.hf_param)], s.model.param(e.hf_param), held->box);
        execute_copy(pull.copy, shard.storage(), out[size_t(e.engine_param)].storage(), eb);
        pulled[size_t(pull.entry)] += pull.copy.numel;
        total_bytes += pull.copy.numel * eb;
        continue;
      }
      std::vector<Slab> slabs = source_slabs(s.trainer, e.hf_param, policy);
      int64_t lo = 0, hi = 0;
      source_range(pull.copy, &lo, &hi);
      bool held = false;
      for (const Slab& sl : slabs) held = held || (sl.rank == pull.trainer_rank && sl.lo == pull.slab_lo && lo >= sl.lo && hi <= sl.hi);
      EXPECT_TRUE(held) << "rank " << pull.trainer_rank << " does not hold the bytes of " << s.model.param(e.hf_param).name;
      // Serve from the slab only: shift offsets into the slab's own storage.
      CopyDesc local = pull.copy;
      local.src_offset -= pull.slab_lo;
      execute_copy(local, hf[size_t(e.hf_param)].storage() + pull.slab_lo * eb, out[size_t(e.engine_param)].storage(), eb);
      pulled[size_t(pull.entry)] += pull.copy.numel;
      total_bytes += pull.copy.numel * eb;
    }
    for (size_t k = 0; k < plan.entries.size(); ++k) {
      const PlanEntry& e = plan.entries[k];
      if (e.is_fill()) continue;
      EXPECT_EQ(pulled[k], e.numel()) << "entry " << k;
    }
    // Compare with a straight replay of the plan.
    for (size_t p = 0; p < plan.params.size(); ++p) {
      RealTensor ref = RealTensor::zeros(plan.params[p].dtype, plan.params[p].shape);
      for (const PlanEntry& e : plan.entries)
        if (e.engine_param == int32_t(p) && !e.is_fill())
          replay_entry(e, hf[size_t(e.hf_param)].storage(), ref.storage(), dtype_bytes(plan.params[p].dtype));
      EXPECT_EQ(std::memcmp(ref.storage(), out[p].storage(), size_t(ref.storage_bytes())), 0) << plan.params[p].name;
    }
  }
  int64_t served = 0;
  for (int64_t b : routes.served_bytes) served += b;
  EXPECT_EQ(served, total_bytes * 2);  // two replicas, one route
  if (straddling) {
    *straddling = 0;
    for (const auto& [key, ranks] : servers) *straddling += ranks.size() > 1;
  }
}

TEST(Routes, PiecesComeFromHoldersAndRebuildThePlan) {
  for (SourcePolicy p : {SourcePolicy::kEverywhere, SourcePolicy::kStageLocal, SourcePolicy::kRootOnly}) {
    check_routes("tiny-qwen3-moe", "tp2,pp2,ep2,etp1", "dp2,ep2", p);
    check_routes("tiny-kimi", "tp2,ep4,etp1", "tp2", p);
    check_routes("tiny-llama4", "tp2,ep2,etp1", "tp2", p);   // fused experts split over EP owners
    check_routes("tiny-llama4", "tp2,ep2,etp2", "dp2,ep2", p);
    check_routes("tiny-qwen3", "tp4,pp2", "tp2,pp2", p);
  }
}

TEST(Routes, DirectPullsReadTrainerShardsAndRebuildThePlan) {
  // Every piece straight from a shard that holds it, re-based into that shard's storage.
  check_routes("tiny-qwen3-moe", "tp2,pp2,ep2,etp1", "dp2,ep2", SourcePolicy::kDirect);
  check_routes("tiny-kimi", "tp2,ep4,etp1", "tp2", SourcePolicy::kDirect);
  check_routes("tiny-llama4", "tp2,ep2,etp1", "tp2", SourcePolicy::kDirect);
  check_routes("tiny-llama4", "tp2,ep2,etp2", "dp2,ep2", SourcePolicy::kDirect);
  check_routes("tiny-llama", "tp2,pp3", "tp1", SourcePolicy::kDirect);
  // KV heads replicated across inference TP ranks (2 KV heads, TP4).
  check_routes("tiny-qwen3-moe", "tp2,pp2,ep2", "tp4", SourcePolicy::kDirect);
  // Inference TP1 and TP4 against trainer TP4: whole tensors gathered from four shards.
  int64_t cut = 0;
  check_routes("tiny-qwen3", "tp4,pp2", "tp1", SourcePolicy::kDirect, &cut);
  EXPECT_GT(cut, 0);
  // Trainer TP2 against inference TP3: the middle rank's slices straddle both trainer shards,
  // with an uneven PP split (2/3 layers).
  const std::string uneven = std::string(SHARDSYNC_TEST_INPUTS) + "/models/uneven-qwen3-moe.json";
  check_routes(uneven.c_str(), "tp2,pp2,ep2,layers=2/3", "tp3", SourcePolicy::kDirect, &cut);
  EXPECT_GT(cut, 0) << "no entry was cut between two trainer shards";
}

TEST(BoxCopy, PartsAreCarryFreeAndCoverTheCopyOnce) {
  // Views that loaders make: row and column slices, transposes, a head permutation, a
  // contiguous run starting mid-row that spans rows, of a 3-d tensor.
  const std::vector<int64_t> shape{6, 8, 10};
  std::vector<SubView> views;
  views.push_back(SubView::contiguous(shape));
  SubView v = SubView::contiguous(shape);
  v.narrow(1, 2, 5);
  views.push_back(v);
  v = SubView::contiguous(shape);
  v.transpose(1, 2);
  v.narrow(0, 1, 4);
  views.push_back(v);
  v = SubView::contiguous(shape);
  v.reshape({6, 2, 4, 10});
  v.transpose(1, 2);
  v.reshape({6, 80});
  views.push_back(v);
  v = SubView::contiguous(shape);
  v.reshape({480});
  v.narrow(0, 13, 301);  // mid-row to mid-row
  views.push_back(v);
  for (const SubView& src : views) {
    CopyDesc d = make_copy_desc(src, SubView::contiguous(src.shape()));
    std::map<int64_t, int64_t> want, got;  // dst -> src
    for_each_index(d, [&](int64_t a, int64_t b) { want[b] = a; });
    for (const CoordCopy& c : to_coords(d, shape)) {
      Box b = c.bounds();
      for_each_index(c.flat, [&](int64_t a, int64_t t) {
        EXPECT_TRUE(got.emplace(t, a).second) << "element " << t << " twice";
        int64_t rest = a;
        for (size_t k = shape.size(); k-- > 0;) {  // the element's coordinates lie in the bounds
          int64_t x = rest % shape[k];
          rest /= shape[k];
          EXPECT_TRUE(x >= b.start[k] && x < b.start[k] + b.length[k]) << "dim " << k << " of element " << a;
        }
      });
      // Re-based into its own bounds, the part reads the same elements from that box.
      CopyDesc local = rebase_into(c, b);
      std::vector<int64_t> srcs, local_srcs;
      for_each_index(c.flat, [&](int64_t a, int64_t) { srcs.push_back(a); });
      for_each_index(local, [&](int64_t a, int64_t) { local_srcs.push_back(a); });
      ASSERT_EQ(srcs.size(), local_srcs.size());
      for (size_t n = 0; n < srcs.size(); ++n) {
        int64_t rest = local_srcs[n], global = 0, stride = 1;
        std::vector<int64_t> at(shape.size());
        for (size_t k = shape.size(); k-- > 0;) {
          at[k] = b.start[k] + rest % b.length[k];
          rest /= b.length[k];
        }
        for (size_t k = shape.size(); k-- > 0;) {
          global += at[k] * stride;
          stride *= shape[k];
        }
        EXPECT_EQ(global, srcs[n]);
      }
    }
    EXPECT_EQ(want, got);
  }
}

TEST(Routes, StageLocalPullsExpertsFromTheirOwner) {
  World s("qwen3-235b-a22b", "tp4,pp2,ep8,etp1", "dp16,ep16", 1);
  std::vector<RankPlan> plans;
  plans.push_back(record_rank_plan(s.model, s.inference, 5));  // experts 40..47
  plans.back().local_rank = 0;
  Routes r = route_plans(s.model, s.trainer, plans, 1, SourcePolicy::kStageLocal);
  int experts = 0;
  for (const Pull& pull : r.pulls[0]) {
    const ParamMeta& p = s.model.param(plans[0].entries[size_t(pull.entry)].hf_param);
    if (p.expert >= 0) {
      // Experts 40..47 live on EP rank 2 or 3 (16 per rank) of the layer's stage.
      int stage = s.trainer.stage_of_layer(p.layer);
      EXPECT_EQ(pull.trainer_rank, 8 * stage + p.expert / 16);
      ++experts;
    } else {
      EXPECT_EQ(s.trainer.pp_rank_of(pull.trainer_rank), p.layer < 0 ? s.trainer.pp_rank_of(pull.trainer_rank)
                                                                     : s.trainer.stage_of_layer(p.layer));
    }
  }
  EXPECT_EQ(experts, 94 * 8 * 3);
}

TEST(Routes, LoadIsSpreadOverReplicatedHolders) {
  // Dense model, trainer TP2 x DP4: each tensor piece is on 4+ ranks; 8 consumers pull the whole model.
  World s("tiny-qwen3", "tp2,dp4", "dp8", 1);
  std::vector<RankPlan> plans = record_plans(s.model, s.inference);
  Routes r = route_plans(s.model, s.trainer, plans, 1, SourcePolicy::kStageLocal);
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t b : r.served_bytes) {
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  EXPECT_GT(lo, 0);
  EXPECT_LT(double(hi) / double(lo), 1.25) << "max/min bytes served " << hi << "/" << lo;
}

}  // namespace
}  // namespace shardsync
