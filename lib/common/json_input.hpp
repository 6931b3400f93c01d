// Reading JSON input files with errors that name the file, the field and the expectation.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace shardsync {

// The whole file; throws InputError(path, "(file)", cannot_open) when it cannot be opened.
std::string read_text_file(const std::string& path, const std::string& cannot_open);
// Parses a JSON file; throws InputError naming the file on a missing file or bad syntax.
nlohmann::json load_json_file(const std::string& path);
nlohmann::json parse_json_text(const std::string& text, const std::string& source);

// A JSON object plus the name of the file it came from, with typed field access.
class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string source, std::string prefix = "");

  bool has(const std::string& key) const;
  // Required fields: throw InputError if missing or of the wrong type or out of range.
  int64_t get_int(const std::string& key, int64_t min_value = 1) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  JsonFields get_object(const std::string& key) const;
  // Optional fields: the default when absent or JSON null, an error when of the wrong type.
  int64_t get_int_or(const std::string& key, int64_t fallback, int64_t min_value = 0) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> get_int_list_or(const std::string& key, std::vector<int64_t> fallback) const;

  const nlohmann::json& raw() const { return obj_; }
  const std::string& source() const { return source_; }
  std::string field(const std::string& key) const { return prefix_ + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;

 private:
  const nlohmann::json& at(const std::string& key) const;
  std::string describe(const nlohmann::json& v) const;

  const nlohmann::json& obj_;
  std::string source_;
  std::string prefix_;
};

}  // namespace shardsync
