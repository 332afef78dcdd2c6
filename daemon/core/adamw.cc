#include "daemon/core/adamw.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

// Per-call scalars, rounded to float once so every element sees the same.
// Elements per chunk: the low-precision copy of a chunk is written while the
// chunk's parameters are still in L1 (4 KiB per array).
constexpr int64_t kChunk = 1024;

// The hot loop: no branches, restrict pointers, one fixed sequence of fp32
// operations per element (the library is compiled with -ffp-contract=off).
SHARDD_ALWAYS_INLINE void AdamWBody(const AdamWScalars& s,
                                    const float* __restrict grad,
                                    float* __restrict param,
                                    float* __restrict exp_avg,
                                    float* __restrict exp_avg_sq, int64_t n) {
  // Locals, so that the compiler knows that stores cannot change them.
  const float grad_scale = s.grad_scale;
  const float decay = s.decay;
  const float beta1 = s.beta1;
  const float one_minus_beta1 = s.one_minus_beta1;
  const float beta2 = s.beta2;
  const float one_minus_beta2 = s.one_minus_beta2;
  const float sqrt_bc2 = s.sqrt_bc2;
  const float step_size = s.step_size;
  const float eps = s.eps;
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] * grad_scale;
    const float m = beta1 * exp_avg[i] + one_minus_beta1 * g;
    const float v = beta2 * exp_avg_sq[i] + one_minus_beta2 * (g * g);
    const float denom = __builtin_sqrtf(v) / sqrt_bc2 + eps;
    param[i] = param[i] * decay - step_size * (m / denom);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

using AdamWKernel = void (*)(const AdamWScalars&, const float* __restrict,
                             float* __restrict, float* __restrict,
                             float* __restrict, int64_t);

void AdamWBaseline(const AdamWScalars& s, const float* __restrict grad,
                   float* __restrict param, float* __restrict exp_avg,
                   float* __restrict exp_avg_sq, int64_t n) {
  AdamWBody(s, grad, param, exp_avg, exp_avg_sq, n);
}
SHARDD_TARGET_AVX2 void AdamWAvx2(const AdamWScalars& s,
                                  const float* __restrict grad,
                                  float* __restrict param,
                                  float* __restrict exp_avg,
                                  float* __restrict exp_avg_sq, int64_t n) {
  AdamWBody(s, grad, param, exp_avg, exp_avg_sq, n);
}
SHARDD_TARGET_AVX512 void AdamWAvx512(const AdamWScalars& s,
                                      const float* __restrict grad,
                                      float* __restrict param,
                                      float* __restrict exp_avg,
                                      float* __restrict exp_avg_sq, int64_t n) {
  AdamWBody(s, grad, param, exp_avg, exp_avg_sq, n);
}

AdamWKernel SelectKernel(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return AdamWAvx512;
    case KernelIsa::kAvx2:
      return AdamWAvx2;
    default:
      return AdamWBaseline;
  }
}

bool FiniteNonNegative(double x) { return std::isfinite(x) && x >= 0.0; }

absl::Status ValidateLr(double lr) {
  if (!FiniteNonNegative(lr)) {
    return absl::InvalidArgumentError(
        absl::StrCat("adamw.lr must be finite and >= 0 (got ", lr, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AdamW> AdamW::Create(const AdamWOptions& options,
                                    KernelIsa isa) {
  if (absl::Status s = ValidateLr(options.lr); !s.ok()) return s;
  if (!(options.beta1 >= 0.0 && options.beta1 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adamw.beta1 must be in [0, 1) (got ", options.beta1, ")"));
  }
  if (!(options.beta2 >= 0.0 && options.beta2 < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adamw.beta2 must be in [0, 1) (got ", options.beta2, ")"));
  }
  if (!FiniteNonNegative(options.eps)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adamw.eps must be finite and >= 0 (got ", options.eps, ")"));
  }
  if (!FiniteNonNegative(options.weight_decay)) {
    return absl::InvalidArgumentError(
        absl::StrCat("adamw.weight_decay must be finite and >= 0 (got ",
                     options.weight_decay, ")"));
  }
  KernelIsa resolved;
  if (absl::Status s = ResolveKernelIsa(isa, "adamw.isa", &resolved); !s.ok()) {
    return s;
  }
  return AdamW(options, resolved);
}

absl::Status AdamW::set_lr(double lr) {
  if (absl::Status s = ValidateLr(lr); !s.ok()) return s;
  options_.lr = lr;
  return absl::OkStatus();
}

AdamWScalars AdamW::ScalarsFor(int64_t step, float grad_scale) const {
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(options_.beta1, t);
  const double bc2 = 1.0 - std::pow(options_.beta2, t);
  AdamWScalars s;
  s.grad_scale = grad_scale;
  s.decay = static_cast<float>(1.0 - options_.lr * options_.weight_decay);
  s.beta1 = static_cast<float>(options_.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - options_.beta1);
  s.beta2 = static_cast<float>(options_.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - options_.beta2);
  s.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  s.step_size = static_cast<float>(options_.lr / bc1);
  s.eps = static_cast<float>(options_.eps);
  return s;
}

absl::Status AdamW::Update(int64_t step, float grad_scale, const float* grad,
                           float* param_master, float* exp_avg,
                           float* exp_avg_sq, int64_t n, DType lowp_dtype,
                           void* lowp_out) const {
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("adamw step must be >= 1 (got ", step, ")"));
  }
  if (!(std::isfinite(grad_scale) && grad_scale >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adamw grad_scale must be finite and >= 0 (got ", grad_scale, ")"));
  }
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("adamw element count must be >= 0 (got ", n, ")"));
  }
  if (n > 0 && (grad == nullptr || param_master == nullptr ||
                exp_avg == nullptr || exp_avg_sq == nullptr)) {
    return absl::InvalidArgumentError(
        "adamw grad, param_master, exp_avg and exp_avg_sq must not be null");
  }
  if (absl::Status s =
          ValidateLowPrecisionOutput(lowp_dtype, lowp_out, "adamw lowp_dtype");
      !s.ok()) {
    return s;
  }

  const AdamWScalars s = ScalarsFor(step, grad_scale);

  const AdamWKernel kernel = SelectKernel(isa_);
  if (lowp_out == nullptr) {
    kernel(s, grad, param_master, exp_avg, exp_avg_sq, n);
    return absl::OkStatus();
  }
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t len = std::min(kChunk, n - begin);
    kernel(s, grad + begin, param_master + begin, exp_avg + begin,
           exp_avg_sq + begin, len);
    WriteLowPrecisionCopy(isa_, param_master + begin, len, lowp_dtype, lowp_out,
                          begin);
  }
  return absl::OkStatus();
}

}  // namespace shardd::core
