#include "model/bundled.hpp"

namespace shardsync {

const char* bundled_text(const std::string& kind, const std::string& name) {
  for (size_t i = 0; i < kNumBundledFiles; ++i)
    if (kind == kBundledFiles[i].kind && name == kBundledFiles[i].name) return kBundledFiles[i].text;
  return nullptr;
}

std::vector<std::string> bundled_names(const std::string& kind) {
  std::vector<std::string> names;
  for (size_t i = 0; i < kNumBundledFiles; ++i)
    if (kind == kBundledFiles[i].kind) names.push_back(kBundledFiles[i].name);
  return names;
}

std::string bundled_names_list(const std::string& kind) {
  std::string list;
  for (const std::string& n : bundled_names(kind)) list += (list.empty() ? "" : ", ") + n;
  return list;
}

}  // namespace shardsync
