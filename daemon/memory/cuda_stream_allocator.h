#ifndef SHARDD_DAEMON_MEMORY_CUDA_STREAM_ALLOCATOR_H_
#define SHARDD_DAEMON_MEMORY_CUDA_STREAM_ALLOCATOR_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/memory/byte_buffer.h"

namespace shardd::memory {

// GPU memory of one device for buffers made and dropped while the daemon
// serves requests (gradient-accumulation buffers, GatherState scratch),
// zero-filled, allocated and freed stream-ordered (cudaMallocAsync /
// cudaFreeAsync on a stream of its own, from the device's default memory
// pool).
//
// Why not cudaMalloc/cudaFree: both may wait for the whole device, so a
// request that allocates would stall behind (and be stalled by) a prefetch
// all-gather running in NCCL, and cudaFree in the middle of a collective
// is a classic source of hangs across ranks. A stream-ordered allocation
// waits only for its own stream, which runs nothing else.
//
// Allocate returns after the zero fill has completed, so the buffer can be
// used on any stream at once. A buffer's destructor enqueues its free on
// the allocator's stream without waiting; the caller must have finished
// every use of it (the engine has: its operations are waited for).
//
// Built only with --config=cuda. Thread-safe. Buffers keep the allocator's
// stream alive (shared), so they may outlive the allocator.
class CudaStreamAllocator : public BufferAllocator {
 public:
  // INTERNAL when the stream cannot be made; FAILED_PRECONDITION when the
  // device has no memory pools (cudaDevAttrMemoryPoolsSupported).
  static absl::StatusOr<std::unique_ptr<CudaStreamAllocator>> Create(
      int device);

  // RESOURCE_EXHAUSTED when the device is out of memory, INTERNAL for other
  // CUDA errors, INVALID_ARGUMENT for bytes < 1.
  absl::StatusOr<std::unique_ptr<ByteBuffer>> Allocate(absl::string_view name,
                                                       int64_t bytes) override;

  int device() const { return device_; }

 private:
  struct Stream;
  CudaStreamAllocator(int device, std::shared_ptr<Stream> stream)
      : device_(device), stream_(std::move(stream)) {}

  const int device_;
  const std::shared_ptr<Stream> stream_;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_CUDA_STREAM_ALLOCATOR_H_
