// Control messages on the wire: a fixed POD header followed by the payload bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/error.hpp"
#include "transport/transport.hpp"

namespace shardsync {

struct WireHeader {
  uint32_t magic;
  uint32_t type;
  int32_t a, b, c;
  uint32_t payload_bytes;
  int64_t x, y, z;
};
inline constexpr uint32_t kWireMagic = 0x53534331;  // "SSC1"
inline constexpr size_t kMaxPayload = size_t(1) << 30;

inline std::vector<uint8_t> encode(const CtrlMsg& m) {
  WireHeader h{kWireMagic, m.type, m.a, m.b, m.c, uint32_t(m.payload.size()), m.x, m.y, m.z};
  std::vector<uint8_t> out(sizeof h + m.payload.size());
  std::memcpy(out.data(), &h, sizeof h);
  if (!m.payload.empty()) std::memcpy(out.data() + sizeof h, m.payload.data(), m.payload.size());
  return out;
}

inline CtrlMsg decode(const uint8_t* data, size_t n, int from) {
  WireHeader h;
  if (n < sizeof h) throw Error("control message of " + std::to_string(n) + " bytes from rank " + std::to_string(from));
  std::memcpy(&h, data, sizeof h);
  if (h.magic != kWireMagic || sizeof h + h.payload_bytes != n)
    throw Error("malformed control message from rank " + std::to_string(from));
  CtrlMsg m;
  m.type = h.type;
  m.from = from;
  m.a = h.a;
  m.b = h.b;
  m.c = h.c;
  m.x = h.x;
  m.y = h.y;
  m.z = h.z;
  m.payload.assign(data + sizeof h, data + n);
  return m;
}

}  // namespace shardsync
