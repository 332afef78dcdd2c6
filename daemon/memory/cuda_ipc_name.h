#ifndef SHARDD_DAEMON_MEMORY_CUDA_IPC_NAME_H_
#define SHARDD_DAEMON_MEMORY_CUDA_IPC_NAME_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::memory {

// The name a GPU buffer exported by CUDA IPC carries (ByteBuffer::name()):
// "cuda-ipc:<device>:<the 64-byte cudaIpcMemHandle_t as 128 lowercase hex
// digits>". What the trainer API puts into a CudaIpcRef. Pure functions,
// no CUDA needed.
struct CudaIpcName {
  int device = 0;
  std::string mem_handle;  // 64 bytes.
};

inline constexpr int kCudaIpcHandleBytes = 64;

// INVALID_ARGUMENT when the handle is not 64 bytes or the device < 0.
absl::StatusOr<std::string> FormatCudaIpcName(int device,
                                              absl::string_view mem_handle);
// INVALID_ARGUMENT naming what is wrong (prefix, device, handle length or
// digits).
absl::StatusOr<CudaIpcName> ParseCudaIpcName(absl::string_view name);
// True when `name` starts with "cuda-ipc:" (a GPU buffer, not a shared-memory
// path).
bool IsCudaIpcName(absl::string_view name);

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_CUDA_IPC_NAME_H_
