#ifndef SHARDD_DAEMON_CORE_GRAD_CLIP_H_
#define SHARDD_DAEMON_CORE_GRAD_CLIP_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/core/kernel_dispatch.h"

namespace shardd::core {

// The sum of squares of some gradient elements, held exactly.
//
// The square of a float is exact in a 48-bit integer times a power of two, so
// the sum is kept as one fixed-point integer in units of 2^-300 (little-endian
// 64-bit limbs; 640 bits hold 2^63 squares of FLT_MAX). Adding is integer
// addition: the result does not depend on how the tensor was split into
// shards, nor on the order in which partials are combined. The struct is
// plain data, meant to be sent over the network as it is (limbs, then the two
// counters) and summed there with GradClipper::Merge.
struct GradNormPartial {
  static constexpr int kLimbs = 10;
  std::array<uint64_t, kLimbs> limbs{};
  int64_t elements = 0;   // Real elements accumulated.
  int64_t nonfinite = 0;  // Of which NaN or infinite (not in `limbs`).

  // The sum of squares, rounded to double (deterministic: a function of the
  // exact integer only; within a few ulps).
  double SumOfSquares() const;
};

// The squares of a gradient binned by exponent, the form a GPU kernel
// computes them in (integer additions, so in any order exactly): lo[e] +
// 2^64 hi[e] is the exact sum of M^2 over the elements whose biased
// exponent is e, M being the 24-bit significand (with the implicit bit;
// exponent 0 counts as 1). Exponent 255 (NaN, infinity) is only counted,
// in `nonfinite`.
struct SquareBins {
  static constexpr int kExponents = 256;
  std::array<uint64_t, kExponents> lo{};
  std::array<uint64_t, kExponents> hi{};
  int64_t elements = 0;
  int64_t nonfinite = 0;
};

// What the final reduction decides.
struct ClipResult {
  double total_norm = 0.0;  // sqrt of the exact sum of squares.
  float scale = 1.0f;       // The gradient multiplier (AdamW/Sgd grad_scale).
  bool clipped = false;     // scale < 1.
};

// Global gradient-norm clipping (PyTorch's clip_grad_norm_ with the 2-norm),
// split so that the reduction can run over the network:
//   1. every rank computes a GradNormPartial of each of its gradient shards
//      over the shard's *real* elements only (padding never counts);
//   2. the partials are combined (Merge / Finish, in shard-index order; the
//      sum is exact, so any order gives the same bits);
//   3. Finish turns the total into scale = min(1, max_norm / (norm + 1e-6)).
// A non-finite gradient (any NaN or infinite element) makes Finish return
// FAILED_PRECONDITION instead of a scale: the step must not be applied with a
// NaN or zero scale, and an error status cannot be ignored by accident.
// max_norm <= 0 means no clipping (scale 1), but the norm is still reported.
//
// Immutable after Create; thread-safe. Keeps no pointer it is given.
class GradClipper {
 public:
  // max_norm must not be NaN or infinite: INVALID_ARGUMENT
  // "grad_clip.max_norm must be finite".
  static absl::StatusOr<GradClipper> Create(double max_norm);

  // The partial of one shard: squares of shard[0, real_numel). Elements after
  // real_numel (padding) are never read. real_numel >= 0; shard may be null
  // only when real_numel == 0.
  static absl::StatusOr<GradNormPartial> ShardPartial(const float* shard,
                                                      int64_t real_numel);

  // Adds grad[0, n) to `partial` (for a shard held in pieces), with the best
  // instruction set this CPU has.
  static absl::Status Accumulate(const float* grad, int64_t n,
                                 GradNormPartial* partial);

  // The same with the kernels of `isa` (kBaseline: the scalar reference; any
  // isa adds the same bits). INVALID_ARGUMENT "grad_clip.isa" for an isa the
  // CPU does not support.
  static absl::Status Accumulate(const float* grad, int64_t n,
                                 GradNormPartial* partial, KernelIsa isa);

  // Adds binned squares to `partial`: exactly what Accumulate over the same
  // elements adds. INVALID_ARGUMENT for negative counts or more nonfinite
  // elements than elements; OUT_OF_RANGE if the element count overflows.
  static absl::Status AddBins(const SquareBins& bins, GradNormPartial* partial);

  // into += from, exactly. OUT_OF_RANGE if the element count overflows.
  static absl::Status Merge(const GradNormPartial& from, GradNormPartial* into);

  // Combines the partials in index order and computes the clip scale.
  absl::StatusOr<ClipResult> Finish(
      absl::Span<const GradNormPartial> partials) const;

  double max_norm() const { return max_norm_; }

 private:
  explicit GradClipper(double max_norm) : max_norm_(max_norm) {}

  double max_norm_;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_GRAD_CLIP_H_
