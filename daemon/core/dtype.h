#ifndef SHARDD_DAEMON_CORE_DTYPE_H_
#define SHARDD_DAEMON_CORE_DTYPE_H_

#include <cstdint>
#include <cstring>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::core {

// Element types a unit's tensors may have. Optimizer state and gradient
// accumulation are always fp32; bf16/fp16 appear as parameter copies produced
// for gathering and as gradient reduce dtypes.
enum class DType : int {
  kFloat32 = 1,
  kBFloat16 = 2,
  kFloat16 = 3,
};

// Bytes per element.
constexpr int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

// True for the values of DType above (an int cast from the wire may not be).
constexpr bool IsValidDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat16;
}

// "fp32", "bf16", "fp16".
absl::string_view DTypeName(DType dtype);

// Parses "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16"; anything
// else is INVALID_ARGUMENT naming the text.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// IEEE binary32 -> bfloat16 with round-to-nearest-even; NaN stays NaN (quiet).
inline uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float BFloat16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// IEEE binary32 -> binary16 with round-to-nearest-even, subnormals, overflow
// to infinity and quiet NaN, as the hardware conversion instructions do.
uint16_t FloatToHalf(float value);

float HalfToFloat(uint16_t value);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_DTYPE_H_
