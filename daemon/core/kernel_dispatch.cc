#include "daemon/core/kernel_dispatch.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

// bf16 rounding written branch-free (a select) so that it vectorises; the
// result equals FloatToBFloat16 for every input, NaN included.
SHARDD_ALWAYS_INLINE void ToBFloat16Body(const float* __restrict src, int64_t n,
                                         uint16_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (bits >> 16) | 0x0040u;
    const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
    out[i] = static_cast<uint16_t>(is_nan ? quiet_nan : rounded);
  }
}

void ToBFloat16Baseline(const float* __restrict src, int64_t n,
                        uint16_t* __restrict out) {
  ToBFloat16Body(src, n, out);
}
SHARDD_TARGET_AVX2 void ToBFloat16Avx2(const float* __restrict src, int64_t n,
                                       uint16_t* __restrict out) {
  ToBFloat16Body(src, n, out);
}
SHARDD_TARGET_AVX512 void ToBFloat16Avx512(const float* __restrict src,
                                           int64_t n,
                                           uint16_t* __restrict out) {
  ToBFloat16Body(src, n, out);
}

}  // namespace

absl::string_view KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto:
      return "auto";
    case KernelIsa::kBaseline:
      return "baseline";
    case KernelIsa::kAvx2:
      return "avx2";
    case KernelIsa::kAvx512:
      return "avx512";
  }
  return "invalid";
}

bool KernelIsaSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAuto:
    case KernelIsa::kBaseline:
      return true;
    case KernelIsa::kAvx2:
      return __builtin_cpu_supports("avx2");
    case KernelIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

std::vector<KernelIsa> SupportedKernelIsas() {
  std::vector<KernelIsa> out;
  for (KernelIsa isa :
       {KernelIsa::kBaseline, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
    if (KernelIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

absl::Status ResolveKernelIsa(KernelIsa requested, absl::string_view field,
                              KernelIsa* resolved) {
  if (requested == KernelIsa::kAuto) {
    *resolved = SupportedKernelIsas().back();
    return absl::OkStatus();
  }
  if (KernelIsaName(requested) == "invalid") {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is not a valid instruction set (",
                     static_cast<int>(requested), ")"));
  }
  if (!KernelIsaSupported(requested)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", KernelIsaName(requested),
                     " is not supported by this CPU"));
  }
  *resolved = requested;
  return absl::OkStatus();
}

absl::Status ValidateLowPrecisionOutput(DType lowp_dtype, const void* lowp_out,
                                        absl::string_view field) {
  if (lowp_out != nullptr && !IsValidDType(lowp_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " is not a valid dtype (", static_cast<int>(lowp_dtype), ")"));
  }
  return absl::OkStatus();
}

void WriteLowPrecisionCopy(KernelIsa isa, const float* src, int64_t n,
                           DType dtype, void* out, int64_t offset) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(static_cast<float*>(out) + offset, src,
                  static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16: {
      uint16_t* dst = static_cast<uint16_t*>(out) + offset;
      switch (isa) {
        case KernelIsa::kAvx512:
          ToBFloat16Avx512(src, n, dst);
          return;
        case KernelIsa::kAvx2:
          ToBFloat16Avx2(src, n, dst);
          return;
        default:
          ToBFloat16Baseline(src, n, dst);
          return;
      }
    }
    case DType::kFloat16: {
      // Scalar: fp16 copies are rare next to bf16 and FloatToHalf is the
      // reference rounding; the chunk being converted is still in L1.
      uint16_t* dst = static_cast<uint16_t*>(out) + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = FloatToHalf(src[i]);
      return;
    }
  }
}

}  // namespace shardd::core
