// libFuzzer target: plan files. Any file must be read back as valid plans or refused with an
// InputError; the checksummed header keeps mutated bytes away from the HDF5 parser.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/error.hpp"
#include "layout/parse.hpp"
#include "plan/store.hpp"

namespace {
struct Fixture {
  shardsync::ModelSpec model = shardsync::load_model("tiny-qwen3-moe");
  shardsync::InferencePlacement inf{model, [] {
                                       auto l = shardsync::parse_inference_spec("dp2,ep2");
                                       l.replicas = 1;
                                       return l;
                                     }()};
  std::string path = "/tmp/shardsync-fuzz-plan-" + std::to_string(getpid()) + ".h5";
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  FILE* f = std::fopen(fx.path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    shardsync::PlanFile p = shardsync::read_plans(fx.path, fx.model, fx.inf);
    (void)p.plans.size();
  } catch (const shardsync::InputError&) {
  }
  return 0;
}
