#include "daemon/memory/cuda_device_allocator.h"

#include <cuda_runtime_api.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/memory/cuda_ipc_name.h"

namespace shardd::memory {
namespace {

class CudaBuffer : public ByteBuffer {
 public:
  CudaBuffer(int device, void* data, int64_t size, std::string name)
      : device_(device),
        data_(static_cast<uint8_t*>(data)),
        size_(size),
        name_(std::move(name)) {}
  ~CudaBuffer() override {
    cudaSetDevice(device_);
    cudaFree(data_);  // Nothing to do about an error at teardown.
  }
  uint8_t* data() override { return data_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  const int device_;
  uint8_t* const data_;
  const int64_t size_;
  const std::string name_;
};

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteBuffer>> CudaDeviceAllocator::Allocate(
    absl::string_view name, int64_t bytes) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", name, "': bytes must be >= 1, got ", bytes));
  }
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return CudaError(e, absl::StrCat("cudaSetDevice(", device_, ")"));
  }
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, static_cast<size_t>(bytes));
      e != cudaSuccess) {
    cudaGetLastError();  // Clears the sticky-free error state.
    if (e == cudaErrorMemoryAllocation) {
      return absl::ResourceExhaustedError(
          absl::StrCat("buffer '", name, "': cuda:", device_,
                       " has no room for ", bytes, " B"));
    }
    return CudaError(e, absl::StrCat("cudaMalloc of '", name, "'"));
  }
  absl::Cleanup free_on_error = [p] { cudaFree(p); };
  // cudaMemset runs on the legacy default stream and may return before it
  // is done; the engine's and NCCL's streams are non-blocking, so nothing
  // orders it before their first use of the buffer. Wait for it here
  // (allocation is rare and off the step path).
  if (cudaError_t e = cudaMemset(p, 0, static_cast<size_t>(bytes));
      e != cudaSuccess) {
    return CudaError(e, absl::StrCat("zero-filling '", name, "'"));
  }
  if (cudaError_t e = cudaStreamSynchronize(cudaStreamLegacy);
      e != cudaSuccess) {
    return CudaError(e, absl::StrCat("zero-filling '", name, "'"));
  }
  std::string exported;
  if (exportable_) {
    cudaIpcMemHandle_t handle;
    if (cudaError_t e = cudaIpcGetMemHandle(&handle, p); e != cudaSuccess) {
      return CudaError(e, absl::StrCat("cudaIpcGetMemHandle of '", name, "'"));
    }
    absl::StatusOr<std::string> n = FormatCudaIpcName(
        device_, absl::string_view(handle.reserved, sizeof(handle.reserved)));
    if (!n.ok()) return n.status();
    exported = *std::move(n);
  }
  std::move(free_on_error).Cancel();
  return std::make_unique<CudaBuffer>(device_, p, bytes, std::move(exported));
}

}  // namespace shardd::memory
