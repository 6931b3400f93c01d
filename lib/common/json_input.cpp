#include "common/json_input.hpp"

#include <fstream>
#include <limits>
#include <sstream>

#include "common/error.hpp"

namespace shardsync {

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(source, "(syntax)",
                     "malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double (1e999)
    throw InputError(source, "(syntax)", std::string("unreadable JSON: ") + e.what());
  }
}

std::string read_text_file(const std::string& path, const std::string& cannot_open) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "(file)", cannot_open);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(path, "(file)", "read error");
  return text.str();
}

nlohmann::json load_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path, "cannot open for reading (missing or unreadable)"), path);
}

JsonFields::JsonFields(const nlohmann::json& obj, std::string source, std::string prefix)
    : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!obj_.is_object()) throw InputError(source_, prefix_.empty() ? "(top level)" : prefix_,
                                          "expected a JSON object, got " + describe(obj_));
}

std::string JsonFields::describe(const nlohmann::json& v) const {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + s;
}

void JsonFields::fail(const std::string& key, const std::string& expected) const {
  throw InputError(source_, "field '" + field(key) + "'", expected);
}

bool JsonFields::has(const std::string& key) const {
  auto it = obj_.find(key);
  return it != obj_.end() && !it->is_null();
}

const nlohmann::json& JsonFields::at(const std::string& key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) fail(key, "required field is missing");
  return *it;
}

int64_t JsonFields::get_int(const std::string& key, int64_t min_value) const {
  const auto& v = at(key);
  if (!v.is_number_integer())
    fail(key, "expected an integer >= " + std::to_string(min_value) + ", got " + describe(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    fail(key, "integer out of range: " + v.dump());
  int64_t x = v.get<int64_t>();
  if (x < min_value)
    fail(key, "expected an integer >= " + std::to_string(min_value) + ", got " + std::to_string(x));
  return x;
}

bool JsonFields::get_bool(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + describe(v));
  return v.get<bool>();
}

std::string JsonFields::get_string(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_string()) fail(key, "expected a string, got " + describe(v));
  return v.get<std::string>();
}

std::vector<int64_t> JsonFields::get_int_list(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_array()) fail(key, "expected a list of integers, got " + describe(v));
  std::vector<int64_t> out;
  for (const auto& x : v) {
    if (!x.is_number_integer()) fail(key, "expected a list of integers, found element " + describe(x));
    out.push_back(x.get<int64_t>());
  }
  return out;
}

JsonFields JsonFields::get_object(const std::string& key) const {
  const auto& v = at(key);
  if (!v.is_object()) fail(key, "expected a JSON object, got " + describe(v));
  return JsonFields(v, source_, prefix_ + key + ".");
}

int64_t JsonFields::get_int_or(const std::string& key, int64_t fallback, int64_t min_value) const {
  return has(key) ? get_int(key, min_value) : fallback;
}
bool JsonFields::get_bool_or(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
std::string JsonFields::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}
std::vector<int64_t> JsonFields::get_int_list_or(const std::string& key,
                                                 std::vector<int64_t> fallback) const {
  return has(key) ? get_int_list(key) : fallback;
}

}  // namespace shardsync
