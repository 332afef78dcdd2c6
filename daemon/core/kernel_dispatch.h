#ifndef SHARDD_DAEMON_CORE_KERNEL_DISPATCH_H_
#define SHARDD_DAEMON_CORE_KERNEL_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/core/dtype.h"

// Runtime instruction-set dispatch for the element-wise optimizer kernels.
//
// Each kernel body is written once as an always-inline loop and compiled into
// one function per instruction set below (SHARDD_TARGET_*). The libraries that
// use this are compiled with -ffp-contract=off and -fno-math-errno: every
// path then performs the same correctly rounded IEEE operations (+, -, *, /,
// sqrt) in the same order, so the results are bit-identical whichever path
// runs, and whichever element a shard starts at. Dispatch only changes the
// vector width.

// Forces a kernel body to be inlined into each per-instruction-set wrapper
// (inlining a generic function into a target-specific caller is allowed).
#define SHARDD_ALWAYS_INLINE inline __attribute__((always_inline))
#define SHARDD_TARGET_AVX2 __attribute__((target("avx2")))
// 512-bit vectors: GCC's generic tuning would otherwise stay at 256 bits.
#define SHARDD_TARGET_AVX512                       \
  __attribute__((                                  \
      target("avx512f,avx512vl,avx512bw,avx512dq," \
             "prefer-vector-width=512")))

namespace shardd::core {

// The instruction sets a kernel is compiled for.
enum class KernelIsa : int {
  kAuto = 0,  // The best one the CPU supports (resolved by ResolveKernelIsa).
  kBaseline = 1,  // x86-64 SSE2 (or whatever the toolchain's default is).
  kAvx2 = 2,
  kAvx512 = 3,
};

// "auto", "baseline", "avx2", "avx512".
absl::string_view KernelIsaName(KernelIsa isa);

// True when this CPU can run kernels compiled for `isa` (kAuto: always).
bool KernelIsaSupported(KernelIsa isa);

// Every concrete instruction set this CPU supports, baseline first.
std::vector<KernelIsa> SupportedKernelIsas();

// kAuto -> the best supported one; a concrete, supported isa -> itself; an
// unsupported or invalid one -> INVALID_ARGUMENT naming it (`field` names the
// caller's option, e.g. "adamw.isa").
absl::Status ResolveKernelIsa(KernelIsa requested, absl::string_view field,
                              KernelIsa* resolved);

// Validates the (lowp_dtype, lowp_out) pair the optimizers accept: lowp_out
// may be null (no copy wanted); otherwise lowp_dtype must be a valid DType.
absl::Status ValidateLowPrecisionOutput(DType lowp_dtype, const void* lowp_out,
                                        absl::string_view field);

// Writes out[offset + i] = convert(src[i]) for i in [0, n), where out holds
// elements of `dtype` (fp32: a copy; bf16: FloatToBFloat16; fp16:
// FloatToHalf). `isa` must be concrete and supported. No validation: callers
// validate first.
void WriteLowPrecisionCopy(KernelIsa isa, const float* src, int64_t n,
                           DType dtype, void* out, int64_t offset);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_KERNEL_DISPATCH_H_
