#include "daemon/node/testing/guarded_engine_math.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/dtype.h"

namespace shardd::node::testing {

absl::StatusOr<void*> GuardedEngineMath::Device(const void* p, int64_t bytes,
                                                absl::string_view what) {
  calls_.fetch_add(1);
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative size ", bytes));
  }
  if (bytes == 0 && p == nullptr) return nullptr;
  if (!arena_->Contains(p, bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes, " B at ",
                                                   absl::StrFormat("%p", p),
                                                   " are not device memory"));
  }
  return arena_->Alias(p);
}

absl::StatusOr<std::unique_ptr<memory::ByteBuffer>>
GuardedEngineMath::AllocateScratch(absl::string_view name, int64_t bytes) {
  return arena_->Allocate(name, bytes);
}

absl::Status GuardedEngineMath::Upload(void* dst, const void* host_src,
                                       int64_t bytes) {
  absl::StatusOr<void*> d = Device(dst, bytes, "upload destination");
  if (!d.ok()) return d.status();
  return host_.Upload(*d, host_src, bytes);
}

absl::Status GuardedEngineMath::Download(void* host_dst, const void* src,
                                         int64_t bytes) {
  absl::StatusOr<void*> s = Device(src, bytes, "download source");
  if (!s.ok()) return s.status();
  return host_.Download(host_dst, *s, bytes);
}

absl::Status GuardedEngineMath::Zero(void* dst, int64_t bytes) {
  absl::StatusOr<void*> d = Device(dst, bytes, "zero-fill");
  if (!d.ok()) return d.status();
  return host_.Zero(*d, bytes);
}

absl::Status GuardedEngineMath::Accumulate(float* acc, const void* src,
                                           core::DType dtype, int64_t n,
                                           bool first) {
  absl::StatusOr<void*> a = Device(acc, n * 4, "accumulator");
  if (!a.ok()) return a.status();
  absl::StatusOr<void*> s =
      Device(src, n * core::DTypeSize(dtype), "accumulated gradient");
  if (!s.ok()) return s.status();
  return host_.Accumulate(static_cast<float*>(*a), *s, dtype, n, first);
}

absl::Status GuardedEngineMath::AddRounded(void* dst, core::DType dtype,
                                           const float* add, int64_t n) {
  absl::StatusOr<void*> d =
      Device(dst, n * core::DTypeSize(dtype), "rounded sum");
  if (!d.ok()) return d.status();
  absl::StatusOr<void*> a = Device(add, n * 4, "addend");
  if (!a.ok()) return a.status();
  return host_.AddRounded(*d, dtype, static_cast<const float*>(*a), n);
}

absl::Status GuardedEngineMath::ToLowPrecision(const float* in, void* out,
                                               core::DType dtype, int64_t n) {
  absl::StatusOr<void*> i = Device(in, n * 4, "low-precision source");
  if (!i.ok()) return i.status();
  absl::StatusOr<void*> o =
      Device(out, n * core::DTypeSize(dtype), "low-precision copy");
  if (!o.ok()) return o.status();
  return host_.ToLowPrecision(static_cast<const float*>(*i), *o, dtype, n);
}

absl::Status GuardedEngineMath::SquaresInto(const float* grad, int64_t n,
                                            core::GradNormPartial* partial) {
  absl::StatusOr<void*> g = Device(grad, n * 4, "gradient norm");
  if (!g.ok()) return g.status();
  return host_.SquaresInto(static_cast<const float*>(*g), n, partial);
}

absl::Status GuardedEngineMath::AdamW(const core::AdamW& opt, int64_t step,
                                      float grad_scale, const float* grad,
                                      float* param, float* exp_avg,
                                      float* exp_avg_sq, int64_t n,
                                      core::DType lowp_dtype, void* lowp_out) {
  absl::StatusOr<void*> g = Device(grad, n * 4, "adamw grad");
  absl::StatusOr<void*> p = Device(param, n * 4, "adamw param");
  absl::StatusOr<void*> m = Device(exp_avg, n * 4, "adamw exp_avg");
  absl::StatusOr<void*> v = Device(exp_avg_sq, n * 4, "adamw exp_avg_sq");
  for (const auto* r : {&g, &p, &m, &v}) {
    if (!r->ok()) return r->status();
  }
  void* out = nullptr;
  if (lowp_out != nullptr) {
    absl::StatusOr<void*> o =
        Device(lowp_out, n * core::DTypeSize(lowp_dtype), "adamw lowp copy");
    if (!o.ok()) return o.status();
    out = *o;
  }
  return host_.AdamW(opt, step, grad_scale, static_cast<const float*>(*g),
                     static_cast<float*>(*p), static_cast<float*>(*m),
                     static_cast<float*>(*v), n, lowp_dtype, out);
}

absl::Status GuardedEngineMath::Sgd(const core::Sgd& opt, int64_t step,
                                    float grad_scale, const float* grad,
                                    float* param, float* momentum, int64_t n,
                                    core::DType lowp_dtype, void* lowp_out) {
  absl::StatusOr<void*> g = Device(grad, n * 4, "sgd grad");
  if (!g.ok()) return g.status();
  absl::StatusOr<void*> p = Device(param, n * 4, "sgd param");
  if (!p.ok()) return p.status();
  void* mom = nullptr;
  if (momentum != nullptr) {
    absl::StatusOr<void*> b = Device(momentum, n * 4, "sgd momentum");
    if (!b.ok()) return b.status();
    mom = *b;
  }
  void* out = nullptr;
  if (lowp_out != nullptr) {
    absl::StatusOr<void*> o =
        Device(lowp_out, n * core::DTypeSize(lowp_dtype), "sgd lowp copy");
    if (!o.ok()) return o.status();
    out = *o;
  }
  return host_.Sgd(opt, step, grad_scale, static_cast<const float*>(*g),
                   static_cast<float*>(*p), static_cast<float*>(mom), n,
                   lowp_dtype, out);
}

}  // namespace shardd::node::testing
