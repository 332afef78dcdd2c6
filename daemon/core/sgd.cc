#include "daemon/core/sgd.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

using MomentumMode = SgdMomentumMode;

constexpr int64_t kChunk = 1024;

// The variant (weight decay or not, momentum mode, Nesterov) is a template
// parameter so that the loop body has no branches and vectorises.
template <bool kWeightDecay, MomentumMode kMode, bool kNesterov>
SHARDD_ALWAYS_INLINE void SgdBody(const SgdScalars& s,
                                  const float* __restrict grad,
                                  float* __restrict param,
                                  float* __restrict buffer, int64_t n) {
  const float grad_scale = s.grad_scale;
  const float lr = s.lr;
  const float weight_decay = s.weight_decay;
  const float momentum = s.momentum;
  const float one_minus_dampening = s.one_minus_dampening;
  for (int64_t i = 0; i < n; ++i) {
    float g = grad[i] * grad_scale;
    if constexpr (kWeightDecay) g = g + weight_decay * param[i];
    if constexpr (kMode != MomentumMode::kNone) {
      float b;
      if constexpr (kMode == MomentumMode::kFirstStep) {
        b = g;
      } else {
        b = momentum * buffer[i] + one_minus_dampening * g;
      }
      buffer[i] = b;
      if constexpr (kNesterov) {
        g = g + momentum * b;
      } else {
        g = b;
      }
    }
    param[i] = param[i] - lr * g;
  }
}

using SgdKernel = void (*)(const SgdScalars&, const float* __restrict,
                           float* __restrict, float* __restrict, int64_t);

template <bool kWeightDecay, MomentumMode kMode, bool kNesterov>
void SgdBaseline(const SgdScalars& s, const float* __restrict grad,
                 float* __restrict param, float* __restrict buffer, int64_t n) {
  SgdBody<kWeightDecay, kMode, kNesterov>(s, grad, param, buffer, n);
}
template <bool kWeightDecay, MomentumMode kMode, bool kNesterov>
SHARDD_TARGET_AVX2 void SgdAvx2(const SgdScalars& s,
                                const float* __restrict grad,
                                float* __restrict param,
                                float* __restrict buffer, int64_t n) {
  SgdBody<kWeightDecay, kMode, kNesterov>(s, grad, param, buffer, n);
}
template <bool kWeightDecay, MomentumMode kMode, bool kNesterov>
SHARDD_TARGET_AVX512 void SgdAvx512(const SgdScalars& s,
                                    const float* __restrict grad,
                                    float* __restrict param,
                                    float* __restrict buffer, int64_t n) {
  SgdBody<kWeightDecay, kMode, kNesterov>(s, grad, param, buffer, n);
}

template <bool kWeightDecay, MomentumMode kMode, bool kNesterov>
SgdKernel SelectForIsa(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return SgdAvx512<kWeightDecay, kMode, kNesterov>;
    case KernelIsa::kAvx2:
      return SgdAvx2<kWeightDecay, kMode, kNesterov>;
    default:
      return SgdBaseline<kWeightDecay, kMode, kNesterov>;
  }
}

template <bool kWeightDecay, MomentumMode kMode>
SgdKernel SelectNesterov(KernelIsa isa, bool nesterov) {
  if constexpr (kMode == MomentumMode::kNone) {
    return SelectForIsa<kWeightDecay, kMode, false>(isa);
  } else {
    return nesterov ? SelectForIsa<kWeightDecay, kMode, true>(isa)
                    : SelectForIsa<kWeightDecay, kMode, false>(isa);
  }
}

template <bool kWeightDecay>
SgdKernel SelectMode(KernelIsa isa, MomentumMode mode, bool nesterov) {
  switch (mode) {
    case MomentumMode::kNone:
      return SelectNesterov<kWeightDecay, MomentumMode::kNone>(isa, nesterov);
    case MomentumMode::kFirstStep:
      return SelectNesterov<kWeightDecay, MomentumMode::kFirstStep>(isa,
                                                                    nesterov);
    case MomentumMode::kRunning:
      break;
  }
  return SelectNesterov<kWeightDecay, MomentumMode::kRunning>(isa, nesterov);
}

absl::Status ValidateLr(double lr) {
  if (!(std::isfinite(lr) && lr >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sgd.lr must be finite and >= 0 (got ", lr, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Sgd> Sgd::Create(const SgdOptions& options, KernelIsa isa) {
  if (absl::Status s = ValidateLr(options.lr); !s.ok()) return s;
  if (!(std::isfinite(options.momentum) && options.momentum >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sgd.momentum must be finite and >= 0 (got ", options.momentum, ")"));
  }
  if (!std::isfinite(options.dampening)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sgd.dampening must be finite (got ", options.dampening, ")"));
  }
  if (!(std::isfinite(options.weight_decay) && options.weight_decay >= 0.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sgd.weight_decay must be finite and >= 0 (got ",
                     options.weight_decay, ")"));
  }
  if (options.nesterov &&
      (options.momentum <= 0.0 || options.dampening != 0.0)) {
    return absl::InvalidArgumentError(
        "sgd.nesterov requires momentum > 0 and dampening = 0");
  }
  KernelIsa resolved;
  if (absl::Status s = ResolveKernelIsa(isa, "sgd.isa", &resolved); !s.ok()) {
    return s;
  }
  return Sgd(options, resolved);
}

SgdScalars Sgd::ScalarsFor(float grad_scale) const {
  SgdScalars s;
  s.grad_scale = grad_scale;
  s.lr = static_cast<float>(options_.lr);
  s.weight_decay = static_cast<float>(options_.weight_decay);
  s.momentum = static_cast<float>(options_.momentum);
  s.one_minus_dampening = static_cast<float>(1.0 - options_.dampening);
  return s;
}

SgdVariant Sgd::VariantFor(int64_t step) const {
  return SgdVariant{options_.weight_decay != 0.0,
                    !has_momentum_buffer() ? MomentumMode::kNone
                    : step == 1            ? MomentumMode::kFirstStep
                                           : MomentumMode::kRunning,
                    options_.nesterov};
}

absl::Status Sgd::set_lr(double lr) {
  if (absl::Status s = ValidateLr(lr); !s.ok()) return s;
  options_.lr = lr;
  return absl::OkStatus();
}

absl::Status Sgd::Update(int64_t step, float grad_scale, const float* grad,
                         float* param_master, float* momentum_buffer, int64_t n,
                         DType lowp_dtype, void* lowp_out) const {
  if (step < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sgd step must be >= 1 (got ", step, ")"));
  }
  if (!(std::isfinite(grad_scale) && grad_scale >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sgd grad_scale must be finite and >= 0 (got ", grad_scale, ")"));
  }
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sgd element count must be >= 0 (got ", n, ")"));
  }
  if (n > 0 && (grad == nullptr || param_master == nullptr)) {
    return absl::InvalidArgumentError(
        "sgd grad and param_master must not be null");
  }
  if (n > 0 && has_momentum_buffer() && momentum_buffer == nullptr) {
    return absl::InvalidArgumentError(
        "sgd momentum_buffer must not be null when sgd.momentum != 0");
  }
  if (absl::Status s =
          ValidateLowPrecisionOutput(lowp_dtype, lowp_out, "sgd lowp_dtype");
      !s.ok()) {
    return s;
  }

  const SgdScalars s = ScalarsFor(grad_scale);
  const SgdVariant variant = VariantFor(step);
  const MomentumMode mode = variant.mode;
  const SgdKernel kernel =
      variant.weight_decay ? SelectMode<true>(isa_, mode, variant.nesterov)
                           : SelectMode<false>(isa_, mode, variant.nesterov);
  float* buffer = mode == MomentumMode::kNone ? nullptr : momentum_buffer;

  if (lowp_out == nullptr) {
    kernel(s, grad, param_master, buffer, n);
    return absl::OkStatus();
  }
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t len = std::min(kChunk, n - begin);
    kernel(s, grad + begin, param_master + begin,
           buffer == nullptr ? nullptr : buffer + begin, len);
    WriteLowPrecisionCopy(isa_, param_master + begin, len, lowp_dtype, lowp_out,
                          begin);
  }
  return absl::OkStatus();
}

}  // namespace shardd::core
