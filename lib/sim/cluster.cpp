#include "sim/cluster.hpp"

#include <filesystem>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "engine/engine_table.hpp"
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

const char* profile_name(CostProfile p) {
  return p == CostProfile::kVllmPublished ? "vllm-published" : "shardsync";
}

ClusterSpec parse_cluster_json(const std::string& text, const std::string& source, const std::string& name) {
  nlohmann::json doc = parse_json_text(text, source);
  JsonFields f(doc, source);
  ClusterSpec c;
  c.name = name;
  c.source = source;
  c.description = f.get_string_or("description", "");
  const std::string profile = f.get_string("profile");
  if (profile == "shardsync") c.profile = CostProfile::kShardsync;
  else if (profile == "vllm-published") c.profile = CostProfile::kVllmPublished;
  else f.fail("profile", "expected \"shardsync\" (costs measured by shardsync, schedules from the engine table) or "
                         "\"vllm-published\" (costs fitted on the published Python stack's table, its schedules)");
  // Fields of earlier cluster files that are no longer hardware: refused by name.
  for (const char* gone : {"pp_serial", "v2_overlap"})
    if (f.has(gone))
      f.fail(gone, "no longer a cluster field: whether trainer PP stages overlap and whether pulls overlap the "
                   "iterator are the engine table's (profile shardsync) or the published system's (profile "
                   "vllm-published); see docs/simulator.md");
  c.gpus_per_node = int(f.get_int("gpus_per_node", 1));
  if (c.gpus_per_node > 1024) f.fail("gpus_per_node", "expected at most 1024");
  c.nic_gbps = get_positive(f, "nic_gbps", c.nic_gbps);
  c.nic_raw_gbps = get_positive(f, "nic_raw_gbps", c.nic_gbps);
  c.nvlink_gbps = get_positive(f, "nvlink_gbps", c.nvlink_gbps);
  c.hbm_gbps = get_positive(f, "hbm_gbps", c.hbm_gbps);
  c.nic_latency_us = get_nonneg(f, "nic_latency_us", c.nic_latency_us);
  c.nvlink_latency_us = get_nonneg(f, "nvlink_latency_us", c.nvlink_latency_us);
  {
    JsonFields k = f.get_object("costs");
    for (const char* gone : {"broadcast_tensor_us", "iterator_tensor_us", "v3_tensor_us", "v3_group_us"})
      if (k.has(gone)) k.fail(gone, "no longer a cost term: per-tensor costs are costs.tensor_us.<engine>, the "
                                    "per-group cost costs.group_us");
    c.collective_launch_us = get_nonneg(k, "collective_launch_us", c.collective_launch_us);
    c.group_us = get_nonneg(k, "group_us", c.group_us);
    JsonFields t = k.get_object("tensor_us");
    for (auto it = t.raw().begin(); it != t.raw().end(); ++it) {
      if (!find_engine(it.key()))
        t.fail(it.key(), "expected an engine row name (" + engine_list() + ")");
      c.tensor_us[it.key()] = get_nonneg(t, it.key(), 0);
    }
    if (k.has("byte_ps")) {
      JsonFields b = k.get_object("byte_ps");
      for (auto it = b.raw().begin(); it != b.raw().end(); ++it) {
        if (!c.tensor_us.count(it.key()))
          b.fail(it.key(), "expected an engine row with a per-tensor cost (costs.tensor_us." + it.key() + ")");
        c.byte_ps[it.key()] = get_nonneg(b, it.key(), 0);
      }
    }
  }
  c.separate_nodes = f.get_bool_or("separate_nodes", true);
  c.shared_node_bandwidth = f.get_bool_or("shared_node_bandwidth", false);
  auto strings = [&](const char* key, std::map<std::string, std::string>* out) {
    if (!f.has(key)) return;
    const auto& s = doc[key];
    if (!s.is_object()) f.fail(key, "expected an object of field -> text");
    for (auto it = s.begin(); it != s.end(); ++it) (*out)[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  };
  strings("sources", &c.sources);
  strings("provenance", &c.provenance);
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

double ClusterSpec::tensor_cost_us(const std::string& engine) const {
  auto it = tensor_us.find(engine);
  if (it == tensor_us.end())
    throw InputError(source, "costs.tensor_us." + engine,
                     std::string("a per-tensor cost for engine ") + engine + " (profile " + profile_name(profile) +
                         " has none: its costs were " +
                         (profile == CostProfile::kVllmPublished ? "fitted on the published engines only"
                                                                  : "not measured for this engine") + ")");
  return it->second;
}

ClusterSpec with_costs_of(const ClusterSpec& hardware, const ClusterSpec& costs) {
  ClusterSpec c = hardware;
  c.name = hardware.name + " + costs of " + costs.name;
  c.profile = costs.profile;
  c.collective_launch_us = costs.collective_launch_us;
  c.group_us = costs.group_us;
  c.tensor_us = costs.tensor_us;
  c.byte_ps = costs.byte_ps;
  c.fitted_on = costs.fitted_on;
  c.provenance = costs.provenance;
  for (const auto& [field, text] : costs.sources)
    if (field.rfind("tensor_us", 0) == 0 || field.rfind("byte_ps", 0) == 0 || field == "group_us" ||
        field == "collective_launch_us")
      c.sources[field] = text + " (from " + costs.source + ")";
  return c;
}

ClusterSpec ClusterSpec::as_seen_by(const std::string& engine) const {
  ClusterSpec c = *this;
  const double ps = byte_cost_ps(engine);
  if (ps <= 0) return c;
  auto slow = [&](double gbps) { return 1.0 / (1.0 / gbps + ps * 1e-3); };  // s/GB: 1/gbps; ps/B = 1e-3 s/GB
  c.nvlink_gbps = slow(nvlink_gbps);
  c.nic_gbps = slow(nic_gbps);
  c.hbm_gbps = slow(hbm_gbps);
  c.byte_ps.erase(engine);  // applied
  return c;
}

std::string ClusterSpec::fitted_terms(const std::string& row) const {
  std::string out;
  for (const auto& [term, rows] : fitted_on)
    for (const auto& r : rows)
      if (r == row) out += (out.empty() ? "" : ", ") + term;
  return out;
}

std::string cluster_json(const ClusterSpec& c) {
  nlohmann::ordered_json j;
  j["description"] = c.description;
  j["profile"] = profile_name(c.profile);
  j["gpus_per_node"] = c.gpus_per_node;
  j["nic_gbps"] = c.nic_gbps;
  j["nic_raw_gbps"] = c.nic_raw_gbps;
  j["nvlink_gbps"] = c.nvlink_gbps;
  j["hbm_gbps"] = c.hbm_gbps;
  j["nic_latency_us"] = c.nic_latency_us;
  j["nvlink_latency_us"] = c.nvlink_latency_us;
  j["separate_nodes"] = c.separate_nodes;
  j["shared_node_bandwidth"] = c.shared_node_bandwidth;
  j["costs"]["collective_launch_us"] = c.collective_launch_us;
  j["costs"]["group_us"] = c.group_us;
  j["costs"]["tensor_us"] = nlohmann::ordered_json::object();
  for (const auto& [engine, us] : c.tensor_us) j["costs"]["tensor_us"][engine] = us;
  for (const auto& [engine, ps] : c.byte_ps) j["costs"]["byte_ps"][engine] = ps;
  if (!c.fitted_on.empty()) j["fitted_on"] = c.fitted_on;
  j["sources"] = c.sources;
  if (!c.provenance.empty()) j["provenance"] = c.provenance;
  return j.dump(2) + "\n";
}

ClusterSpec load_cluster(const std::string& name_or_path) {
  if (const char* text = bundled_text("clusters", name_or_path))
    return parse_cluster_json(text, "bundled:" + name_or_path, name_or_path);
  return parse_cluster_json(read_text_file(name_or_path, "cannot open cluster file (not a bundled cluster name either)"),
                            name_or_path, std::filesystem::path(name_or_path).stem().string());
}

}  // namespace shardsync
