#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>

#include "common/error.hpp"
#include "layout/parse.hpp"
#include "plan/loaders.hpp"
#include "plan/store.hpp"

namespace shardsync {
namespace {

namespace fs = std::filesystem;

struct Fixture {
  ModelSpec model;
  InferencePlacement inf;
  std::vector<RankPlan> plans;
  Fixture(const char* m, const char* spec)
      : model(load_model(m)), inf(model, [&] {
          InferenceLayout l = parse_inference_spec(spec);
          l.replicas = 1;
          return l;
        }()) {
    plans = record_plans(model, inf);
  }
};

std::string temp_path(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("shardsync-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected an InputError containing " << needle;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Plans name the vLLM rules their loaders followed; a run under other rules refuses them.
TEST(PlanStore, RecordsTheVllmRulesAndRefusesOthers) {
  Fixture f("tiny-kimi", "dp2,tp2,ep4");
  const std::string path = temp_path("vllm.h5");
  write_plans(path, f.model, f.inf, f.plans);
  EXPECT_EQ(read_plan_identity(path).vllm, std::string("vLLM ") + kVllmVersion);
  EXPECT_EQ(read_plans(path, f.model, f.inf).plans.size(), 4u);
  InferenceLayout older = f.inf.layout();
  older.shared_experts_tp = true;
  InferencePlacement inf_older(f.model, older);
  expect_error([&] { read_plans(path, f.model, inf_older); }, "attribute 'vllm': recorded following vLLM");
}

TEST(PlanStore, RoundTripIsExact) {
  for (auto [m, spec] : {std::pair{"tiny-llama4", "tp2,ep2"}, {"tiny-kimi", "tp4"}, {"tiny-qwen3", "tp8"},
                         {"tiny-qwen3-moe", "dp3,ep3"}}) {
    Fixture f(m, spec);
    std::string path = temp_path(std::string(m) + ".h5");
    write_plans(path, f.model, f.inf, f.plans);
    PlanFile back = read_plans(path, f.model, f.inf);
    ASSERT_EQ(back.plans.size(), f.plans.size());
    for (size_t r = 0; r < f.plans.size(); ++r) {
      ASSERT_EQ(back.plans[r].entries.size(), f.plans[r].entries.size());
      for (size_t i = 0; i < f.plans[r].entries.size(); ++i) {
        const PlanEntry& a = f.plans[r].entries[i];
        const PlanEntry& b = back.plans[r].entries[i];
        EXPECT_EQ(a.hf_param, b.hf_param);
        EXPECT_EQ(a.engine_param, b.engine_param);
        EXPECT_EQ(a.ops, b.ops);
        EXPECT_EQ(a.dst_offset, b.dst_offset);
        EXPECT_EQ(a.dst_shape, b.dst_shape);
        EXPECT_EQ(a.dst_strides, b.dst_strides);
        EXPECT_EQ(a.copy, b.copy);
      }
    }
  }
}

TEST(PlanStore, DeterministicBytes) {
  Fixture f("tiny-kimi", "tp2,dp2");
  std::string a = temp_path("det-a.h5"), b = temp_path("det-b.h5");
  write_plans(a, f.model, f.inf, f.plans);
  Fixture g("tiny-kimi", "tp2,dp2");
  write_plans(b, g.model, g.inf, g.plans);
  EXPECT_EQ(read_bytes(a), read_bytes(b));
}

TEST(PlanStore, PlansAreReplicaInvariant) {
  ModelSpec m = load_model("tiny-llama4");
  InferenceLayout l = parse_inference_spec("tp2,ep2");
  l.replicas = 3;
  InferencePlacement inf(m, l);
  for (int r = 0; r < 2; ++r) {
    RankPlan a = record_rank_plan(m, inf, r), b = record_rank_plan(m, inf, r + 4);
    ASSERT_EQ(a.entries.size(), b.entries.size());
    for (size_t i = 0; i < a.entries.size(); ++i) EXPECT_EQ(a.entries[i].copy, b.entries[i].copy);
  }
}

TEST(PlanStore, MismatchedModelOrLayoutIsRefused) {
  Fixture f("tiny-qwen3-moe", "dp2,ep2");
  std::string path = temp_path("mismatch.h5");
  write_plans(path, f.model, f.inf, f.plans);
  Fixture other_model("tiny-qwen3", "tp2");
  expect_error([&] { read_plans(path, other_model.model, other_model.inf); }, "recorded for model tiny-qwen3-moe");
  Fixture other_layout("tiny-qwen3-moe", "tp2");
  expect_error([&] { read_plans(path, other_layout.model, other_layout.inf); },
               "recorded for inference layout tp1,dp2,pp1,ep2, but this run uses tp2,dp1,pp1");
}

TEST(PlanStore, TruncatedCorruptedAndMissingFilesAreRefused) {
  Fixture f("tiny-kimi", "tp2");
  std::string path = temp_path("good.h5");
  write_plans(path, f.model, f.inf, f.plans);
  std::string bytes = read_bytes(path);
  std::string bad = temp_path("bad.h5");

  write_bytes(bad, bytes.substr(0, bytes.size() / 2));
  expect_error([&] { read_plans(bad, f.model, f.inf); }, "bad.h5");
  write_bytes(bad, "");
  expect_error([&] { read_plans(bad, f.model, f.inf); }, "not a shardsync plan file");
  expect_error([&] { read_plans(temp_path("none.h5"), f.model, f.inf); }, "does not exist");

  // Flip one byte at many positions: every read either refuses the file with an InputError
  // or (a byte of unused space) returns the original plans. Never a crash or wrong plans.
  int refused = 0, intact = 0;
  for (size_t pos = 0; pos < bytes.size(); pos += 97) {
    std::string c = bytes;
    c[pos] = char(c[pos] ^ 0x5a);
    write_bytes(bad, c);
    try {
      PlanFile back = read_plans(bad, f.model, f.inf);
      for (size_t r = 0; r < f.plans.size(); ++r)
        for (size_t i = 0; i < f.plans[r].entries.size(); ++i)
          ASSERT_EQ(back.plans[r].entries[i].copy, f.plans[r].entries[i].copy) << "byte " << pos;
      ++intact;
    } catch (const InputError&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(refused + intact, 10);
}

TEST(PlanStore, UnwritablePathIsReported) {
  Fixture f("tiny-qwen3", "tp2");
  expect_error([&] { write_plans("/nonexistent-dir/plans.h5", f.model, f.inf, f.plans); }, "/nonexistent-dir/plans.h5");
}

}  // namespace
}  // namespace shardsync
