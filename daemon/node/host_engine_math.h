#ifndef SHARDD_DAEMON_NODE_HOST_ENGINE_MATH_H_
#define SHARDD_DAEMON_NODE_HOST_ENGINE_MATH_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/engine_math.h"

namespace shardd::node {

// Engine memory is host memory: the CPU kernels of daemon/core, in place.
// Stateless; one shared instance serves every engine (HostEngineMath::Get).
class HostEngineMath : public EngineMath {
 public:
  static std::shared_ptr<EngineMath> Get();

  bool device_memory() const override { return false; }
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

 private:
  memory::HeapAllocator heap_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_HOST_ENGINE_MATH_H_
