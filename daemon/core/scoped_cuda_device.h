#ifndef SHARDD_DAEMON_CORE_SCOPED_CUDA_DEVICE_H_
#define SHARDD_DAEMON_CORE_SCOPED_CUDA_DEVICE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardd::core {

// The CUDA calls a ScopedCudaDevice makes, as plain function pointers, so
// that the logic can be tested on a machine without a GPU (with fakes) and
// the real calls live in one CUDA-only file (cuda/cuda_context_api.cc).
// Each returns 0 on success, else the CUDA error code.
struct CudaContextApi {
  // cuCtxGetCurrent: the context bound to the calling thread, or null when
  // none is (a thread that never made a CUDA call, or was unbound).
  int (*get_current)(void** context) = nullptr;
  // cuCtxSetCurrent: binds `context` to the calling thread; null unbinds.
  int (*set_current)(void* context) = nullptr;
  // cudaSetDevice: binds the device's primary context (creating it).
  int (*set_device)(int device) = nullptr;
};

// Makes `device` current on the calling thread for a scope, then gives the
// thread back exactly what it had: the context that was bound, or none.
//
// Why not cudaGetDevice + cudaSetDevice: cudaGetDevice answers 0 on a thread
// that never chose a device, and setting device 0 back at the end creates
// GPU 0's primary context (about 0.5 GiB) in a daemon that was told to use
// cuda:N, and in EXCLUSIVE_PROCESS mode locks GPU 0's own daemon out.
//
// Not thread-safe in the sense that matters for CUDA: use it on one thread,
// as a local. The api is copied.
class ScopedCudaDevice {
 public:
  // Binds `device`; on failure the thread is left as it was.
  static absl::StatusOr<ScopedCudaDevice> Bind(int device,
                                               const CudaContextApi& api);
  ScopedCudaDevice(ScopedCudaDevice&& other) noexcept;
  ScopedCudaDevice& operator=(ScopedCudaDevice&&) = delete;
  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;
  // Rebinds the previous context (or none). Errors cannot be reported from
  // a destructor; Restore() reports them.
  ~ScopedCudaDevice();

  // Rebinds now; later calls and the destructor do nothing.
  absl::Status Restore();

 private:
  ScopedCudaDevice(const CudaContextApi& api, void* previous)
      : api_(api), previous_(previous), active_(true) {}

  CudaContextApi api_;
  void* previous_ = nullptr;
  bool active_ = false;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_SCOPED_CUDA_DEVICE_H_
