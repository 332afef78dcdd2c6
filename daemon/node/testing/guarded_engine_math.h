#ifndef SHARDD_DAEMON_NODE_TESTING_GUARDED_ENGINE_MATH_H_
#define SHARDD_DAEMON_NODE_TESTING_GUARDED_ENGINE_MATH_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/node/engine_math.h"
#include "daemon/node/host_engine_math.h"

namespace shardd::node::testing {

// The EngineMath of a GuardedArena, as a GPU's would be: every
// engine-memory pointer it is given must lie in the arena (a host pointer
// where device memory belongs is INVALID_ARGUMENT, as a GPU kernel given
// one would fault), and it computes through the arena's backing aliases
// with the host kernels. Counts its calls, so tests can see the engine
// used it.
//
// Thread-safe. Shares ownership of the arena.
class GuardedEngineMath : public EngineMath {
 public:
  explicit GuardedEngineMath(
      std::shared_ptr<memory::testing::GuardedArena> arena)
      : arena_(std::move(arena)) {}

  bool device_memory() const override { return true; }
  absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> AllocateScratch(
      absl::string_view name, int64_t bytes) override;
  absl::Status Upload(void* dst, const void* host_src, int64_t bytes) override;
  absl::Status Download(void* host_dst, const void* src,
                        int64_t bytes) override;
  absl::Status Zero(void* dst, int64_t bytes) override;
  absl::Status Accumulate(float* acc, const void* src, core::DType dtype,
                          int64_t n, bool first) override;
  absl::Status AddRounded(void* dst, core::DType dtype, const float* add,
                          int64_t n) override;
  absl::Status ToLowPrecision(const float* in, void* out, core::DType dtype,
                              int64_t n) override;
  absl::Status SquaresInto(const float* grad, int64_t n,
                           core::GradNormPartial* partial) override;
  absl::Status AdamW(const core::AdamW& opt, int64_t step, float grad_scale,
                     const float* grad, float* param, float* exp_avg,
                     float* exp_avg_sq, int64_t n, core::DType lowp_dtype,
                     void* lowp_out) override;
  absl::Status Sgd(const core::Sgd& opt, int64_t step, float grad_scale,
                   const float* grad, float* param, float* momentum, int64_t n,
                   core::DType lowp_dtype, void* lowp_out) override;

  int64_t calls() const { return calls_.load(); }

 private:
  // The alias of device range [p, p + bytes); INVALID_ARGUMENT naming
  // `what` when it is not in the arena. Null stays null when bytes == 0.
  absl::StatusOr<void*> Device(const void* p, int64_t bytes,
                               absl::string_view what);

  const std::shared_ptr<memory::testing::GuardedArena> arena_;
  HostEngineMath host_;
  std::atomic<int64_t> calls_{0};
};

}  // namespace shardd::node::testing

#endif  // SHARDD_DAEMON_NODE_TESTING_GUARDED_ENGINE_MATH_H_
