#include "daemon/core/grad_clip.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which
// -Wmaybe-uninitialized flags inside the header wherever they are inlined;
// the suppression covers the header's lines only, not this file's.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/core/kernel_dispatch.h"

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

// The exponent bins of up to kFlushElements elements (the part of a chunk
// that the window kernels below leave to them), before they are folded.
struct ChunkBins {
  uint64_t bins[256];
  int64_t nonfinite;
};

// The significand of a float as an integer: 24 bits with the implicit bit,
// 23 without for exponent 0 (zero, subnormal).
inline uint64_t Significand(uint32_t bits, uint32_t exponent) {
  return (bits & 0x7fffffu) | (static_cast<uint32_t>(exponent != 0) << 23);
}

// The reference: squares of grad[0, n) into bins, one element at a time.
void BinScalar(const float* grad, int64_t n, ChunkBins& out) {
  uint64_t bins[kBinSets][256];
  std::memset(bins, 0, sizeof(bins));
  int64_t nonfinite = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &grad[i], sizeof(bits));
    const uint32_t exponent = (bits >> 23) & 0xffu;
    const uint64_t significand = Significand(bits, exponent);
    bins[i % kBinSets][exponent] += significand * significand;
    nonfinite += exponent == 0xffu;
  }
  for (int e = 0; e < 256; ++e) {
    for (int k = 0; k < kBinSets; ++k) out.bins[e] += bins[k][e];
  }
  out.nonfinite += nonfinite;
}

// bins[e][k]: sum of M^2 for the elements whose biased exponent is e, where
// the element is M * 2^(max(e,1) - 150) with M the 24-bit significand. The
// square is M^2 * 2^(2*max(e,1) - 300): integer M^2 shifted left by
// 2*max(e,1) in units of 2^-300. Exponent 255 (NaN/inf) is only counted.
void FoldBins(const ChunkBins& bins, int64_t n, GradNormPartial& partial) {
  for (int e = 0; e < 255; ++e) {
    // < 2^64: at most 2^16 squares below 2^48 each.
    AddShifted(bins.bins[e], 2 * std::max(e, 1), partial.limbs);
  }
  partial.nonfinite += bins.nonfinite;
  partial.elements += n;
}

// Squares of grad[0, n), n <= kFlushElements, added exactly to `partial`.
void AccumulateChunk(const float* grad, int64_t n, GradNormPartial& partial) {
  ChunkBins bins{};
  BinScalar(grad, n, bins);
  FoldBins(bins, n, partial);
}

// The vector kernels take a chunk in blocks. A block whose non-zero
// magnitudes all lie within kWindow binades below its largest (the common
// case: a gradient rarely spans 2^29 within 2048 neighbours) is summed in
// fixed point without bins: with `base` the block's lowest binade, every
// square is an integer number of units 2^(2*base - 300) below 2^104, computed
// exactly in double (x * 2^(150-base), squared: at most 48 significant bits),
// and split exactly into a high and a low 52-bit integer (floor, subtract,
// and the 2^52 trick to read an integer out of a double). 2048 of either sum
// to below 2^63 in 64-bit lanes. Any other block (NaN/inf, or a tiny element
// next to a large one) goes through the exponent bins.
constexpr int kWindow = 29;
constexpr int64_t kBlock = 2048;
// Independent bin sets in the vectorised binning: 8 * 256 * 8 bytes stay in L1.
constexpr int kVectorBinSets = 8;
constexpr uint64_t kTwo52Bits = 0x4330000000000000u;  // The bits of 2^52.

// The window's lowest binade for a block whose largest magnitude has bits
// max_abs and whose smallest non-zero one has bits min_abs; 0 when the block
// must be binned instead.
inline int WindowBase(uint32_t max_abs, uint32_t min_abs) {
  const int top = std::max<int>(static_cast<int>(max_abs >> 23), 1);
  const int base = std::max(top - kWindow + 1, 1);
  const int low = std::max<int>(static_cast<int>(min_abs >> 23), 1);
  return low < base ? 0 : base;
}

// One element of a windowed block, in scalar arithmetic (the same exact
// integers the vector lanes compute).
inline void WindowElement(float x, double scale, uint64_t& lo, uint64_t& hi) {
  const double y = static_cast<double>(x) * scale;
  const double d = y * y;
  const double h = std::floor(d * 0x1p-52);
  hi += static_cast<uint64_t>(h);
  lo += static_cast<uint64_t>(d - h * 0x1p52);
}

// Folds a windowed block's sums: units of 2^(2*base - 300).
inline void FoldWindow(uint64_t lo, uint64_t hi, int base, Limbs& limbs) {
  AddShifted(lo, 2 * base, limbs);
  AddShifted(hi, 2 * base + 52, limbs);
}

// --- AVX2 ---

// Sums a block in the window if it fits (true), else leaves it (false).
SHARDD_TARGET_AVX2 bool WindowBlockAvx2(const float* grad, int64_t n,
                                        Limbs& limbs) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i one = _mm256_set1_epi32(1);
  __m256i max_v = _mm256_setzero_si256();
  __m256i min_v = _mm256_set1_epi32(-1);  // min(|x| - 1): zero wraps to max.
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i a = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grad + i)),
        abs_mask);
    max_v = _mm256_max_epu32(max_v, a);
    min_v = _mm256_min_epu32(min_v, _mm256_sub_epi32(a, one));
  }
  alignas(32) uint32_t max_lanes[8];
  alignas(32) uint32_t min_lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(max_lanes), max_v);
  _mm256_store_si256(reinterpret_cast<__m256i*>(min_lanes), min_v);
  uint32_t max_abs = 0;
  uint32_t min_minus_one = ~0u;
  for (int l = 0; l < 8; ++l) {
    max_abs = std::max(max_abs, max_lanes[l]);
    min_minus_one = std::min(min_minus_one, min_lanes[l]);
  }
  for (int64_t j = i; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &grad[j], sizeof(bits));
    max_abs = std::max(max_abs, bits & 0x7fffffffu);
    min_minus_one = std::min(min_minus_one, (bits & 0x7fffffffu) - 1);
  }
  if (max_abs >= 0x7f800000u) return false;
  if (max_abs == 0) return true;
  const int base = WindowBase(max_abs, min_minus_one + 1);
  if (base == 0) return false;
  const double scale = std::ldexp(1.0, 150 - base);
  const __m256d scale_v = _mm256_set1_pd(scale);
  const __m256d inv52 = _mm256_set1_pd(0x1p-52);
  const __m256d two52 = _mm256_set1_pd(0x1p52);
  const __m256i magic = _mm256_set1_epi64x(static_cast<int64_t>(kTwo52Bits));
  __m256i lo_v[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  __m256i hi_v[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (i = 0; i + 8 <= n; i += 8) {
    // The next block streams in while this one is summed from L1.
    _mm_prefetch(reinterpret_cast<const char*>(grad + i + kBlock), _MM_HINT_T0);
    const __m256 v = _mm256_loadu_ps(grad + i);
    for (int half = 0; half < 2; ++half) {
      const __m128 x =
          half == 0 ? _mm256_castps256_ps128(v) : _mm256_extractf128_ps(v, 1);
      const __m256d y = _mm256_mul_pd(_mm256_cvtps_pd(x), scale_v);
      const __m256d d = _mm256_mul_pd(y, y);
      const __m256d h = _mm256_floor_pd(_mm256_mul_pd(d, inv52));
      const __m256d l = _mm256_sub_pd(d, _mm256_mul_pd(h, two52));
      hi_v[half] = _mm256_add_epi64(
          hi_v[half], _mm256_sub_epi64(
                          _mm256_castpd_si256(_mm256_add_pd(h, two52)), magic));
      lo_v[half] = _mm256_add_epi64(
          lo_v[half], _mm256_sub_epi64(
                          _mm256_castpd_si256(_mm256_add_pd(l, two52)), magic));
    }
  }
  alignas(32) uint64_t lanes[2][4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[0]),
                     _mm256_add_epi64(lo_v[0], lo_v[1]));
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[1]),
                     _mm256_add_epi64(hi_v[0], hi_v[1]));
  uint64_t lo = 0;
  uint64_t hi = 0;
  for (int l = 0; l < 4; ++l) {
    lo += lanes[0][l];
    hi += lanes[1][l];
  }
  for (; i < n; ++i) WindowElement(grad[i], scale, lo, hi);
  FoldWindow(lo, hi, base, limbs);
  return true;
}

SHARDD_TARGET_AVX2 void AccumulateChunkAvx2(const float* grad, int64_t n,
                                            GradNormPartial& partial) {
  ChunkBins bins{};
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    if (!WindowBlockAvx2(grad + begin, len, partial.limbs)) {
      BinScalar(grad + begin, len, bins);
    }
  }
  FoldBins(bins, n, partial);
}

// --- AVX-512 ---

SHARDD_TARGET_AVX512 bool WindowBlockAvx512(const float* grad, int64_t n,
                                            Limbs& limbs) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i one = _mm512_set1_epi32(1);
  __m512i max_v = _mm512_setzero_si512();
  __m512i min_v = _mm512_set1_epi32(-1);  // min(|x| - 1): zero wraps to max.
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(grad + i), abs_mask);
    max_v = _mm512_max_epu32(max_v, a);
    min_v = _mm512_min_epu32(min_v, _mm512_sub_epi32(a, one));
  }
  if (i < n) {
    // Lanes past n load as zero, which changes neither the max nor the min.
    const auto k = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i a =
        _mm512_and_si512(_mm512_maskz_loadu_epi32(k, grad + i), abs_mask);
    max_v = _mm512_max_epu32(max_v, a);
    min_v = _mm512_min_epu32(min_v, _mm512_sub_epi32(a, one));
  }
  const uint32_t max_abs = _mm512_reduce_max_epu32(max_v);
  const uint32_t min_abs = _mm512_reduce_min_epu32(min_v) + 1;
  if (max_abs >= 0x7f800000u) return false;
  if (max_abs == 0) return true;
  const int base = WindowBase(max_abs, min_abs);
  if (base == 0) return false;
  const __m512d scale = _mm512_set1_pd(std::ldexp(1.0, 150 - base));
  const __m512d inv52 = _mm512_set1_pd(0x1p-52);
  const __m512d two52 = _mm512_set1_pd(0x1p52);
  const __m512i magic = _mm512_set1_epi64(static_cast<int64_t>(kTwo52Bits));
  __m512i lo_v[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  __m512i hi_v[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (i = 0; i < n; i += 16) {
    // The next block streams in while this one is summed from L1 (one line
    // per iteration; a prefetch past the end of the array is harmless).
    _mm_prefetch(reinterpret_cast<const char*>(grad + i + kBlock), _MM_HINT_T0);
    // Past n (in the last vector only) zeros, whose squares add nothing.
    const __m512 v =
        n - i >= 16
            ? _mm512_loadu_ps(grad + i)
            : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - i)) - 1),
                                    grad + i);
    for (int half = 0; half < 2; ++half) {
      const __m256 x = half == 0 ? _mm512_castps512_ps256(v)
                                 : _mm256_castpd_ps(_mm512_extractf64x4_pd(
                                       _mm512_castps_pd(v), 1));
      const __m512d y = _mm512_mul_pd(_mm512_cvtps_pd(x), scale);
      const __m512d d = _mm512_mul_pd(y, y);
      const __m512d h = _mm512_roundscale_pd(
          _mm512_mul_pd(d, inv52), _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
      const __m512d l = _mm512_sub_pd(d, _mm512_mul_pd(h, two52));
      hi_v[half] = _mm512_add_epi64(
          hi_v[half], _mm512_sub_epi64(
                          _mm512_castpd_si512(_mm512_add_pd(h, two52)), magic));
      lo_v[half] = _mm512_add_epi64(
          lo_v[half], _mm512_sub_epi64(
                          _mm512_castpd_si512(_mm512_add_pd(l, two52)), magic));
    }
  }
  FoldWindow(static_cast<uint64_t>(
                 _mm512_reduce_add_epi64(_mm512_add_epi64(lo_v[0], lo_v[1]))),
             static_cast<uint64_t>(
                 _mm512_reduce_add_epi64(_mm512_add_epi64(hi_v[0], hi_v[1]))),
             base, limbs);
  return true;
}

// The bins of the AVX-512 binning: bins[e][k] for kVectorBinSets sets k
// (adjacent, so that one offset per exponent addresses all of them). A chunk
// zeroes them once and folds them into its ChunkBins at the end.
struct VectorBins {
  alignas(64) uint64_t bins[256][kVectorBinSets];
  int64_t nonfinite;
  bool used;
};

// The binning of BinScalar with the exponents and squares computed 16 at a
// time into a small buffer, so that the scalar loop is only the bin
// additions, spread over kVectorBinSets independent sets.
SHARDD_TARGET_AVX512 void BinAvx512(const float* grad, int64_t n,
                                    VectorBins& out) {
  constexpr int kBuffer = 256;
  alignas(64) uint64_t squares[kBuffer];
  alignas(64) uint32_t offsets[kBuffer];  // Byte offset of bins[e][0].
  if (!out.used) {
    std::memset(out.bins, 0, sizeof(out.bins));
    out.used = true;
  }
  const __m512i exponent_mask = _mm512_set1_epi32(0xff);
  const __m512i fraction_mask = _mm512_set1_epi32(0x7fffff);
  const __m512i implicit_bit = _mm512_set1_epi32(0x800000);
  int64_t nonfinite = 0;
  int64_t i = 0;
  while (n - i >= 16) {
    const int len = static_cast<int>(std::min<int64_t>(kBuffer, (n - i) & ~15));
    for (int j = 0; j < len; j += 16) {
      // As in WindowBlockAvx512: the next block streams in meanwhile.
      _mm_prefetch(reinterpret_cast<const char*>(grad + i + j + kBlock),
                   _MM_HINT_T0);
      const __m512i x = _mm512_loadu_si512(grad + i + j);
      const __m512i e =
          _mm512_and_si512(_mm512_srli_epi32(x, 23), exponent_mask);
      const __m512i fraction = _mm512_and_si512(x, fraction_mask);
      const __m512i m = _mm512_mask_or_epi32(
          fraction, _mm512_test_epi32_mask(e, e), fraction, implicit_bit);
      const __m512i m_lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(m));
      const __m512i m_hi =
          _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(m, 1));
      _mm512_store_si512(squares + j, _mm512_mul_epu32(m_lo, m_lo));
      _mm512_store_si512(squares + j + 8, _mm512_mul_epu32(m_hi, m_hi));
      _mm512_store_si512(offsets + j,
                         _mm512_slli_epi32(e, 3 + 3));  // * 8 sets * 8 bytes.
      nonfinite +=
          __builtin_popcount(_mm512_cmpeq_epi32_mask(e, exponent_mask));
    }
    char* base = reinterpret_cast<char*>(&out.bins[0][0]);
    for (int j = 0; j < len; j += kVectorBinSets) {
#pragma GCC unroll 8
      for (int k = 0; k < kVectorBinSets; ++k) {
        uint64_t* bin = reinterpret_cast<uint64_t*>(base + offsets[j + k]) + k;
        *bin += squares[j + k];
      }
    }
    i += len;
  }
  for (; i < n; ++i) {  // The last < 16 elements.
    uint32_t bits;
    std::memcpy(&bits, &grad[i], sizeof(bits));
    const uint32_t exponent = (bits >> 23) & 0xffu;
    const uint64_t significand = Significand(bits, exponent);
    out.bins[exponent][0] += significand * significand;
    nonfinite += exponent == 0xffu;
  }
  out.nonfinite += nonfinite;
}

SHARDD_TARGET_AVX512 void AccumulateChunkAvx512(const float* grad, int64_t n,
                                                GradNormPartial& partial) {
  VectorBins vector_bins;
  vector_bins.nonfinite = 0;
  vector_bins.used = false;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    if (!WindowBlockAvx512(grad + begin, len, partial.limbs)) {
      BinAvx512(grad + begin, len, vector_bins);
    }
  }
  ChunkBins bins{};
  if (vector_bins.used) {
    for (int e = 0; e < 256; ++e) {
      for (int k = 0; k < kVectorBinSets; ++k) {
        bins.bins[e] += vector_bins.bins[e][k];
      }
    }
    bins.nonfinite = vector_bins.nonfinite;
  }
  FoldBins(bins, n, partial);
}

using ChunkKernel = void (*)(const float*, int64_t, GradNormPartial&);

ChunkKernel SelectChunkKernel(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return AccumulateChunkAvx512;
    case KernelIsa::kAvx2:
      return AccumulateChunkAvx2;
    default:
      return AccumulateChunk;
  }
}

// The best instruction set, resolved once (CPUID does not change).
KernelIsa BestIsa() {
  static const KernelIsa best = SupportedKernelIsas().back();
  return best;
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
  return Accumulate(grad, n, partial, BestIsa());
}

absl::Status GradClipper::Accumulate(const float* grad, int64_t n,
                                     GradNormPartial* partial, KernelIsa isa) {
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
  KernelIsa resolved;
  if (absl::Status s = ResolveKernelIsa(isa, "grad_clip.isa", &resolved);
      !s.ok()) {
    return s;
  }
  const ChunkKernel kernel = SelectChunkKernel(resolved);
  for (int64_t begin = 0; begin < n; begin += kFlushElements) {
    kernel(grad + begin, std::min(kFlushElements, n - begin), *partial);
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
  // As FoldBins folds them: M^2 in units of 2^-300, shifted by
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
