#ifndef SHARDD_DAEMON_CORE_TENSOR_INIT_H_
#define SHARDD_DAEMON_CORE_TENSOR_INIT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "daemon/core/dtype.h"

namespace shardd::core {

enum class InitKind : int {
  kZeros = 1,
  kConstant = 2,
  kNormal = 3,
  // Values uploaded by the trainer (proto InlineValues).
  kValues = 4,
  // Values in a trainer-owned shared-memory file (proto SharedMemoryRef). The
  // daemon reads them into kValues before filling (core does no I/O), so Fill
  // refuses this kind.
  kSharedMemory = 5,
  // Uniform [low, high) values (proto UniformInit).
  kUniform = 6,
  // Values in a CUDA allocation of the trainer (proto TensorInit.cuda_ipc).
  // Read by the daemon (node::DeviceInitReader), so Fill refuses this kind.
  kCudaIpc = 7,
};

// Where kSharedMemory values are: [byte_offset, byte_offset + byte_length)
// of the file `path` of `segment_bytes` bytes.
struct SharedMemorySource {
  std::string path;
  int64_t segment_bytes = 0;
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
};

// Where kCudaIpc values are: [byte_offset, byte_offset + byte_length) of
// the CUDA allocation of `allocation_bytes` bytes that `mem_handle` (a
// cudaIpcMemHandle_t, kCudaIpcHandleBytes) exports, on the GPU with
// `pci_bus_id` (empty: the trainer's ordinal `device_ordinal`).
struct CudaIpcSource {
  static constexpr int64_t kCudaIpcHandleBytes = 64;
  std::string mem_handle;
  int device_ordinal = 0;
  std::string pci_bus_id;
  int64_t allocation_bytes = 0;
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
};

// The initial values of one tensor (proto TensorInit).
struct InitSpec {
  InitKind kind = InitKind::kZeros;
  float constant = 0.0f;  // kConstant.
  uint64_t seed = 0;      // kNormal.
  float mean = 0.0f;      // kNormal.
  float std = 0.0f;       // kNormal; finite and >= 0.
  float low = 0.0f;       // kUniform; finite and < high.
  float high = 0.0f;      // kUniform; finite.
  // kValues: numel elements, little-endian, row-major, in `values_dtype`.
  // Shared and immutable, so copying a config does not copy the bytes.
  std::shared_ptr<const std::string> values;
  DType values_dtype = DType::kFloat32;
  SharedMemorySource shared_memory;  // kSharedMemory.
  CudaIpcSource cuda_ipc;            // kCudaIpc.

  static InitSpec Zeros() { return InitSpec{}; }
  static InitSpec Constant(float value);
  static InitSpec Normal(uint64_t seed, float mean, float std);
  static InitSpec Uniform(uint64_t seed, float low, float high);
  static InitSpec Values(std::string bytes, DType dtype);
};

// Deterministic, sharding-independent tensor initialisation.
//
// Element k of a tensor is a pure function of the spec and k (for normal
// values: of (seed, k), as proto NormalInit promises), never of where a
// shard starts: filling any sub-range [a, b) gives exactly the values of a
// full fill sliced to [a, b), so every rank materialises only its shard and
// the values do not depend on F or W. Two tensors with the same seed get the
// same values; trainers give each tensor its own seed.
//
// normal(seed, mean, std): u1, u2 are outputs 2k and 2k+1 of the splitmix64
// stream of `seed` (a counter-based generator: output i = mix(seed + (i+1)γ),
// so any element is computed directly), turned into doubles with 53 random
// bits (u1 in (0, 1], u2 in [0, 1)); z = sqrt(-2 ln u1) cos(2π u2) (the
// cosine half of Box-Muller, so element k needs no partner element);
// value = float(mean + std * z), computed in double and rounded once. The
// result depends on libm's log and cos, which are the same on every rank of
// one build (Debian 12's glibc); a different libm may differ in the last
// bit of a few values.
//
// uniform(seed, low, high): x = output k of the same splitmix64 stream,
// u = (x >> 11) * 2^-53 in [0, 1), value = float(low + (high - low) * u)
// computed in double and rounded once; a value that rounds up to `high`
// becomes the largest float below it, so values lie in [low, high). Only
// integer and IEEE double arithmetic: bit-exact everywhere (proto
// UniformInit gives the formula for Python).
//
// Pure functions, thread-safe.
class TensorInit {
 public:
  // Writes elements [first_element, first_element + n) of a tensor of
  // `tensor_numel` elements, as fp32 (the master copy), to out[0, n).
  // kValues are converted from their dtype exactly (bf16/fp16 widen
  // losslessly). INVALID_ARGUMENT for a range outside the tensor, values
  // whose byte count is not tensor_numel * dtype size, a negative or
  // non-finite std, a null `out` with n > 0; FAILED_PRECONDITION for
  // kSharedMemory and kCudaIpc (the daemon reads those).
  static absl::Status Fill(const InitSpec& spec, int64_t tensor_numel,
                           int64_t first_element, float* out, int64_t n);

  // Element k of normal(seed, mean, std) (what Fill writes).
  static float NormalAt(uint64_t seed, float mean, float std, int64_t k);

  // Element k of uniform(seed, low, high) (what Fill writes).
  static float UniformAt(uint64_t seed, float low, float high, int64_t k);

  // Checks the spec against a tensor of `numel` elements of `dtype` (the
  // encoding uploaded values must have). Messages name fields relative to
  // the init ("values: ...", "normal.std: ...", "uniform.high: ..."), for
  // the caller to prefix.
  static absl::Status Validate(const InitSpec& spec, int64_t numel,
                               DType dtype);
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_TENSOR_INIT_H_
