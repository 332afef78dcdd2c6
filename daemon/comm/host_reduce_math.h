#ifndef SHARDD_DAEMON_COMM_HOST_REDUCE_MATH_H_
#define SHARDD_DAEMON_COMM_HOST_REDUCE_MATH_H_

#include <cstdint>

#include "daemon/core/dtype.h"

namespace shardd::comm {

// The element arithmetic of host reductions, shared by the host backends
// so that they give the same bits: 16-bit values widened to fp32 (exact)
// and rounded back once (round to nearest even), the average's division by
// the group size in fp32, and the fp32 addition every sum is made of.
void WidenToFloat(const void* src, core::DType dtype, float* dst, int64_t n);
void NarrowFromFloat(const float* src, core::DType dtype, void* dst, int64_t n);
void DivideInPlace(float* values, int64_t n, int divisor);
// out[i] = a[i] + b[i] for i < n, one IEEE fp32 addition each (the same
// bits however it is vectorised); `out` may be `a` or `b`, but may not
// overlap them otherwise.
void AddTo(float* out, const float* a, const float* b, int64_t n);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_HOST_REDUCE_MATH_H_
