#include "daemon/core/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

// Elements binned before the bins are folded into the limbs: each square is
// < 2^48, so 2^16 of them fit a 64-bit bin.
constexpr int64_t kFlushElements = int64_t{1} << 16;
// Independent bin sets, so that consecutive elements with the same exponent
// (the common case) do not wait on each other's read-modify-write.
constexpr int kBinSets = 4;

using Limbs = std::array<uint64_t, GradNormPartial::kLimbs>;

// limbs += value * 2^shift, with carries.
void AddShifted(uint64_t value, int shift, Limbs& limbs) {
  if (value == 0) return;
  const int index = shift / 64;
  const int offset = shift % 64;
  const uint64_t low = value << offset;
  const uint64_t high = offset == 0 ? 0 : value >> (64 - offset);
  unsigned __int128 sum = static_cast<unsigned __int128>(limbs[index]) + low;
  limbs[index] = static_cast<uint64_t>(sum);
  uint64_t carry = static_cast<uint64_t>(sum >> 64);
  for (int i = index + 1; i < GradNormPartial::kLimbs; ++i) {
    const uint64_t add = (i == index + 1 ? high : 0) + carry;  // no overflow:
    // high < 2^63 (offset >= 1) and carry <= 1.
    if (add == 0) break;
    sum = static_cast<unsigned __int128>(limbs[i]) + add;
    limbs[i] = static_cast<uint64_t>(sum);
    carry = static_cast<uint64_t>(sum >> 64);
  }
}

// Squares of grad[0, n), n <= kFlushElements, added exactly to `partial`.
void AccumulateChunk(const float* grad, int64_t n, GradNormPartial& partial) {
  // bins[k][e]: sum of M^2 for the elements whose biased exponent is e, where
  // the element is M * 2^(max(e,1) - 150) with M the 24-bit significand.
  uint64_t bins[kBinSets][256];
  std::memset(bins, 0, sizeof(bins));
  int64_t nonfinite = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &grad[i], sizeof(bits));
    const uint32_t exponent = (bits >> 23) & 0xffu;
    const uint64_t significand =
        (bits & 0x7fffffu) | (static_cast<uint32_t>(exponent != 0) << 23);
    bins[i % kBinSets][exponent] += significand * significand;
    nonfinite += exponent == 0xffu;
  }
  // The square is M^2 * 2^(2*max(e,1) - 300): integer M^2 shifted left by
  // 2*max(e,1) in units of 2^-300. Exponent 255 (NaN/inf) is only counted.
  for (int e = 0; e < 255; ++e) {
    uint64_t total = 0;  // < 2^64: at most 2^16 squares below 2^48 each.
    for (int k = 0; k < kBinSets; ++k) total += bins[k][e];
    AddShifted(total, 2 * std::max(e, 1), partial.limbs);
  }
  partial.nonfinite += nonfinite;
  partial.elements += n;
}

}  // namespace

double GradNormPartial::SumOfSquares() const {
  double sum = 0.0;
  for (int i = kLimbs - 1; i >= 0; --i) {
    sum += std::ldexp(static_cast<double>(limbs[i]), 64 * i - 300);
  }
  return sum;
}

absl::StatusOr<GradClipper> GradClipper::Create(double max_norm) {
  if (!std::isfinite(max_norm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_clip.max_norm must be finite (got ", max_norm, ")"));
  }
  return GradClipper(max_norm);
}

absl::Status GradClipper::Accumulate(const float* grad, int64_t n,
                                     GradNormPartial* partial) {
  if (partial == nullptr) {
    return absl::InvalidArgumentError("grad_clip partial must not be null");
  }
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_clip element count must be >= 0 (got ", n, ")"));
  }
  if (n > 0 && grad == nullptr) {
    return absl::InvalidArgumentError("grad_clip gradient must not be null");
  }
  if (partial->elements > INT64_MAX - n) {
    return absl::OutOfRangeError("grad_clip element count overflows int64");
  }
  for (int64_t begin = 0; begin < n; begin += kFlushElements) {
    AccumulateChunk(grad + begin, std::min(kFlushElements, n - begin),
                    *partial);
  }
  return absl::OkStatus();
}

absl::StatusOr<GradNormPartial> GradClipper::ShardPartial(const float* shard,
                                                          int64_t real_numel) {
  GradNormPartial partial;
  if (absl::Status s = Accumulate(shard, real_numel, &partial); !s.ok()) {
    return s;
  }
  return partial;
}

absl::Status GradClipper::AddBins(const SquareBins& bins,
                                  GradNormPartial* partial) {
  if (partial == nullptr) {
    return absl::InvalidArgumentError("grad_clip partial must not be null");
  }
  if (bins.elements < 0 || bins.nonfinite < 0 ||
      bins.nonfinite > bins.elements) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grad_clip bins: counts must satisfy 0 <= nonfinite <= elements (got ",
        bins.nonfinite, " of ", bins.elements, ")"));
  }
  if (partial->elements > INT64_MAX - bins.elements) {
    return absl::OutOfRangeError("grad_clip element count overflows int64");
  }
  // As AccumulateChunk folds its bins: M^2 in units of 2^-300, shifted by
  // 2*max(e,1); the high word 64 bits further.
  for (int e = 0; e < 255; ++e) {
    const int shift = 2 * std::max(e, 1);
    AddShifted(bins.lo[e], shift, partial->limbs);
    AddShifted(bins.hi[e], shift + 64, partial->limbs);
  }
  partial->elements += bins.elements;
  partial->nonfinite += bins.nonfinite;
  return absl::OkStatus();
}

absl::Status GradClipper::Merge(const GradNormPartial& from,
                                GradNormPartial* into) {
  if (into == nullptr) {
    return absl::InvalidArgumentError("grad_clip partial must not be null");
  }
  if (from.elements < 0 || from.nonfinite < 0 ||
      into->elements > INT64_MAX - from.elements) {
    return absl::OutOfRangeError(
        "grad_clip element count is negative or overflows int64");
  }
  // With at most 2^63 elements the sum stays below 2^619: no carry leaves the
  // top limb.
  uint64_t carry = 0;
  for (int i = 0; i < GradNormPartial::kLimbs; ++i) {
    const unsigned __int128 sum =
        static_cast<unsigned __int128>(into->limbs[i]) + from.limbs[i] + carry;
    into->limbs[i] = static_cast<uint64_t>(sum);
    carry = static_cast<uint64_t>(sum >> 64);
  }
  into->elements += from.elements;
  into->nonfinite += from.nonfinite;
  return absl::OkStatus();
}

absl::StatusOr<ClipResult> GradClipper::Finish(
    absl::Span<const GradNormPartial> partials) const {
  GradNormPartial total;
  for (const GradNormPartial& partial : partials) {
    if (absl::Status s = Merge(partial, &total); !s.ok()) return s;
  }
  if (total.nonfinite > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("gradient norm is not finite: ", total.nonfinite, " of ",
                     total.elements, " gradient elements are NaN or infinite"));
  }
  ClipResult result;
  result.total_norm = std::sqrt(total.SumOfSquares());
  if (max_norm_ > 0.0) {
    const double coefficient = max_norm_ / (result.total_norm + 1e-6);
    if (coefficient < 1.0) {
      result.scale = static_cast<float>(coefficient);
      result.clipped = true;
    }
  }
  return result;
}

}  // namespace shardd::core
