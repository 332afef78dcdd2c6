#ifndef SHARDD_TOOLS_GPU_PREFLIGHT_KERNEL_H_
#define SHARDD_TOOLS_GPU_PREFLIGHT_KERNEL_H_

#include <cstdint>

// gpu_preflight's one kernel: shows that code built the way bazel/cuda.bzl
// builds ours (sm_90 + PTX) loads and runs on the device. Stateless and
// thread-safe.
namespace shardd::tools {

// The word at index i of the pattern: what the kernel writes and the host
// compares against.
inline uint32_t PatternWord(uint32_t seed, int64_t i) {
  return static_cast<uint32_t>(static_cast<uint64_t>(i) * 2654435761u) ^ seed;
}

// Enqueues out[i] = PatternWord(seed, i) for i < n on `stream` (a
// cudaStream_t); returns the launch's cudaError_t (0: launched).
int LaunchFillPattern(uint32_t* out, int64_t n, uint32_t seed, void* stream);

}  // namespace shardd::tools

#endif  // SHARDD_TOOLS_GPU_PREFLIGHT_KERNEL_H_
