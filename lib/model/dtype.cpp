#include "model/dtype.hpp"

namespace shardsync {

int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF32: return 4;
    case DType::kF8E4M3: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF32: return "f32";
    case DType::kF8E4M3: return "f8e4m3";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "bf16" || s == "bfloat16") *out = DType::kBF16;
  else if (s == "f16" || s == "float16" || s == "half") *out = DType::kF16;
  else if (s == "f32" || s == "float32" || s == "float") *out = DType::kF32;
  else if (s == "f8e4m3" || s == "float8_e4m3fn") *out = DType::kF8E4M3;
  else return false;
  return true;
}

}  // namespace shardsync
