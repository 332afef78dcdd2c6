#include "daemon/core/cuda/cuda_context_api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace shardd::core::cuda {
namespace {

using GetCurrentFn = CUresult (*)(CUcontext*);
using SetCurrentFn = CUresult (*)(CUcontext);

// Resolved once; a driver too old to have them leaves them null, and the
// calls then report CUDA_ERROR_NOT_FOUND.
struct Entry {
  GetCurrentFn get = nullptr;
  SetCurrentFn set = nullptr;
};

const Entry& Resolve() {
  static const Entry entry = [] {
    Entry e;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    // 12000: the ABI of these two calls has not changed since CUDA 4.
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000,
                                         cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      e.get = reinterpret_cast<GetCurrentFn>(fn);
    }
    fn = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &fn, 12000,
                                         cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      e.set = reinterpret_cast<SetCurrentFn>(fn);
    }
    return e;
  }();
  return entry;
}

int GetCurrent(void** context) {
  const Entry& e = Resolve();
  if (e.get == nullptr) return CUDA_ERROR_NOT_FOUND;
  CUcontext c = nullptr;
  const CUresult r = e.get(&c);
  *context = c;
  return static_cast<int>(r);
}

int SetCurrent(void* context) {
  const Entry& e = Resolve();
  if (e.set == nullptr) return CUDA_ERROR_NOT_FOUND;
  return static_cast<int>(e.set(static_cast<CUcontext>(context)));
}

int SetDevice(int device) { return static_cast<int>(cudaSetDevice(device)); }

}  // namespace

const CudaContextApi& RealCudaContextApi() {
  static const CudaContextApi api = [] {
    CudaContextApi a;
    a.get_current = &GetCurrent;
    a.set_current = &SetCurrent;
    a.set_device = &SetDevice;
    return a;
  }();
  return api;
}

}  // namespace shardd::core::cuda
