#ifndef SHARDD_DAEMON_CORE_ADAMW_H_
#define SHARDD_DAEMON_CORE_ADAMW_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/adamw_scalars.h"
#include "daemon/core/dtype.h"
#include "daemon/core/kernel_dispatch.h"

namespace shardd::core {

// AdamW hyper-parameters (PyTorch's names and defaults). Doubles, as in
// PyTorch: the per-call scalars are derived in double and rounded to float
// once, so the per-element arithmetic is pure fp32.
struct AdamWOptions {
  double lr = 1e-3;            // Finite, >= 0.
  double beta1 = 0.9;          // In [0, 1).
  double beta2 = 0.999;        // In [0, 1).
  double eps = 1e-8;           // Finite, >= 0.
  double weight_decay = 1e-2;  // Finite, >= 0; decoupled (AdamW, not L2).
};

// AdamW on one shard of a flat parameter: fp32 master parameters and fp32
// optimizer state (exp_avg, exp_avg_sq), with an optional low-precision copy
// of the updated parameters written for the next AllGather.
//
// Semantics are PyTorch's torch.optim.AdamW (foreach=False), step t >= 1:
//   g  = grad * grad_scale                     (clip scale; 1 = none)
//   p  = p * (1 - lr*wd)                       (decoupled weight decay)
//   m  = b1*m + (1-b1)*g
//   v  = b2*v + (1-b2)*(g*g)
//   p  = p - (lr/bc1) * (m / (sqrt(v)/sqrt(bc2) + eps))
// with bc1 = 1 - b1^t and bc2 = 1 - b2^t computed in double once per call.
// Each element goes through the same fixed sequence of fp32 operations, so
// updating a tensor shard by shard equals updating it whole, bit for bit, and
// every instruction-set path (see kernel_dispatch.h) gives the same bits.
//
// Ownership: AdamW owns only its hyper-parameters; it never keeps a pointer it
// is given. The caller owns the shard buffers and the step counter.
// Thread-safety: Update is const and touches only the buffers it is given, so
// concurrent calls on disjoint buffers are safe; set_lr must not race with
// Update.
class AdamW {
 public:
  // Validates `options`; errors are INVALID_ARGUMENT naming the field, e.g.
  // "adamw.beta1 must be in [0, 1)". `isa` picks the kernel's instruction set
  // (kAuto: the best this CPU has; tests force the others to compare them).
  static absl::StatusOr<AdamW> Create(const AdamWOptions& options,
                                      KernelIsa isa = KernelIsa::kAuto);

  // Updates n elements of one shard in place. `step` is the 1-based step
  // number of this update (after incrementing the counter). grad_scale must
  // be finite and >= 0. grad, param_master, exp_avg and exp_avg_sq hold n
  // floats each and must not overlap (they may be null when n == 0). When
  // lowp_out is not null, lowp_out[0, n) receives the updated parameters
  // converted to lowp_dtype (fp32: copied; bf16/fp16: round to nearest even,
  // as FloatToBFloat16 / FloatToHalf); it must not overlap the other buffers.
  // Bad arguments are INVALID_ARGUMENT and change nothing.
  absl::Status Update(int64_t step, float grad_scale, const float* grad,
                      float* param_master, float* exp_avg, float* exp_avg_sq,
                      int64_t n, DType lowp_dtype = DType::kBFloat16,
                      void* lowp_out = nullptr) const;

  // The scalars Update uses for (step, grad_scale); step >= 1.
  AdamWScalars ScalarsFor(int64_t step, float grad_scale) const;

  // Learning-rate schedules change lr between steps. Same rule as Create.
  absl::Status set_lr(double lr);

  const AdamWOptions& options() const { return options_; }
  KernelIsa isa() const { return isa_; }

 private:
  AdamW(const AdamWOptions& options, KernelIsa isa)
      : options_(options), isa_(isa) {}

  AdamWOptions options_;
  KernelIsa isa_;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_ADAMW_H_
