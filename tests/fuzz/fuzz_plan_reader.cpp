// libFuzzer target: the plan reader below the checksums. The input is the HDF5 part of a plan
// file; the target puts a header before it and reseals it (reseal_plan_file: each rank's content
// hash, then the header's length and checksum of these very bytes), so every mutation reaches
// the HDF5 reading code instead of the checksums' refusal (fuzz_plan_file covers the header and
// the checksum). Any input must be read back as valid plans or refused with an InputError. A
// crash inside libhdf5 itself is reported like any other (scripts/fuzz.sh classes it).
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "plan_fixture.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static shardsync::fuzz::PlanFixture fx("fuzz-plan-reader");
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
