#ifndef SHARDD_DAEMON_CORE_SGD_H_
#define SHARDD_DAEMON_CORE_SGD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/dtype.h"
#include "daemon/core/kernel_dispatch.h"
#include "daemon/core/sgd_scalars.h"

namespace shardd::core {

// SGD hyper-parameters (PyTorch's names).
struct SgdOptions {
  double lr = 1e-2;           // Finite, >= 0.
  double momentum = 0.0;      // Finite, >= 0; 0 = no momentum buffer.
  double dampening = 0.0;     // Finite.
  double weight_decay = 0.0;  // Finite, >= 0; L2 (added to the gradient).
  bool nesterov = false;      // Needs momentum > 0 and dampening == 0.
};

// SGD (with optional momentum, dampening, Nesterov and L2 weight decay) on one
// shard of a flat parameter, fp32 master parameters and fp32 momentum buffer,
// with an optional low-precision copy of the updated parameters for the next
// AllGather.
//
// Semantics are PyTorch's torch.optim.SGD (foreach=False), step t >= 1:
//   g = grad * grad_scale
//   g = g + wd*p                          (only when wd != 0)
//   b = g                                 (t == 1: the buffer starts as g)
//   b = mu*b + (1-dampening)*g            (t > 1)
//   g = g + mu*b  (nesterov)  or  g = b   (only when mu != 0)
//   p = p - lr*g
// Which of these lines run depends only on the hyper-parameters and on t,
// never on the data or on where a shard starts, so updating shard by shard
// equals updating the whole tensor bit for bit on every instruction set.
//
// Ownership: Sgd owns only its hyper-parameters and keeps no pointer it is
// given. The caller owns the buffers and the step counter.
// Thread-safety: Update is const and touches only the buffers it is given;
// concurrent calls on disjoint buffers are safe; set_lr must not race with
// Update.
class Sgd {
 public:
  // Validates `options`: INVALID_ARGUMENT naming the field, e.g.
  // "sgd.lr must be finite and >= 0".
  static absl::StatusOr<Sgd> Create(const SgdOptions& options,
                                    KernelIsa isa = KernelIsa::kAuto);

  // Updates n elements in place. `step` is 1-based (after incrementing).
  // momentum_buffer holds n floats and must not be null when momentum != 0
  // (it is ignored, and may be null, when momentum == 0); on step 1 it is
  // overwritten, not read. Buffers must not overlap. lowp_out as in
  // AdamW::Update. Bad arguments are INVALID_ARGUMENT and change nothing.
  absl::Status Update(int64_t step, float grad_scale, const float* grad,
                      float* param_master, float* momentum_buffer, int64_t n,
                      DType lowp_dtype = DType::kBFloat16,
                      void* lowp_out = nullptr) const;

  absl::Status set_lr(double lr);

  // The scalars and the variant Update uses (for the GPU kernel, which
  // runs the same sequence); step >= 1.
  SgdScalars ScalarsFor(float grad_scale) const;
  SgdVariant VariantFor(int64_t step) const;

  const SgdOptions& options() const { return options_; }
  bool has_momentum_buffer() const { return options_.momentum != 0.0; }
  KernelIsa isa() const { return isa_; }

 private:
  Sgd(const SgdOptions& options, KernelIsa isa)
      : options_(options), isa_(isa) {}

  SgdOptions options_;
  KernelIsa isa_;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_SGD_H_
