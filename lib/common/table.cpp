#include "common/table.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>

#include "common/error.hpp"

namespace shardsync {

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != columns_.size())
    throw Error("table row has " + std::to_string(cells.size()) + " cells, expected " +
                std::to_string(columns_.size()));
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& os) const {
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    width[c] = std::max(columns_[c].name.size(), columns_[c].unit.size());
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string s = header ? "#" : " ";
    for (size_t c = 0; c < cells.size(); ++c) {
      s += ' ';
      const std::string& v = cells[c];
      std::string pad(width[c] - std::min(width[c], v.size()), ' ');
      s += columns_[c].left ? v + pad : pad + v;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    os << s << '\n';
  };
  for (const auto& t : titles_) os << "# " << t << '\n';
  std::vector<std::string> names, units;
  bool any_unit = false;
  for (const auto& c : columns_) {
    names.push_back(c.name);
    units.push_back(c.unit);
    any_unit = any_unit || !c.unit.empty();
  }
  line(names, true);
  if (any_unit) line(units, true);
  for (const auto& r : rows_) line(r, false);
}

std::string fmt_int(int64_t v) { return std::to_string(v); }

std::string fmt_grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string fmt_fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string fmt_gb(int64_t bytes, int decimals) { return fmt_fixed(double(bytes) / 1e9, decimals); }

std::string fmt_human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? std::to_string(bytes) + " B" : fmt_fixed(v, 2) + " " + units[u];
}

std::string fmt_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace shardsync
