#ifndef SHARDD_DAEMON_NODE_CUDA_CUDA_ENGINE_MATH_H_
#define SHARDD_DAEMON_NODE_CUDA_CUDA_ENGINE_MATH_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/memory/cuda_stream_allocator.h"
#include "daemon/node/engine_math.h"

namespace shardd::node {

// The step engine's math on shards resident in one GPU's memory: the
// kernels of daemon/core/cuda and daemon/node/cuda, which round like their
// host twins (so a GPU rank and a CPU rank given the same inputs end
// bit-identical), and cudaMemcpy for uploads and downloads.
//
// Every call runs on this object's stream and synchronises it before
// returning (EngineMath's contract: the result is in memory when the call
// returns, ready for a collective on NCCL's stream or for the host). CUDA
// errors are INTERNAL with the CUDA error's name and what was being done.
//
// Thread-safe: calls are serialised on the one stream. Built only with
// --config=cuda.
class CudaEngineMath : public EngineMath {
 public:
  // Binds to `device`, loads every kernel the engine launches (so that no
  // first launch waits for the device), and creates the stream, the
  // stream-ordered scratch allocator and the norm's bins.
  static absl::StatusOr<std::shared_ptr<CudaEngineMath>> Create(int device);
  ~CudaEngineMath() override;
  CudaEngineMath(const CudaEngineMath&) = delete;
  CudaEngineMath& operator=(const CudaEngineMath&) = delete;

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

  int device() const { return device_; }

 private:
  CudaEngineMath(int device, void* stream,
                 std::unique_ptr<memory::CudaStreamAllocator> scratch,
                 std::unique_ptr<memory::ByteBuffer> bins);

  // cudaSetDevice for the calling thread (the current device is per
  // thread).
  absl::Status Bind() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The launch's error, then the stream's.
  absl::Status Finish(int launch_error, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The low-precision copy after an optimizer update, when asked for.
  int LaunchLowp(const float* param, void* lowp_out, core::DType lowp_dtype,
                 int64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  // AllocateScratch's buffers (accumulation, GatherState) are made while
  // collectives may run: stream-ordered, never a device-wide wait.
  const std::unique_ptr<memory::CudaStreamAllocator> scratch_allocator_;
  absl::Mutex mu_;
  void* const stream_;  // cudaStream_t
  // cuda::kSquareBinWords words for SquaresInto.
  const std::unique_ptr<memory::ByteBuffer> bins_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CUDA_CUDA_ENGINE_MATH_H_
