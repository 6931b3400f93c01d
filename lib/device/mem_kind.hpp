// Where a buffer lives: a run-time property, so that the engines are one program for host
// memory and GPUs. Transports answer whether they can move each kind.
#pragma once

#include <cstdint>

namespace shardsync {

enum class MemKind : uint8_t { kHost = 0, kCuda = 1 };

}  // namespace shardsync
