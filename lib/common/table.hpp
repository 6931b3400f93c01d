// Fixed-width tables in the nccl-tests manner: '#'-prefixed title, header and units lines,
// then data rows that parse directly (whitespace-separated, no thousands separators).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace shardsync {

struct Column {
  std::string name;
  std::string unit;  // printed on the units row; "" for none
  bool left = false; // left-align (names); numbers align right
};

class Table {
 public:
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells);
  void add_title(std::string line) { titles_.push_back(std::move(line)); }
  void print(std::ostream& os) const;
  size_t num_rows() const { return rows_.size(); }

 private:
  std::vector<Column> columns_;
  std::vector<std::string> titles_;
  std::vector<std::vector<std::string>> rows_;
};

// Formatting helpers for table cells and human text.
std::string fmt_int(int64_t v);                      // 1234567 -> "1234567"
std::string fmt_grouped(int64_t v);                  // 1234567 -> "1,234,567" (prose only)
std::string fmt_fixed(double v, int decimals);       // 3.14159, 2 -> "3.14"
std::string fmt_gb(int64_t bytes, int decimals = 3); // bytes -> decimal GB
std::string fmt_human_bytes(int64_t bytes);          // "1.50 GiB"
std::string fmt_shape(const std::vector<int64_t>& shape);  // "[128,4096]"

}  // namespace shardsync
