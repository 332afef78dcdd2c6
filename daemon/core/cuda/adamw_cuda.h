#ifndef SHARDD_DAEMON_CORE_CUDA_ADAMW_CUDA_H_
#define SHARDD_DAEMON_CORE_CUDA_ADAMW_CUDA_H_

#include <cstdint>

#include "daemon/core/adamw_scalars.h"

namespace shardd::core::cuda {

// AdamW on one shard resident in GPU memory: the same fp32 operation
// sequence as the CPU kernel (AdamW::Update), compiled without FMA
// contraction and with IEEE division and square root, so a GPU shard and a
// CPU shard given the same inputs end bit-identical.
//
// All pointers are device pointers to n floats that must not overlap;
// `stream` is a cudaStream_t (nullptr: the default stream). Enqueues the
// kernel and returns 0, or the cudaError_t of the launch. Stateless and
// thread-safe.
int LaunchAdamW(const AdamWScalars& scalars, const float* grad, float* param,
                float* exp_avg, float* exp_avg_sq, int64_t n, void* stream);

// Loads this file's kernels now (cudaFuncGetAttributes of each), with the
// device current. Under lazy loading (the default since CUDA 12.2) a
// kernel's first launch loads its module, which waits for the whole device
// and so for any NCCL kernel running then: call it when the backend is
// built. Returns 0 or the first cudaError_t.
int PreloadAdamWKernels();

}  // namespace shardd::core::cuda

#endif  // SHARDD_DAEMON_CORE_CUDA_ADAMW_CUDA_H_
