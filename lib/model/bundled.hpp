// Config files embedded into the binary at build time (generated from configs/).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace shardsync {

struct BundledFile {
  const char* kind;  // "models", "layouts" or "clusters"
  const char* name;  // file stem
  const char* text;
};

extern const BundledFile kBundledFiles[];
extern const size_t kNumBundledFiles;

// The embedded file of this kind and name, or nullptr.
const char* bundled_text(const std::string& kind, const std::string& name);
// The names of one kind, in order, and as one "a, b, c" list for messages.
std::vector<std::string> bundled_names(const std::string& kind);
std::string bundled_names_list(const std::string& kind);

}  // namespace shardsync
