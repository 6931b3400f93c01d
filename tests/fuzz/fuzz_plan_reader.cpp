// libFuzzer target: the plan reader below the checksum. The input is the HDF5 part of a plan
// file; the target puts a header before it and seals it (reseal_plan_file: the length and
// checksum of these very bytes), so every mutation reaches the HDF5 reading code instead of
// being refused by the checksum (fuzz_plan_file covers the header and the checksum). Any input
// must be read back as valid plans or refused with an InputError. A crash inside libhdf5 itself
// is reported by the fuzzer like any other (make fuzz-long's summary names it).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

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
  std::string path = "/tmp/shardsync-fuzz-plan-reader-" + std::to_string(getpid()) + ".h5";
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  FILE* f = std::fopen(fx.path.c_str(), "wb");
  if (!f) return 0;
  const std::vector<char> header(size_t(shardsync::kPlanHeaderBytes), ' ');
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    shardsync::reseal_plan_file(fx.path);
    shardsync::PlanFile p = shardsync::read_plans(fx.path, fx.model, fx.inf);
    (void)p.plans.size();
  } catch (const shardsync::InputError&) {
  }
  return 0;
}
