// libFuzzer target: plan files. Any file must be read back as valid plans or refused with an
// InputError; the checksummed header keeps mutated bytes away from the HDF5 parser.
#include <cstdio>
#include <string>

#include "common/error.hpp"
#include "plan_fixture.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardsync::fuzz::PlanFixture fx("fuzz-plan");
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
