// libFuzzer target: config.json and layout JSON parsing. Any input must give a model (or a
// layout) or an InputError naming the file; nothing else (no crash, no other exception).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "layout/parse.hpp"
#include "model/catalog.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    shardsync::ModelSpec m = shardsync::build_model(shardsync::parse_model_config(text, "fuzz.json", "fuzz"));
    (void)m.num_params_total();
  } catch (const shardsync::InputError&) {
  }
  try {
    shardsync::LayoutFile f = shardsync::parse_layout_json(text, "fuzz-layout.json", "fuzz");
    (void)f.trainer.describe();
  } catch (const shardsync::InputError&) {
  }
  return 0;
}
