// Config files embedded into the binary at build time (generated from configs/).
#pragma once

#include <cstddef>

namespace shardsync {

struct BundledFile {
  const char* kind;  // "models" or "layouts"
  const char* name;  // file stem
  const char* text;
};

extern const BundledFile kBundledFiles[];
extern const size_t kNumBundledFiles;

}  // namespace shardsync
