// FNV-1a 64-bit: a stable content hash for plan files and provenance (not cryptographic).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardsync {

class Fnv1a {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 0x100000001b3ULL;
    }
  }
  void str(std::string_view s) {
    bytes(s.data(), s.size());
    bytes("\0", 1);
  }
  template <class T>
  void pod(const T& v) {
    bytes(&v, sizeof v);
  }
  uint64_t value() const { return h_; }
  std::string hex() const;

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

inline std::string Fnv1a::hex() const {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 0; i < 16; ++i) s[size_t(15 - i)] = d[(h_ >> (4 * i)) & 0xf];
  return s;
}

}  // namespace shardsync
