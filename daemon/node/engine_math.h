#ifndef SHARDD_DAEMON_NODE_ENGINE_MATH_H_
#define SHARDD_DAEMON_NODE_ENGINE_MATH_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/adamw.h"
#include "daemon/core/dtype.h"
#include "daemon/core/grad_clip.h"
#include "daemon/core/sgd.h"
#include "daemon/memory/byte_buffer.h"

namespace shardd::node {

// Everything the step engine does to its own memory other than the
// collectives: copies in and out of it, zero-fills, gradient accumulation,
// low-precision copies, the gradient norm's partial and the optimizers.
// The engine touches its buffers only through this interface, so the same
// engine runs with its shards in host memory (HostEngineMath) or in GPU
// memory (CudaEngineMath, --config=cuda), where the host cannot dereference
// them.
//
// Pointers named "engine memory" are in the memory this implementation
// works on (buffers from the engine's allocators or AllocateScratch);
// "host" pointers are ordinary host memory. Every call has finished its
// effect on engine memory when it returns (a device implementation
// synchronises its stream), so the engine can hand the memory to a
// collective or to the host right after. Errors: INVALID_ARGUMENT for bad
// arguments (nothing changed), INTERNAL for a failed device call.
//
// Implementations are thread-safe for calls on disjoint memory.
class EngineMath {
 public:
  virtual ~EngineMath() = default;

  // True when engine memory is not host-addressable (a GPU's).
  virtual bool device_memory() const = 0;
  // Memory for the engine's transient buffers (gradient accumulation,
  // exchange scratch), in engine memory, zero-filled.
  virtual absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> AllocateScratch(
      absl::string_view name, int64_t bytes) = 0;

  // host -> engine memory, engine memory -> host, and zero-fill.
  virtual absl::Status Upload(void* dst, const void* host_src,
                              int64_t bytes) = 0;
  virtual absl::Status Download(void* host_dst, const void* src,
                                int64_t bytes) = 0;
  virtual absl::Status Zero(void* dst, int64_t bytes) = 0;

  // acc[i] = float(src[i]) when `first`, else acc[i] += float(src[i]), for
  // n elements of `dtype` (fp32, bf16, fp16) into fp32 `acc`.
  virtual absl::Status Accumulate(float* acc, const void* src,
                                  core::DType dtype, int64_t n, bool first) = 0;
  // dst[i] = dtype(float(dst[i]) + add[i]): fp32 `add` into n elements of
  // `dtype`, rounded once.
  virtual absl::Status AddRounded(void* dst, core::DType dtype,
                                  const float* add, int64_t n) = 0;
  // out[i] = dtype(in[i]) for a bf16/fp16 `dtype` (round to nearest even).
  virtual absl::Status ToLowPrecision(const float* in, void* out,
                                      core::DType dtype, int64_t n) = 0;
  // Adds the exact squares of grad[0, n) to the host `partial`
  // (core::GradClipper::Accumulate's result, bit for bit).
  virtual absl::Status SquaresInto(const float* grad, int64_t n,
                                   core::GradNormPartial* partial) = 0;
  // opt.Update / Sgd::Update on engine memory (lowp_out may be null).
  virtual absl::Status AdamW(const core::AdamW& opt, int64_t step,
                             float grad_scale, const float* grad, float* param,
                             float* exp_avg, float* exp_avg_sq, int64_t n,
                             core::DType lowp_dtype, void* lowp_out) = 0;
  virtual absl::Status Sgd(const core::Sgd& opt, int64_t step, float grad_scale,
                           const float* grad, float* param, float* momentum,
                           int64_t n, core::DType lowp_dtype,
                           void* lowp_out) = 0;
};

// Hands [src, src + bytes) of engine memory to `fn` in order, as host
// bytes: in place, in one call, when the memory is the host's; through a
// bounded host buffer (a few MiB per call) when it is a device's. Stops at
// the first error, fn's or the download's.
absl::Status ReadEngineMemory(
    EngineMath& math, const uint8_t* src, int64_t bytes,
    const std::function<absl::Status(const uint8_t* host, int64_t n)>& fn);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_ENGINE_MATH_H_
