#ifndef SHARDD_DAEMON_COMM_HOST_REDUCE_MATH_H_
#define SHARDD_DAEMON_COMM_HOST_REDUCE_MATH_H_

#include <cstdint>

#include "daemon/core/dtype.h"

namespace shardd::comm {

// The element arithmetic of host reductions, shared by the host backends
// so that they give the same bits: 16-bit values widened to fp32 (exact)
// and rounded back once (round to nearest even), and the average's
// division by the group size in fp32.
void WidenToFloat(const void* src, core::DType dtype, float* dst, int64_t n);
void NarrowFromFloat(const float* src, core::DType dtype, void* dst, int64_t n);
void DivideInPlace(float* values, int64_t n, int divisor);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_HOST_REDUCE_MATH_H_
