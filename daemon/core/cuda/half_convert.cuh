#ifndef SHARDD_DAEMON_CORE_CUDA_HALF_CONVERT_CUH_
#define SHARDD_DAEMON_CORE_CUDA_HALF_CONVERT_CUH_

// Device-side conversions between fp32 and the 16-bit types, rounding like
// their CPU twins in daemon/core/dtype.h. For .cu files only.
#include <cuda_fp16.h>

#include <cstdint>

namespace shardd::core::cuda {

// The bit-level twin of core::FloatToBFloat16: round to nearest even; NaN
// stays a quiet NaN with its payload.
__device__ __forceinline__ uint16_t FloatToBFloat16Bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

__device__ __forceinline__ float BFloat16BitsToFloat(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// fp16 through the hardware's round-to-nearest-even conversion, as
// core::FloatToHalf. NaN is the exception: the hardware returns one
// canonical NaN, core::FloatToHalf keeps the sign and the top payload bits,
// so that is done here by hand too.
__device__ __forceinline__ uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = __float_as_uint(value);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) {
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u |
                                 ((abs >> 13) & 0x3ffu));
  }
  return __half_as_ushort(__float2half_rn(value));
}

// The hardware conversion is exact for every fp16 that is not a NaN; a NaN
// it quiets (an H200 returned other bits for signalling NaNs than
// core::HalfToFloat, which keeps sign and payload as they are), so NaNs are
// widened by hand.
__device__ __forceinline__ float HalfBitsToFloat(uint16_t bits) {
  if ((bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0) {
    return __uint_as_float((static_cast<uint32_t>(bits & 0x8000u) << 16) |
                           0x7f800000u |
                           (static_cast<uint32_t>(bits & 0x3ffu) << 13));
  }
  return __half2float(__ushort_as_half(bits));
}

}  // namespace shardd::core::cuda

#endif  // SHARDD_DAEMON_CORE_CUDA_HALF_CONVERT_CUH_
