// How the synthetic weights change between versions (`--update-density`, device/synth_hash.hpp):
// a fraction `density` of each tensor's elements (uniform), or of its rows (clustered: every
// element of a row changes together; a 1-D tensor is one row), takes a new value at each
// version, each element (row) once every 1 / density versions at its own random phase. 1:
// every element at every version. Header-only, without MPI: the engines and the simulator
// (its delta model) share it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "device/synth_hash.hpp"

namespace shardsync {

struct UpdateModel {
  double density = 1.0;
  bool clustered = false;
  bool every_element() const { return density >= 1.0; }
  // synth_hash.hpp's threshold for `density`.
  uint32_t change_below() const {
    if (every_element()) return kEveryUnit;
    if (!(density > 0.0)) return 0;
    return uint32_t(std::min<int64_t>(std::llround(std::ldexp(density, 32)), int64_t(kEveryUnit) - 1));
  }
  // "every element changes at every version", "2% of each tensor's rows (clustered) ...".
  std::string describe() const {
    if (every_element()) return "every element changes at every version";
    char b[128];
    std::snprintf(b, sizeof b, "%.4g%% of %s change at each version", 100.0 * density,
                  clustered ? "each tensor's rows (clustered)" : "each tensor's elements (uniform)");
    return b;
  }
};

}  // namespace shardsync
