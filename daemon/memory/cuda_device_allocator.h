#ifndef SHARDD_DAEMON_MEMORY_CUDA_DEVICE_ALLOCATOR_H_
#define SHARDD_DAEMON_MEMORY_CUDA_DEVICE_ALLOCATOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/memory/byte_buffer.h"

namespace shardd::memory {

// GPU memory of one device (cudaMalloc), zero-filled at allocation. With
// `exportable`, each buffer also carries its CUDA IPC handle, which a
// trainer process on the same node opens (cudaIpcOpenMemHandle) to read
// the gathered parameters and write gradients in place, the GPU twin of a
// shared-memory segment; its name() is then FormatCudaIpcName's
// (cuda_ipc_name.h).
//
// Built only with --config=cuda. Thread-safe; buffers free their memory
// (cudaFree) when destroyed, on any thread.
class CudaDeviceAllocator : public BufferAllocator {
 public:
  CudaDeviceAllocator(int device, bool exportable)
      : device_(device), exportable_(exportable) {}

  // RESOURCE_EXHAUSTED when the device is out of memory (the message says
  // how much was asked for), INTERNAL for other CUDA errors,
  // INVALID_ARGUMENT for bytes < 1.
  absl::StatusOr<std::unique_ptr<ByteBuffer>> Allocate(absl::string_view name,
                                                       int64_t bytes) override;

  int device() const { return device_; }

 private:
  const int device_;
  const bool exportable_;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_CUDA_DEVICE_ALLOCATOR_H_
