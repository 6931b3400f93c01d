#include "report/result_reader.hpp"

#include <fstream>

#include "common/error.hpp"
#include "common/json_input.hpp"

namespace shardsync {

namespace {

double number_or(const nlohmann::json& obj, const char* key, double fallback, const std::string& path,
                 const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw InputError(path, field, "expected a number (a field has the wrong type)");
  return it->get<double>();
}

}  // namespace

ResultFile read_result_file(const std::string& path) {
  nlohmann::json j;
  {
    std::ifstream f(path);
    if (!f) throw InputError(path, "(file)", "cannot be read");
    j = nlohmann::json::parse(f, nullptr, false);
    if (j.is_discarded()) throw InputError(path, "(syntax)", "not valid JSON");
  }
  if (!j.is_object() || !j.contains("engines") || !j.contains("config"))
    throw InputError(path, "(top level)",
                     "not a sync/bench result (no engines or config: a simulator, kernel-bench or perf-check file?)");
  try {
    JsonFields top(j, path);
    JsonFields cfg = top.get_object("config");
    ResultFile r;
    r.model = cfg.get_string("model");
    r.trainer = cfg.get_string_or("trainer", "");
    r.inference = cfg.get_string_or("inference", "");
    r.replicas = int(cfg.get_int_or("replicas", 1, 1));
    r.quant = cfg.get_string_or("quant", "none");
    r.ranks = int(cfg.get_int_or("ranks", 0));
    r.bucket_bytes = cfg.get_int_or("bucket_bytes", 0);
    r.wire = cfg.get_string_or("wire", "bf16");
    r.delta = cfg.get_bool_or("delta", false);
    r.update_density = number_or(cfg.raw(), "update_density", 1.0, path, "config.update_density");
    const std::string pattern = cfg.get_string_or("update_pattern", "uniform");
    if (pattern != "uniform" && pattern != "rows")
      cfg.fail("update_pattern", "expected \"uniform\" or \"rows\"");
    r.update_rows = pattern == "rows";
    r.memory = top.get_string_or("memory", "?");
    r.link_gbps = number_or(j, "link_gbps", 0, path, "link_gbps");
    r.copy_gbps = number_or(j, "copy_gbps", 0, path, "copy_gbps");
    r.git_sha = top.get_string_or("git_sha", "");
    r.host = top.get_string_or("host", "");
    r.date_utc = top.get_string_or("date_utc", "");
    if (j.contains("argv") && j["argv"].is_array())
      for (const auto& a : j["argv"])
        if (a.is_string()) r.argv.push_back(a.get<std::string>());
    if (!j["engines"].is_array()) top.fail("engines", "expected the list of engine results");
    for (size_t i = 0; i < j["engines"].size(); ++i) {
      const nlohmann::json& e = j["engines"][i];
      const std::string field = "engines[" + std::to_string(i) + "]";
      if (!e.is_object()) throw InputError(path, field, "expected an object (a field has the wrong type)");
      JsonFields ef(e, path, field + ".");
      EngineResult er;
      er.engine = ef.get_string("engine");
      JsonFields t = ef.get_object("time_s");
      er.time_avg_s = number_or(t.raw(), "avg", 0, path, field + ".time_s.avg");
      er.summary = e;
      r.engines.push_back(std::move(er));
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "(structure)", std::string("a field has the wrong type: ") + e.what());
  }
}

}  // namespace shardsync
