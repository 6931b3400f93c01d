#include "sim/cluster.hpp"

#include <filesystem>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "model/bundled.hpp"

namespace shardsync {

namespace {

double get_positive(const JsonFields& f, const std::string& key, double fallback) {
  if (!f.has(key)) return fallback;
  const auto& v = f.raw()[key];
  if (!v.is_number()) f.fail(key, "expected a number");
  double x = v.get<double>();
  if (!(x > 0) || x > 1e12) f.fail(key, "expected a positive number, got " + v.dump());
  return x;
}

double get_nonneg(const JsonFields& f, const std::string& key, double fallback) {
  if (!f.has(key)) return fallback;
  const auto& v = f.raw()[key];
  if (!v.is_number()) f.fail(key, "expected a number");
  double x = v.get<double>();
  if (!(x >= 0) || x > 1e12) f.fail(key, "expected a number >= 0, got " + v.dump());
  return x;
}

}  // namespace

ClusterSpec parse_cluster_json(const std::string& text, const std::string& source, const std::string& name) {
  nlohmann::json doc = parse_json_text(text, source);
  JsonFields f(doc, source);
  ClusterSpec c;
  c.name = name;
  c.source = source;
  c.description = f.get_string_or("description", "");
  c.gpus_per_node = int(f.get_int("gpus_per_node", 1));
  if (c.gpus_per_node > 1024) f.fail("gpus_per_node", "expected at most 1024");
  c.nic_gbps = get_positive(f, "nic_gbps", c.nic_gbps);
  c.nic_raw_gbps = get_positive(f, "nic_raw_gbps", c.nic_gbps);
  c.nvlink_gbps = get_positive(f, "nvlink_gbps", c.nvlink_gbps);
  c.hbm_gbps = get_positive(f, "hbm_gbps", c.hbm_gbps);
  c.nic_latency_us = get_nonneg(f, "nic_latency_us", c.nic_latency_us);
  c.nvlink_latency_us = get_nonneg(f, "nvlink_latency_us", c.nvlink_latency_us);
  if (f.has("costs")) {
    JsonFields k = f.get_object("costs");
    c.collective_launch_us = get_nonneg(k, "collective_launch_us", c.collective_launch_us);
    c.broadcast_tensor_us = get_nonneg(k, "broadcast_tensor_us", c.broadcast_tensor_us);
    c.iterator_tensor_us = get_nonneg(k, "iterator_tensor_us", c.iterator_tensor_us);
    c.v3_tensor_us = get_nonneg(k, "v3_tensor_us", c.v3_tensor_us);
    c.v3_group_us = get_nonneg(k, "v3_group_us", c.v3_group_us);
  }
  c.pp_serial = f.get_bool_or("pp_serial", true);
  c.separate_nodes = f.get_bool_or("separate_nodes", true);
  c.v2_overlap = f.get_bool_or("v2_overlap", true);
  if (f.has("sources")) {
    const auto& s = doc["sources"];
    if (!s.is_object()) f.fail("sources", "expected an object of field -> source");
    for (auto it = s.begin(); it != s.end(); ++it) c.sources[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  }
  if (f.has("fitted_on")) {
    const auto& fo = doc["fitted_on"];
    if (!fo.is_object()) f.fail("fitted_on", "expected an object of cost term -> list of \"setup engine\" rows");
    for (auto it = fo.begin(); it != fo.end(); ++it) {
      if (!it.value().is_array()) f.fail("fitted_on." + it.key(), "expected a list of \"setup engine\" strings");
      for (const auto& row : it.value()) {
        if (!row.is_string()) f.fail("fitted_on." + it.key(), "expected a list of \"setup engine\" strings");
        c.fitted_on[it.key()].push_back(row.get<std::string>());
      }
    }
  }
  return c;
}

std::string ClusterSpec::fitted_terms(const std::string& row) const {
  std::string out;
  for (const auto& [term, rows] : fitted_on)
    for (const auto& r : rows)
      if (r == row) out += (out.empty() ? "" : ", ") + term;
  return out;
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  if (const char* text = bundled_text("clusters", name_or_path))
    return parse_cluster_json(text, "bundled:" + name_or_path, name_or_path);
  return parse_cluster_json(read_text_file(name_or_path, "cannot open cluster file (not a bundled cluster name either)"),
                            name_or_path, std::filesystem::path(name_or_path).stem().string());
}

}  // namespace shardsync
