#ifndef SHARDD_DAEMON_CORE_CUDA_CUDA_CONTEXT_API_H_
#define SHARDD_DAEMON_CORE_CUDA_CUDA_CONTEXT_API_H_

#include "daemon/core/scoped_cuda_device.h"

namespace shardd::core::cuda {

// The real driver and runtime calls behind ScopedCudaDevice. The driver's
// cuCtxGetCurrent/cuCtxSetCurrent are found through the runtime
// (cudaGetDriverEntryPointByVersion), so nothing links libcuda directly.
// Only with --config=cuda.
const CudaContextApi& RealCudaContextApi();

}  // namespace shardd::core::cuda

#endif  // SHARDD_DAEMON_CORE_CUDA_CUDA_CONTEXT_API_H_
