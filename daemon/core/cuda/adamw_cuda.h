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

}  // namespace shardd::core::cuda

#endif  // SHARDD_DAEMON_CORE_CUDA_ADAMW_CUDA_H_
