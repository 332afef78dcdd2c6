#include "daemon/node/cuda/cuda_engine_math.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/cuda/adamw_cuda.h"
#include "daemon/core/dtype.h"
#include "daemon/memory/cuda_device_allocator.h"
#include "daemon/node/cuda/engine_kernels.h"

namespace shardd::node {
namespace {

using core::DType;

absl::Status CudaStatus(int e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  const auto err = static_cast<cudaError_t>(e);
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(err),
                                          " (", cudaGetErrorString(err), ")"));
}

absl::Status CheckCount(int64_t n, absl::string_view what) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": element count must be >= 0, got ", n));
  }
  return absl::OkStatus();
}

absl::StatusOr<cuda::ElementType> TypeOf(DType dtype, absl::string_view what) {
  switch (dtype) {
    case DType::kFloat32:
      return cuda::ElementType::kFloat32;
    case DType::kBFloat16:
      return cuda::ElementType::kBFloat16;
    case DType::kFloat16:
      return cuda::ElementType::kFloat16;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": unknown dtype ", static_cast<int>(dtype)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<CudaEngineMath>> CudaEngineMath::Create(
    int device) {
  if (absl::Status s = CudaStatus(cudaSetDevice(device),
                                  absl::StrCat("cudaSetDevice(", device, ")"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaStatus(cuda::PreloadEngineKernels(),
                                  "loading the engine's kernels");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CudaStatus(core::cuda::PreloadAdamWKernels(),
                                  "loading the AdamW kernel");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<memory::CudaStreamAllocator>> scratch =
      memory::CudaStreamAllocator::Create(device);
  if (!scratch.ok()) return scratch.status();
  cudaStream_t stream = nullptr;
  if (absl::Status s =
          CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                     "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  // Made once, here: allocated at start, before any collective runs.
  memory::CudaDeviceAllocator allocator(device, /*exportable=*/false);
  absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> bins = allocator.Allocate(
      "grad_norm_bins", cuda::kSquareBinWords * sizeof(unsigned long long));
  if (!bins.ok()) {
    cudaStreamDestroy(stream);
    return bins.status();
  }
  return std::shared_ptr<CudaEngineMath>(new CudaEngineMath(
      device, stream, *std::move(scratch), *std::move(bins)));
}

CudaEngineMath::CudaEngineMath(
    int device, void* stream,
    std::unique_ptr<memory::CudaStreamAllocator> scratch,
    std::unique_ptr<memory::ByteBuffer> bins)
    : device_(device),
      scratch_allocator_(std::move(scratch)),
      stream_(stream),
      bins_(std::move(bins)) {}

CudaEngineMath::~CudaEngineMath() {
  cudaSetDevice(device_);
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

absl::Status CudaEngineMath::Bind() {
  return CudaStatus(cudaSetDevice(device_),
                    absl::StrCat("cudaSetDevice(", device_, ")"));
}

absl::Status CudaEngineMath::Finish(int launch_error, absl::string_view what) {
  if (absl::Status s = CudaStatus(launch_error, what); !s.ok()) return s;
  return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                    what);
}

int CudaEngineMath::LaunchLowp(const float* param, void* lowp_out,
                               DType lowp_dtype, int64_t n) {
  if (lowp_out == nullptr || lowp_dtype == DType::kFloat32) return cudaSuccess;
  const cuda::ElementType type = lowp_dtype == DType::kBFloat16
                                     ? cuda::ElementType::kBFloat16
                                     : cuda::ElementType::kFloat16;
  return cuda::LaunchToLowPrecision(param, lowp_out, type, n, stream_);
}

absl::StatusOr<std::unique_ptr<memory::ByteBuffer>>
CudaEngineMath::AllocateScratch(absl::string_view name, int64_t bytes) {
  return scratch_allocator_->Allocate(name, bytes);
}

absl::Status CudaEngineMath::Upload(void* dst, const void* host_src,
                                    int64_t bytes) {
  if (absl::Status s = CheckCount(bytes, "upload"); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  return Finish(cudaMemcpyAsync(dst, host_src, static_cast<size_t>(bytes),
                                cudaMemcpyHostToDevice,
                                static_cast<cudaStream_t>(stream_)),
                "upload");
}

absl::Status CudaEngineMath::Download(void* host_dst, const void* src,
                                      int64_t bytes) {
  if (absl::Status s = CheckCount(bytes, "download"); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  return Finish(cudaMemcpyAsync(host_dst, src, static_cast<size_t>(bytes),
                                cudaMemcpyDeviceToHost,
                                static_cast<cudaStream_t>(stream_)),
                "download");
}

absl::Status CudaEngineMath::Zero(void* dst, int64_t bytes) {
  if (absl::Status s = CheckCount(bytes, "zero"); !s.ok()) return s;
  if (bytes == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  return Finish(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes),
                                static_cast<cudaStream_t>(stream_)),
                "zero-fill");
}

absl::Status CudaEngineMath::Accumulate(float* acc, const void* src,
                                        DType dtype, int64_t n, bool first) {
  if (absl::Status s = CheckCount(n, "accumulate"); !s.ok()) return s;
  absl::StatusOr<cuda::ElementType> type = TypeOf(dtype, "accumulate");
  if (!type.ok()) return type.status();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  return Finish(cuda::LaunchAccumulate(acc, src, *type, n, first, stream_),
                "accumulate");
}

absl::Status CudaEngineMath::AddRounded(void* dst, DType dtype,
                                        const float* add, int64_t n) {
  if (absl::Status s = CheckCount(n, "add"); !s.ok()) return s;
  absl::StatusOr<cuda::ElementType> type = TypeOf(dtype, "add");
  if (!type.ok()) return type.status();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  return Finish(cuda::LaunchAddRounded(dst, *type, add, n, stream_), "add");
}

absl::Status CudaEngineMath::ToLowPrecision(const float* in, void* out,
                                            DType dtype, int64_t n) {
  if (absl::Status s = CheckCount(n, "low-precision copy"); !s.ok()) return s;
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("low-precision copy: dtype must be bf16 or fp16, got ",
                     core::DTypeName(dtype)));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  return Finish(LaunchLowp(in, out, dtype, n), "low-precision copy");
}

absl::Status CudaEngineMath::SquaresInto(const float* grad, int64_t n,
                                         core::GradNormPartial* partial) {
  if (absl::Status s = CheckCount(n, "gradient norm"); !s.ok()) return s;
  if (partial == nullptr) {
    return absl::InvalidArgumentError("grad_clip partial must not be null");
  }
  std::vector<unsigned long long> words(cuda::kSquareBinWords);
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status s = Bind(); !s.ok()) return s;
    auto* bins = reinterpret_cast<unsigned long long*>(bins_->data());
    const auto stream = static_cast<cudaStream_t>(stream_);
    int e = cudaMemsetAsync(bins, 0, words.size() * sizeof(words[0]), stream);
    if (e == cudaSuccess) e = cuda::LaunchSquareBins(grad, n, bins, stream_);
    if (e == cudaSuccess) {
      e = cudaMemcpyAsync(words.data(), bins, words.size() * sizeof(words[0]),
                          cudaMemcpyDeviceToHost, stream);
    }
    if (absl::Status s = Finish(e, "gradient norm"); !s.ok()) return s;
  }
  core::SquareBins bins;
  for (int i = 0; i < core::SquareBins::kExponents; ++i) {
    bins.lo[i] = words[i];
    bins.hi[i] = words[core::SquareBins::kExponents + i];
  }
  bins.elements = n;
  bins.nonfinite =
      static_cast<int64_t>(words[2 * core::SquareBins::kExponents]);
  return core::GradClipper::AddBins(bins, partial);
}

absl::Status CudaEngineMath::AdamW(const core::AdamW& opt, int64_t step,
                                   float grad_scale, const float* grad,
                                   float* param, float* exp_avg,
                                   float* exp_avg_sq, int64_t n,
                                   DType lowp_dtype, void* lowp_out) {
  if (step < 1 || !std::isfinite(grad_scale) || grad_scale < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adamw: step must be >= 1 and grad_scale finite and >= 0 (got ", step,
        ", ", grad_scale, ")"));
  }
  if (absl::Status s = CheckCount(n, "adamw"); !s.ok()) return s;
  const core::AdamWScalars scalars = opt.ScalarsFor(step, grad_scale);
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  int e = core::cuda::LaunchAdamW(scalars, grad, param, exp_avg, exp_avg_sq, n,
                                  stream_);
  if (e == cudaSuccess) e = LaunchLowp(param, lowp_out, lowp_dtype, n);
  return Finish(e, "adamw");
}

absl::Status CudaEngineMath::Sgd(const core::Sgd& opt, int64_t step,
                                 float grad_scale, const float* grad,
                                 float* param, float* momentum, int64_t n,
                                 DType lowp_dtype, void* lowp_out) {
  if (step < 1 || !std::isfinite(grad_scale) || grad_scale < 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sgd: step must be >= 1 and grad_scale finite and >= 0 (got ", step,
        ", ", grad_scale, ")"));
  }
  if (absl::Status s = CheckCount(n, "sgd"); !s.ok()) return s;
  const core::SgdVariant variant = opt.VariantFor(step);
  if (n > 0 && variant.mode != core::SgdMomentumMode::kNone &&
      momentum == nullptr) {
    return absl::InvalidArgumentError(
        "sgd momentum_buffer must not be null when sgd.momentum != 0");
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Bind(); !s.ok()) return s;
  int e = cuda::LaunchSgd(opt.ScalarsFor(grad_scale), variant, grad, param,
                          momentum, n, stream_);
  if (e == cudaSuccess) e = LaunchLowp(param, lowp_out, lowp_dtype, n);
  return Finish(e, "sgd");
}

}  // namespace shardd::node
