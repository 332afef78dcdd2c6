#ifndef SHARDD_DAEMON_CORE_UNIT_LAYOUT_H_
#define SHARDD_DAEMON_CORE_UNIT_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/dtype.h"

namespace shardd::core {

// One parameter tensor of a unit, as the trainer registers it.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // Every dim >= 1; a scalar has shape {}.
  DType dtype = DType::kFloat32;
};

// An FSDP unit: the tensors flattened together into one FlatParameter.
struct UnitSpec {
  std::string name;
  std::vector<TensorSpec> tensors;
};

// Where shard boundaries may fall.
enum class AlignmentMode {
  // Anywhere (FSDP's FlatParameter): equal shards, the flat buffer padded at
  // the end to a multiple of F.
  kElement,
  // Only at block boundaries; blocks are counted from each tensor's first
  // element (a tensor's last block may be short). Shards are uneven.
  kBlock,
  // Only between tensors (each tensor is one block): Shampoo/Muon-style
  // optimizers that need whole matrices. Shards are uneven.
  kWholeTensor,
};

struct AlignmentSpec {
  AlignmentMode mode = AlignmentMode::kElement;
  int64_t block_elements = 0;  // Used by kBlock only; must be >= 1 there.
};

// Where one tensor lives in the flat buffer.
struct TensorView {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
  int64_t offset = 0;  // In elements from the start of the flat buffer.
  int64_t numel = 0;
};

// A half-open element range [offset, offset + numel) of the flat buffer.
struct ShardRange {
  int64_t offset = 0;
  int64_t numel = 0;    // Real elements of the unit in this shard.
  int64_t padding = 0;  // Padding elements stored after them (kElement only).
  int64_t end() const { return offset + numel; }
  int64_t stored() const { return numel + padding; }
};

// The flattened, padded layout of one unit for sharding factor F.
//
// Responsible for: the order and offsets of the unit's tensors in the flat
// buffer, the F shard ranges and the padding that they need. In kElement mode
// the flat buffer is the tensors back to back followed by `padding_elements`
// of padding, and shard i is [i*S, (i+1)*S) of it (the last shards hold the
// padding). In kBlock / kWholeTensor modes no padding is added: shard
// boundaries fall on block boundaries, chosen to minimise the largest shard
// (an optimal contiguous partition), so shards differ in size by at most
// the largest block.
//
// Immutable after Create, hence thread-safe. All tensors of a unit share one
// dtype (the flat buffer has one element type).
class UnitLayout {
 public:
  // Validates the spec (non-empty unit and names, dims >= 1, one supported
  // dtype for all tensors, F >= 1, block size >= 1, sizes that fit in 64-bit
  // byte counts) and computes the layout. Errors are INVALID_ARGUMENT with a
  // message naming the offending field, e.g. "unit 'l0' tensor 'w' shape[1]".
  static absl::StatusOr<UnitLayout> Create(const UnitSpec& spec,
                                           int64_t sharding_factor,
                                           const AlignmentSpec& alignment = {});

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  int64_t sharding_factor() const {
    return static_cast<int64_t>(shards_.size());
  }
  const AlignmentSpec& alignment() const { return alignment_; }

  // Real elements of the unit (Σ tensor numel).
  int64_t numel() const { return numel_; }
  // Elements of padding the layout adds (kElement: F*S - numel; else 0).
  int64_t padding_elements() const { return padding_elements_; }
  // Size of the gathered flat buffer: numel() + padding_elements().
  int64_t padded_numel() const { return numel_ + padding_elements_; }
  int64_t padded_bytes() const { return padded_numel() * DTypeSize(dtype_); }

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::vector<ShardRange>& shards() const { return shards_; }
  const ShardRange& shard(int64_t index) const { return shards_[index]; }
  // Largest stored shard minus the smallest (0 when shards are even).
  int64_t shard_imbalance_elements() const;
  bool even_shards() const;

 private:
  UnitLayout() = default;

  std::string name_;
  DType dtype_ = DType::kFloat32;
  AlignmentSpec alignment_;
  int64_t numel_ = 0;
  int64_t padding_elements_ = 0;
  std::vector<TensorView> tensors_;
  std::vector<ShardRange> shards_;
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_UNIT_LAYOUT_H_
