// The plan fuzzers' fixture: the model and inference layout every input is read against
// (tiny-qwen3-moe at DP2/EP2, the seed corpus's), and a scratch file of this process.
#pragma once

#include <unistd.h>

#include <string>

#include "layout/parse.hpp"
#include "plan/store.hpp"

namespace shardsync::fuzz {

struct PlanFixture {
  ModelSpec model = load_model("tiny-qwen3-moe");
  InferencePlacement inf{model, [] {
                           auto l = parse_inference_spec("dp2,ep2");
                           l.replicas = 1;
                           return l;
                         }()};
  std::string path;
  explicit PlanFixture(const char* name) : path("/tmp/shardsync-" + std::string(name) + "-" + std::to_string(getpid()) + ".h5") {}
};

}  // namespace shardsync::fuzz
