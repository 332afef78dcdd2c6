#include "daemon/memory/cuda_stream_allocator.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::memory {

// The allocator's stream; destroyed after the last buffer's free was
// enqueued on it (cudaStreamDestroy lets enqueued work finish).
struct CudaStreamAllocator::Stream {
  int device = 0;
  cudaStream_t stream = nullptr;
  ~Stream() {
    cudaSetDevice(device);
    cudaStreamDestroy(stream);
  }
};

namespace {

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

class StreamBuffer : public ByteBuffer {
 public:
  StreamBuffer(std::shared_ptr<const void> stream_keeper, int device,
               cudaStream_t stream, void* data, int64_t size, std::string name)
      : stream_keeper_(std::move(stream_keeper)),
        device_(device),
        stream_(stream),
        data_(static_cast<uint8_t*>(data)),
        size_(size),
        name_(std::move(name)) {}
  ~StreamBuffer() override {
    cudaSetDevice(device_);
    cudaFreeAsync(data_, stream_);  // Nothing to do about an error here.
  }
  uint8_t* data() override { return data_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  const std::shared_ptr<const void> stream_keeper_;
  const int device_;
  cudaStream_t const stream_;
  uint8_t* const data_;
  const int64_t size_;
  const std::string name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CudaStreamAllocator>>
CudaStreamAllocator::Create(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return CudaError(e, absl::StrCat("cudaSetDevice(", device, ")"));
  }
  int pools = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(
          &pools, cudaDevAttrMemoryPoolsSupported, device);
      e != cudaSuccess) {
    return CudaError(e, "cudaDevAttrMemoryPoolsSupported");
  }
  if (pools == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cuda:", device,
        " has no stream-ordered memory pools (cudaMallocAsync), which the "
        "engine's request-time buffers need"));
  }
  auto stream = std::make_shared<Stream>();
  stream->device = device;
  if (cudaError_t e =
          cudaStreamCreateWithFlags(&stream->stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    stream->stream = nullptr;
    return CudaError(e, "cudaStreamCreate (stream-ordered allocator)");
  }
  return std::unique_ptr<CudaStreamAllocator>(
      new CudaStreamAllocator(device, std::move(stream)));
}

absl::StatusOr<std::unique_ptr<ByteBuffer>> CudaStreamAllocator::Allocate(
    absl::string_view name, int64_t bytes) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", name, "': bytes must be >= 1, got ", bytes));
  }
  if (cudaError_t e = cudaSetDevice(device_); e != cudaSuccess) {
    return CudaError(e, absl::StrCat("cudaSetDevice(", device_, ")"));
  }
  cudaStream_t s = stream_->stream;
  void* p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, static_cast<size_t>(bytes), s);
      e != cudaSuccess) {
    cudaGetLastError();  // Not sticky: clear it for the next call.
    if (e == cudaErrorMemoryAllocation) {
      return absl::ResourceExhaustedError(
          absl::StrCat("buffer '", name, "': cuda:", device_,
                       " has no room for ", bytes, " B"));
    }
    return CudaError(e, absl::StrCat("cudaMallocAsync of '", name, "'"));
  }
  absl::Cleanup free_on_error = [p, s] { cudaFreeAsync(p, s); };
  if (cudaError_t e = cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s);
      e != cudaSuccess) {
    return CudaError(e, absl::StrCat("zero-filling '", name, "'"));
  }
  // Only this stream: the buffer is then ready for any stream.
  if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) {
    return CudaError(e, absl::StrCat("zero-filling '", name, "'"));
  }
  std::move(free_on_error).Cancel();
  return std::make_unique<StreamBuffer>(stream_, device_, s, p, bytes,
                                        std::string(name));
}

}  // namespace shardd::memory
