#ifndef SHARDD_DAEMON_CORE_CHECKED_MATH_H_
#define SHARDD_DAEMON_CORE_CHECKED_MATH_H_

#include <cstdint>
#include <optional>

namespace shardd::core {

// Overflow-checked 64-bit arithmetic for sizes that come from the network:
// a shape of huge dims must be rejected, never wrap around.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_CHECKED_MATH_H_
