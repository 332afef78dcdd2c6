#ifndef SHARDD_DAEMON_CORE_SGD_SCALARS_H_
#define SHARDD_DAEMON_CORE_SGD_SCALARS_H_

// No includes: nvcc compiles this header too (daemon/node/cuda).
namespace shardd::core {

// The per-call scalars of one SGD update, rounded to float once from the
// hyper-parameters. Shared with the CUDA kernel so that both run the same
// fp32 sequence (see Sgd).
struct SgdScalars {
  float grad_scale;
  float lr;
  float weight_decay;
  float momentum;
  float one_minus_dampening;
};

// How the momentum buffer is used in one update.
enum class SgdMomentumMode : int {
  kNone = 0,       // momentum == 0: no buffer.
  kFirstStep = 1,  // step 1: the buffer starts as the gradient.
  kRunning = 2,
};

// Which lines of the update run: a function of the hyper-parameters and the
// step only, never of the data.
struct SgdVariant {
  bool weight_decay;
  SgdMomentumMode mode;
  bool nesterov;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_SGD_SCALARS_H_
