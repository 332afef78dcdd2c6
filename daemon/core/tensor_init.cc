#include "daemon/core/tensor_init.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function (Steele, Lea, Flood 2014).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Output i of the splitmix64 stream seeded with `seed`.
uint64_t StreamAt(uint64_t seed, uint64_t i) {
  return Mix(seed + (i + 1) * kGolden);
}

float DecodeElement(const char* bytes, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat32: {
      float value;
      std::memcpy(&value, bytes + index * 4, 4);
      return value;
    }
    case DType::kBFloat16:
    case DType::kFloat16: {
      uint16_t bits;
      std::memcpy(&bits, bytes + index * 2, 2);
      return dtype == DType::kBFloat16 ? BFloat16ToFloat(bits)
                                       : HalfToFloat(bits);
    }
  }
  return 0.0f;
}

}  // namespace

InitSpec InitSpec::Constant(float value) {
  InitSpec spec;
  spec.kind = InitKind::kConstant;
  spec.constant = value;
  return spec;
}

InitSpec InitSpec::Normal(uint64_t seed, float mean, float std) {
  InitSpec spec;
  spec.kind = InitKind::kNormal;
  spec.seed = seed;
  spec.mean = mean;
  spec.std = std;
  return spec;
}

InitSpec InitSpec::Uniform(uint64_t seed, float low, float high) {
  InitSpec spec;
  spec.kind = InitKind::kUniform;
  spec.seed = seed;
  spec.low = low;
  spec.high = high;
  return spec;
}

InitSpec InitSpec::Values(std::string bytes, DType dtype) {
  InitSpec spec;
  spec.kind = InitKind::kValues;
  spec.values = std::make_shared<const std::string>(std::move(bytes));
  spec.values_dtype = dtype;
  return spec;
}

float TensorInit::NormalAt(uint64_t seed, float mean, float std, int64_t k) {
  const uint64_t index = static_cast<uint64_t>(k);
  const uint64_t a = StreamAt(seed, 2 * index);
  const uint64_t b = StreamAt(seed, 2 * index + 1);
  constexpr double kScale = 1.0 / 9007199254740992.0;             // 2^-53
  const double u1 = static_cast<double>((a >> 11) + 1) * kScale;  // (0, 1]
  const double u2 = static_cast<double>(b >> 11) * kScale;        // [0, 1)
  const double z =
      std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  return static_cast<float>(static_cast<double>(mean) +
                            static_cast<double>(std) * z);
}

float TensorInit::UniformAt(uint64_t seed, float low, float high, int64_t k) {
  const uint64_t x = StreamAt(seed, static_cast<uint64_t>(k));
  constexpr double kScale = 1.0 / 9007199254740992.0;      // 2^-53
  const double u = static_cast<double>(x >> 11) * kScale;  // [0, 1)
  // Separate statements and a volatile product keep the compiler from
  // fusing the multiply and the add (the formula is specified without FMA).
  const double span = static_cast<double>(high) - static_cast<double>(low);
  const volatile double scaled = span * u;
  const float value = static_cast<float>(static_cast<double>(low) + scaled);
  return value < high ? value : std::nextafter(high, low);
}

absl::Status TensorInit::Validate(const InitSpec& spec, int64_t numel,
                                  DType dtype) {
  switch (spec.kind) {
    case InitKind::kZeros:
      return absl::OkStatus();
    case InitKind::kConstant:
      if (!std::isfinite(spec.constant)) {
        return absl::InvalidArgumentError(
            absl::StrCat("constant.value must be finite, got ", spec.constant));
      }
      return absl::OkStatus();
    case InitKind::kNormal:
      if (!std::isfinite(spec.std) || spec.std < 0.0f) {
        return absl::InvalidArgumentError(
            absl::StrCat("normal.std must be finite and >= 0, got ", spec.std));
      }
      if (!std::isfinite(spec.mean)) {
        return absl::InvalidArgumentError(
            absl::StrCat("normal.mean must be finite, got ", spec.mean));
      }
      return absl::OkStatus();
    case InitKind::kUniform:
      if (!std::isfinite(spec.low)) {
        return absl::InvalidArgumentError(
            absl::StrCat("uniform.low must be finite, got ", spec.low));
      }
      if (!std::isfinite(spec.high) || !(spec.low < spec.high)) {
        return absl::InvalidArgumentError(
            absl::StrCat("uniform.high must be finite and > uniform.low (",
                         spec.low, "), got ", spec.high));
      }
      return absl::OkStatus();
    case InitKind::kValues: {
      if (!IsValidDType(spec.values_dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "values: unsupported dtype ", static_cast<int>(spec.values_dtype)));
      }
      if (spec.values_dtype != dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat("values: encoded as ", DTypeName(spec.values_dtype),
                         " but the tensor is ", DTypeName(dtype)));
      }
      const int64_t have = spec.values == nullptr
                               ? 0
                               : static_cast<int64_t>(spec.values->size());
      const int64_t want = numel * DTypeSize(dtype);
      if (have != want) {
        return absl::InvalidArgumentError(
            absl::StrCat("values.data: ", have, " bytes, expected ", want, " (",
                         numel, " elements of ", DTypeName(dtype), ")"));
      }
      return absl::OkStatus();
    }
    case InitKind::kSharedMemory: {
      const SharedMemorySource& source = spec.shared_memory;
      const int64_t want = numel * DTypeSize(dtype);
      if (source.path.empty() || source.path[0] != '/') {
        return absl::InvalidArgumentError(absl::StrCat(
            "shared_memory.path must be absolute, got '", source.path, "'"));
      }
      if (source.byte_length != want) {
        return absl::InvalidArgumentError(
            absl::StrCat("shared_memory.byte_length: ", source.byte_length,
                         " bytes, expected ", want));
      }
      if (source.byte_offset < 0 || source.segment_bytes < 0 ||
          source.byte_offset > source.segment_bytes - source.byte_length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "shared_memory.byte_offset: range [", source.byte_offset, ", +",
            source.byte_length, ") outside the segment of ",
            source.segment_bytes, " bytes"));
      }
      return absl::OkStatus();
    }
    case InitKind::kCudaIpc: {
      const CudaIpcSource& source = spec.cuda_ipc;
      const int64_t want = numel * DTypeSize(dtype);
      if (static_cast<int64_t>(source.mem_handle.size()) !=
          CudaIpcSource::kCudaIpcHandleBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda_ipc.mem_handle: ", source.mem_handle.size(),
            " bytes, expected ", CudaIpcSource::kCudaIpcHandleBytes,
            " (a cudaIpcMemHandle_t)"));
      }
      if (source.byte_length != want) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda_ipc.byte_length: ", source.byte_length, " bytes, expected ",
            want, " (", numel, " elements of ", DTypeName(dtype), ")"));
      }
      if (source.byte_offset < 0 || source.allocation_bytes < 0 ||
          source.byte_offset > source.allocation_bytes - source.byte_length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cuda_ipc.byte_offset: range [", source.byte_offset, ", +",
            source.byte_length, ") outside the allocation of ",
            source.allocation_bytes, " bytes"));
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("kind: unknown value ", static_cast<int>(spec.kind)));
}

absl::Status TensorInit::Fill(const InitSpec& spec, int64_t tensor_numel,
                              int64_t first_element, float* out, int64_t n) {
  if (tensor_numel < 0 || first_element < 0 || n < 0 ||
      first_element > tensor_numel - n) {
    return absl::InvalidArgumentError(
        absl::StrCat("init range [", first_element, ", ", first_element, "+", n,
                     ") is outside the tensor of ", tensor_numel, " elements"));
  }
  if (out == nullptr && n > 0) {
    return absl::InvalidArgumentError("init output must not be null");
  }
  if (spec.kind == InitKind::kSharedMemory) {
    return absl::FailedPreconditionError(
        "shared-memory init values must be read into values before filling");
  }
  if (spec.kind == InitKind::kCudaIpc) {
    return absl::FailedPreconditionError(
        "CUDA IPC init values are read by the daemon's DeviceInitReader");
  }
  const DType dtype =
      spec.kind == InitKind::kValues ? spec.values_dtype : DType::kFloat32;
  if (absl::Status status = Validate(spec, tensor_numel, dtype); !status.ok()) {
    return status;
  }
  switch (spec.kind) {
    case InitKind::kZeros:
      std::fill(out, out + n, 0.0f);
      break;
    case InitKind::kConstant:
      std::fill(out, out + n, spec.constant);
      break;
    case InitKind::kNormal:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = NormalAt(spec.seed, spec.mean, spec.std, first_element + i);
      }
      break;
    case InitKind::kUniform:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = UniformAt(spec.seed, spec.low, spec.high, first_element + i);
      }
      break;
    case InitKind::kValues:
      if (dtype == DType::kFloat32) {
        std::memcpy(out, spec.values->data() + first_element * 4, n * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          out[i] = DecodeElement(spec.values->data(), dtype, first_element + i);
        }
      }
      break;
    case InitKind::kSharedMemory:
    case InitKind::kCudaIpc:
      break;
  }
  return absl::OkStatus();
}

}  // namespace shardd::core
