// Element types of weights on the wire.
#pragma once

#include <cstdint>
#include <string>

namespace shardsync {

enum class DType : uint8_t { kBF16 = 0, kF16 = 1, kF32 = 2, kF8E4M3 = 3 };

int64_t dtype_bytes(DType t);
const char* dtype_name(DType t);  // "bf16", "f16", "f32", "f8e4m3"
// Accepts our names and HuggingFace torch_dtype names ("bfloat16", "float32", ...).
bool parse_dtype(const std::string& s, DType* out);

}  // namespace shardsync
