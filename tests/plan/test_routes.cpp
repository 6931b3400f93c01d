// Routes: every pulled piece comes from a trainer rank that holds those bytes after the
// engine's gather, and the pieces rebuild exactly what the reference loaders produce.
#include <gtest/gtest.h>

#include <cstring>

#include "layout/parse.hpp"
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

void check_routes(const char* m, const char* t, const char* i, SourcePolicy policy) {
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
  for (const RankPlan& plan : plans) {
    std::vector<int64_t> pulled(plan.entries.size(), 0);
    std::vector<RealTensor> out;
    for (const auto& ep : plan.params) out.push_back(RealTensor::zeros(ep.dtype, ep.shape));
    for (const Pull& pull : routes.pulls[size_t(plan.local_rank)]) {
      const PlanEntry& e = plan.entries[size_t(pull.entry)];
      std::vector<Slab> slabs = source_slabs(s.trainer, e.hf_param, policy);
      int64_t lo = 0, hi = 0;
      source_range(pull.copy, &lo, &hi);
      bool held = false;
      for (const Slab& sl : slabs) held = held || (sl.rank == pull.trainer_rank && sl.lo == pull.slab_lo && lo >= sl.lo && hi <= sl.hi);
      EXPECT_TRUE(held) << "rank " << pull.trainer_rank << " does not hold the bytes of " << s.model.param(e.hf_param).name;
      // Serve from the slab only: shift offsets into the slab's own storage.
      int64_t eb = dtype_bytes(s.model.param(e.hf_param).dtype);
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
