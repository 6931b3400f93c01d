#include "layout/parse.hpp"

#include <cctype>
#include <filesystem>

#include "common/error.hpp"
#include "common/json_input.hpp"
#include "model/bundled.hpp"

namespace shardsync {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == sep) {
      out.push_back(cur);
      cur.clear();
    } else if (!std::isspace(static_cast<unsigned char>(ch))) {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

// Splits "tp4" into ("tp", 4); false if the token is not letters then digits.
bool key_value(const std::string& tok, std::string* key, int64_t* value) {
  size_t i = 0;
  while (i < tok.size() && std::isalpha(static_cast<unsigned char>(tok[i]))) ++i;
  if (i == 0 || i == tok.size() || i + 9 < tok.size()) return false;
  for (size_t j = i; j < tok.size(); ++j)
    if (!std::isdigit(static_cast<unsigned char>(tok[j]))) return false;
  *key = tok.substr(0, i);
  *value = std::stoll(tok.substr(i));
  return true;
}

std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& source) {
  std::vector<int64_t> out;
  for (const auto& part : split(text, '/')) {
    if (part.empty() || part.size() > 9 ||
        part.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(source, "layers=" + text, "expected layer counts per stage like layers=8/8/7");
    out.push_back(std::stoll(part));
  }
  return out;
}

}  // namespace

TrainerLayout parse_trainer_spec(const std::string& spec, const std::string& source) {
  TrainerLayout l;
  l.source = source;
  for (const auto& tok : split(spec, ',')) {
    if (tok.empty()) continue;
    if (tok.rfind("layers=", 0) == 0) {
      l.pp_layers = parse_layer_list(tok.substr(7), source);
      continue;
    }
    std::string k;
    int64_t v = 0;
    if (!key_value(tok, &k, &v) || v < 1)
      throw InputError(source, "'" + tok + "'",
                       "expected tokens like tp4,pp2,ep8,etp1,dp2,layers=a/b or fsdp8,dp2 (each size >= 1)");
    if (k == "tp") l.tp = int(v);
    else if (k == "pp") l.pp = int(v);
    else if (k == "ep") l.ep = int(v);
    else if (k == "etp") l.etp = int(v);
    else if (k == "dp") l.dp = int(v);
    else if (k == "fsdp") l.fsdp = int(v);
    else
      throw InputError(source, "'" + tok + "'", "unknown trainer dimension '" + k +
                                                    "' (expected tp, pp, ep, etp, dp, fsdp, layers=)");
  }
  return l;
}

InferenceLayout parse_inference_spec(const std::string& spec, const std::string& source) {
  InferenceLayout l;
  l.source = source;
  l.replicas = 0;  // "not given": the caller keeps a layout file's value or uses 1
  int64_t ep = 0;
  for (const auto& tok : split(spec, ',')) {
    if (tok.empty()) continue;
    std::string k;
    int64_t v = 0;
    if (!key_value(tok, &k, &v) || v < 1)
      throw InputError(source, "'" + tok + "'", "expected tokens like tp2,dp16,ep16,pp2,replicas4 (each >= 1)");
    if (k == "tp") l.tp = int(v);
    else if (k == "dp") l.dp = int(v);
    else if (k == "pp") l.pp = int(v);
    else if (k == "ep") ep = v;
    else if (k == "replicas" || k == "r") l.replicas = int(v);
    else
      throw InputError(source, "'" + tok + "'", "unknown inference dimension '" + k +
                                                    "' (expected tp, dp, pp, ep, replicas)");
  }
  if (ep > 0) {
    if (ep != int64_t(l.tp) * l.dp)
      throw InputError(source, "ep" + std::to_string(ep),
                       "vLLM's EP size is dp*tp = " + std::to_string(l.tp * l.dp) +
                           "; write ep" + std::to_string(l.tp * l.dp) + " or change dp/tp");
    l.enable_ep = true;
  }
  return l;
}

LayoutFile parse_layout_json(const std::string& text, const std::string& source, const std::string& name) {
  nlohmann::json doc = parse_json_text(text, source);
  JsonFields top(doc, source);
  LayoutFile f;
  f.name = name;
  f.source = source;
  f.model = top.get_string_or("model", "");
  f.description = top.get_string_or("description", "");
  f.world_size = int(top.get_int_or("world_size", 0, 1));
  JsonFields t = top.get_object("trainer");
  f.trainer.source = source + " (trainer)";
  f.trainer.tp = int(t.get_int_or("tp", 1, 1));
  f.trainer.pp = int(t.get_int_or("pp", 1, 1));
  f.trainer.ep = int(t.get_int_or("ep", 1, 1));
  f.trainer.etp = int(t.get_int_or("etp", 0, 1));
  f.trainer.dp = int(t.get_int_or("dp", 0, 1));
  f.trainer.fsdp = int(t.get_int_or("fsdp", 0, 1));
  f.trainer.pp_layers = t.get_int_list_or("layers", {});
  JsonFields i = top.get_object("inference");
  f.inference.source = source + " (inference)";
  f.inference.tp = int(i.get_int_or("tp", 1, 1));
  f.inference.dp = int(i.get_int_or("dp", 1, 1));
  f.inference.pp = int(i.get_int_or("pp", 1, 1));
  f.inference.replicas = int(i.get_int_or("replicas", 1, 1));
  f.inference.shared_experts_tp = i.get_bool_or("shared_experts_tp", false);
  const std::string quant = i.get_string_or("quant", "none");
  if (!parse_quant(quant, &f.inference.quant))
    i.fail("quant", "expected \"none\" or \"fp8-block128\", got \"" + quant + "\"");
  int64_t ep = i.get_int_or("ep", 0, 0);
  if (ep > 0) {
    if (ep != int64_t(f.inference.tp) * f.inference.dp)
      i.fail("ep", "vLLM's EP size is dp*tp = " + std::to_string(f.inference.tp * f.inference.dp) +
                       ", got " + std::to_string(ep));
    f.inference.enable_ep = true;
  }
  for (int v : {f.trainer.tp, f.trainer.pp, f.trainer.ep, f.inference.tp, f.inference.dp, f.inference.pp})
    if (v > (1 << 20)) top.fail("trainer/inference", "parallel sizes above 2^20 are not plausible");
  return f;
}

LayoutFile load_layout(const std::string& name_or_path) {
  if (const char* text = bundled_text("layouts", name_or_path))
    return parse_layout_json(text, "bundled:" + name_or_path, name_or_path);
  if (name_or_path.find('/') == std::string::npos && !name_or_path.ends_with(".json"))
    throw InputError("--layout", name_or_path,
                     "not a bundled layout (" + bundled_names_list("layouts") + ") nor a path to a layout JSON");
  return parse_layout_json(read_text_file(name_or_path, "cannot open layout file for reading"), name_or_path,
                           std::filesystem::path(name_or_path).stem().string());
}

}  // namespace shardsync
