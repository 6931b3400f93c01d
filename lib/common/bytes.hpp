// Plain values in and out of byte buffers (message payloads, tables), in the host's layout.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.hpp"

namespace shardsync {

template <class T>
void put_bytes(std::vector<uint8_t>& b, T v) {
  const size_t n = b.size();
  b.resize(n + sizeof v);
  std::memcpy(b.data() + n, &v, sizeof v);
}

// The value at `at` (then past it); Error(truncated) where the buffer ends first.
template <class T>
T take_bytes(const std::vector<uint8_t>& b, size_t& at, const char* truncated) {
  if (at + sizeof(T) > b.size()) throw Error(truncated);
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

}  // namespace shardsync
