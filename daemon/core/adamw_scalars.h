#ifndef SHARDD_DAEMON_CORE_ADAMW_SCALARS_H_
#define SHARDD_DAEMON_CORE_ADAMW_SCALARS_H_

// No includes: nvcc compiles this header too (daemon/core/cuda).

namespace shardd::core {

// The per-call scalars of one AdamW update, derived in double from the
// hyper-parameters and the step and rounded to float once. Shared with the
// CUDA kernel (daemon/core/cuda) so that both run the same fp32 sequence.
struct AdamWScalars {
  float grad_scale;
  float decay;  // 1 - lr*wd
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float sqrt_bc2;   // sqrt(1 - beta2^t)
  float step_size;  // lr / (1 - beta1^t)
  float eps;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_ADAMW_SCALARS_H_
