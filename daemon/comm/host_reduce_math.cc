#include "daemon/comm/host_reduce_math.h"

namespace shardd::comm {

void WidenToFloat(const void* src, core::DType dtype, float* dst, int64_t n) {
  const uint16_t* in = static_cast<const uint16_t*>(src);
  if (dtype == core::DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = core::BFloat16ToFloat(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = core::HalfToFloat(in[i]);
  }
}

void NarrowFromFloat(const float* src, core::DType dtype, void* dst,
                     int64_t n) {
  uint16_t* out = static_cast<uint16_t*>(dst);
  if (dtype == core::DType::kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = core::FloatToBFloat16(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = core::FloatToHalf(src[i]);
  }
}

// Divides by the group size in fp32 (ReduceOp::kAverage).
void DivideInPlace(float* values, int64_t n, int divisor) {
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0; i < n; ++i) values[i] /= d;
}

void AddTo(float* out, const float* a, const float* b, int64_t n) {
  // Eight loads before eight stores: vectorised at -O2 (SLP) without alias
  // checks, and correct when `out` is `a` or `b`.
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    float t[8];
    for (int j = 0; j < 8; ++j) t[j] = a[i + j] + b[i + j];
    for (int j = 0; j < 8; ++j) out[i + j] = t[j];
  }
  for (; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace shardd::comm
