#include "daemon/core/unit_layout.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/checked_math.h"

namespace shardd::core {
namespace {

// Largest element count whose byte size (at 4 bytes per element, the fp32
// master copy) still fits in int64: every byte count derived from a layout
// is then representable.
constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 4;

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, " ", what));
}

// The block boundary of the flat buffer nearest to `target` (ties go to the
// lower one). Boundaries are every tensor's start and end, and in kBlock
// mode every multiple of the block size from a tensor's start.
int64_t NearestBoundary(const std::vector<TensorView>& tensors,
                        int64_t block_elements, int64_t target) {
  // The tensor whose range holds target (the last one whose offset <= it).
  auto it = std::upper_bound(
      tensors.begin(), tensors.end(), target,
      [](int64_t value, const TensorView& t) { return value < t.offset; });
  const TensorView& t = *std::prev(it);
  const int64_t end = t.offset + t.numel;
  int64_t lower = t.offset;
  int64_t upper = end;
  if (block_elements > 0) {
    const int64_t blocks_before = (target - t.offset) / block_elements;
    lower = t.offset + blocks_before * block_elements;
    upper = std::min(end, lower + block_elements);
  }
  if (target >= upper) return upper;
  return (target - lower) <= (upper - target) ? lower : upper;
}

}  // namespace

absl::StatusOr<UnitLayout> UnitLayout::Create(const UnitSpec& spec,
                                              int64_t sharding_factor,
                                              const AlignmentSpec& alignment) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("unit.name must not be empty");
  }
  const std::string unit = absl::StrCat("unit '", spec.name, "'");
  if (sharding_factor < 1) {
    return Invalid(unit, absl::StrCat("sharding_factor must be >= 1, got ",
                                      sharding_factor));
  }
  if (spec.tensors.empty()) {
    return Invalid(unit, "tensors: a unit must have at least one tensor");
  }
  switch (alignment.mode) {
    case AlignmentMode::kElement:
    case AlignmentMode::kWholeTensor:
      break;
    case AlignmentMode::kBlock:
      if (alignment.block_elements < 1) {
        return Invalid(unit, absl::StrCat("alignment.block_elements must be "
                                          ">= 1 for block alignment, got ",
                                          alignment.block_elements));
      }
      break;
    default:
      return Invalid(unit, absl::StrCat("alignment.mode: unknown value ",
                                        static_cast<int>(alignment.mode)));
  }

  UnitLayout layout;
  layout.name_ = spec.name;
  layout.alignment_ = alignment;
  layout.dtype_ = spec.tensors.front().dtype;
  absl::flat_hash_set<std::string> names;
  int64_t offset = 0;
  for (size_t t = 0; t < spec.tensors.size(); ++t) {
    const TensorSpec& tensor = spec.tensors[t];
    const std::string where =
        absl::StrCat(unit, " tensor[", t, "] '", tensor.name, "'");
    if (tensor.name.empty()) {
      return Invalid(unit,
                     absl::StrCat("tensor[", t, "].name must not be empty"));
    }
    if (!names.insert(tensor.name).second) {
      return Invalid(where, "name: duplicate tensor name in the unit");
    }
    if (!IsValidDType(tensor.dtype)) {
      return Invalid(where, absl::StrCat("dtype: unsupported value ",
                                         static_cast<int>(tensor.dtype)));
    }
    if (tensor.dtype != layout.dtype_) {
      return Invalid(where, absl::StrCat("dtype: ", DTypeName(tensor.dtype),
                                         " differs from the unit's ",
                                         DTypeName(layout.dtype_),
                                         " (a flat buffer has one dtype)"));
    }
    int64_t numel = 1;
    for (size_t d = 0; d < tensor.shape.size(); ++d) {
      if (tensor.shape[d] < 1) {
        return Invalid(where, absl::StrCat("shape[", d, "] must be >= 1, got ",
                                           tensor.shape[d]));
      }
      const std::optional<int64_t> product = CheckedMul(numel, tensor.shape[d]);
      if (!product || *product > kMaxElements) {
        return Invalid(where, absl::StrCat("shape[", d,
                                           "]: element count overflows 64-bit "
                                           "byte sizes"));
      }
      numel = *product;
    }
    const std::optional<int64_t> next = CheckedAdd(offset, numel);
    if (!next || *next > kMaxElements) {
      return Invalid(where,
                     "shape: unit element count overflows 64-bit byte sizes");
    }
    layout.tensors_.push_back(
        TensorView{tensor.name, tensor.shape, tensor.dtype, offset, numel});
    offset = *next;
  }
  layout.numel_ = offset;
  const int64_t total = offset;
  const int64_t f = sharding_factor;

  if (alignment.mode == AlignmentMode::kElement) {
    const int64_t per_shard = total / f + (total % f != 0 ? 1 : 0);
    const std::optional<int64_t> padded = CheckedMul(per_shard, f);
    if (!padded || *padded > kMaxElements) {
      return Invalid(unit, "padded element count overflows 64-bit byte sizes");
    }
    layout.padding_elements_ = *padded - total;
    for (int64_t i = 0; i < f; ++i) {
      const int64_t begin = i * per_shard;
      const int64_t real = std::clamp<int64_t>(total - begin, 0, per_shard);
      layout.shards_.push_back(ShardRange{begin, real, per_shard - real});
    }
    return layout;
  }

  // Block-aligned: cut at the block boundary nearest to each ideal cut
  // k*total/F. Nearest-point snapping is monotone, so cuts never cross, and
  // each cut moves by at most half a block, which keeps every shard within
  // one block of total/F.
  const int64_t block =
      alignment.mode == AlignmentMode::kBlock ? alignment.block_elements : 0;
  int64_t previous = 0;
  for (int64_t k = 1; k <= f; ++k) {
    int64_t cut = total;
    if (k < f) {
      // k*total/F without overflow: total < 2^61 and k <= F, so split it.
      const __int128 ideal = static_cast<__int128>(total) * k / f;
      cut =
          NearestBoundary(layout.tensors_, block, static_cast<int64_t>(ideal));
    }
    layout.shards_.push_back(ShardRange{previous, cut - previous, 0});
    previous = cut;
  }
  return layout;
}

int64_t UnitLayout::shard_imbalance_elements() const {
  int64_t lo = std::numeric_limits<int64_t>::max();
  int64_t hi = 0;
  for (const ShardRange& s : shards_) {
    lo = std::min(lo, s.stored());
    hi = std::max(hi, s.stored());
  }
  return hi - lo;
}

bool UnitLayout::even_shards() const { return shard_imbalance_elements() == 0; }

}  // namespace shardd::core
