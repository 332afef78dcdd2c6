#include "daemon/node/host_engine_math.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/core/dtype.h"

namespace shardd::node {
namespace {

using core::DType;

absl::Status CheckCount(int64_t n, absl::string_view what) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": element count must be >= 0, got ", n));
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<EngineMath> HostEngineMath::Get() {
  static const auto* const kInstance =
      new std::shared_ptr<EngineMath>(std::make_shared<HostEngineMath>());
  return *kInstance;
}

absl::StatusOr<std::unique_ptr<memory::ByteBuffer>>
HostEngineMath::AllocateScratch(absl::string_view name, int64_t bytes) {
  return heap_.Allocate(name, bytes);
}

absl::Status HostEngineMath::Upload(void* dst, const void* host_src,
                                    int64_t bytes) {
  if (absl::Status s = CheckCount(bytes, "upload"); !s.ok()) return s;
  if (bytes > 0) std::memcpy(dst, host_src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostEngineMath::Download(void* host_dst, const void* src,
                                      int64_t bytes) {
  if (absl::Status s = CheckCount(bytes, "download"); !s.ok()) return s;
  if (bytes > 0) std::memcpy(host_dst, src, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostEngineMath::Zero(void* dst, int64_t bytes) {
  if (absl::Status s = CheckCount(bytes, "zero"); !s.ok()) return s;
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
  return absl::OkStatus();
}

absl::Status HostEngineMath::Accumulate(float* acc, const void* src,
                                        DType dtype, int64_t n, bool first) {
  if (absl::Status s = CheckCount(n, "accumulate"); !s.ok()) return s;
  switch (dtype) {
    case DType::kFloat32: {
      const float* s = static_cast<const float*>(src);
      if (first) {
        if (n > 0) std::memcpy(acc, s, static_cast<size_t>(n) * sizeof(float));
      } else {
        for (int64_t i = 0; i < n; ++i) acc[i] += s[i];
      }
      return absl::OkStatus();
    }
    case DType::kBFloat16:
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      const bool bf16 = dtype == DType::kBFloat16;
      for (int64_t i = 0; i < n; ++i) {
        const float v =
            bf16 ? core::BFloat16ToFloat(s[i]) : core::HalfToFloat(s[i]);
        acc[i] = first ? v : acc[i] + v;
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("accumulate: unknown dtype ", static_cast<int>(dtype)));
}

absl::Status HostEngineMath::AddRounded(void* dst, DType dtype,
                                        const float* add, int64_t n) {
  if (absl::Status s = CheckCount(n, "add"); !s.ok()) return s;
  switch (dtype) {
    case DType::kFloat32: {
      float* g = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) g[i] += add[i];
      return absl::OkStatus();
    }
    case DType::kBFloat16:
    case DType::kFloat16: {
      uint16_t* g = static_cast<uint16_t*>(dst);
      const bool bf16 = dtype == DType::kBFloat16;
      for (int64_t i = 0; i < n; ++i) {
        const float v =
            (bf16 ? core::BFloat16ToFloat(g[i]) : core::HalfToFloat(g[i])) +
            add[i];
        g[i] = bf16 ? core::FloatToBFloat16(v) : core::FloatToHalf(v);
      }
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("add: unknown dtype ", static_cast<int>(dtype)));
}

absl::Status HostEngineMath::ToLowPrecision(const float* in, void* out,
                                            DType dtype, int64_t n) {
  if (absl::Status s = CheckCount(n, "low-precision copy"); !s.ok()) return s;
  if (dtype != DType::kBFloat16 && dtype != DType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("low-precision copy: dtype must be bf16 or fp16, got ",
                     core::DTypeName(dtype)));
  }
  uint16_t* o = static_cast<uint16_t*>(out);
  const bool bf16 = dtype == DType::kBFloat16;
  for (int64_t i = 0; i < n; ++i) {
    o[i] = bf16 ? core::FloatToBFloat16(in[i]) : core::FloatToHalf(in[i]);
  }
  return absl::OkStatus();
}

absl::Status HostEngineMath::SquaresInto(const float* grad, int64_t n,
                                         core::GradNormPartial* partial) {
  return core::GradClipper::Accumulate(grad, n, partial);
}

absl::Status HostEngineMath::AdamW(const core::AdamW& opt, int64_t step,
                                   float grad_scale, const float* grad,
                                   float* param, float* exp_avg,
                                   float* exp_avg_sq, int64_t n,
                                   DType lowp_dtype, void* lowp_out) {
  return opt.Update(step, grad_scale, grad, param, exp_avg, exp_avg_sq, n,
                    lowp_dtype, lowp_out);
}

absl::Status HostEngineMath::Sgd(const core::Sgd& opt, int64_t step,
                                 float grad_scale, const float* grad,
                                 float* param, float* momentum, int64_t n,
                                 DType lowp_dtype, void* lowp_out) {
  return opt.Update(step, grad_scale, grad, param, momentum, n, lowp_dtype,
                    lowp_out);
}

}  // namespace shardd::node
