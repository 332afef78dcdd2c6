#ifndef SHARDD_DAEMON_CORE_MODEL_CONFIG_H_
#define SHARDD_DAEMON_CORE_MODEL_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/core/adamw.h"
#include "daemon/core/dtype.h"
#include "daemon/core/memory_plan.h"
#include "daemon/core/sgd.h"
#include "daemon/core/shard_plan.h"
#include "daemon/core/tensor_init.h"
#include "daemon/core/unit_layout.h"

namespace shardd::core {

// A registered model, as plain data (the proto-free twin of shardd.v1
// ModelSpec; daemon/node/proto_convert converts). Field names follow the
// proto, so that error paths such as "units[2].tensors[0].shape" and
// "config.optimizer.adamw.lr" are the proto field paths below ModelSpec.
// Defaults the proto documents for unset values are resolved by the
// conversion where they need no context (strategy, alignment,
// max_gathered_units); the ones that depend on the units or on W stay
// explicit here (param_dtype, reduce_dtype, sharding_factor 0).

struct TensorConfig {
  TensorSpec spec;  // Name, shape and the trainer's dtype.
  InitSpec init;
  bool exclude_from_weight_decay = false;
};

struct UnitConfig {
  std::string name;
  std::vector<TensorConfig> tensors;
  // The unit's own alignment, or the config's default_alignment when the
  // unit set none (resolved on conversion).
  AlignmentSpec alignment;
};

struct ShardingConfig {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  // F; 0: the strategy's default (see ShardPlan::Create).
  int64_t sharding_factor = 0;
  // dtype of gathered parameters; nullopt: each unit's tensor dtype.
  std::optional<DType> param_dtype;
  // dtype gradients are reduced in; nullopt: the gathered dtype.
  std::optional<DType> reduce_dtype;
  std::variant<AdamWOptions, SgdOptions> optimizer = AdamWOptions{};
  // Global gradient L2 norm clip; 0: none.
  double max_grad_norm = 0.0;
  // K: units gathered or in flight at once.
  int64_t max_gathered_units = 2;
  // G: units whose gradient is being reduced at once (gradient slots when
  // F > 1). Not compared between ranks: it changes no collective.
  int64_t max_reducing_units = 2;
};

struct ModelConfig {
  std::vector<UnitConfig> units;
  ShardingConfig config;
};

// Whether tensor initialisation takes part in a comparison. Ranks that
// register a model for the first time must agree on it (replicas must start
// identical); a trainer re-attaching to its daemon may not (init is ignored
// then, and RegisterModelResponse.model_fingerprint excludes it).
enum class InitScope { kInclude, kExclude };

// Checks a model for a job of `world_size` ranks. INVALID_ARGUMENT with the
// field path (below ModelSpec) and the reason, e.g.
// "units[1].tensors[0].shape[2]: must be >= 1, got 0": no units, empty or
// duplicate unit or tensor names, bad dims or dtypes, mixed dtypes in a
// unit, init that does not fit its tensor (uploaded values of the wrong
// size or dtype, negative std), a bad alignment, strategy/F that do not fit
// W (ShardPlan), unknown param/reduce dtypes, optimizer hyper-parameters
// (AdamW::Create / Sgd::Create, plus the API's eps > 0 and
// 0 <= dampening <= 1), a negative or non-finite max_grad_norm,
// max_gathered_units < 1, and sizes that overflow (UnitLayout).
absl::Status Validate(const ModelConfig& model, int64_t world_size);

// A stable 64-bit hash of every field that must agree across ranks: unit
// and tensor names, order, shapes and dtypes, alignment (they fix the flat
// layout and every collective's size), exclude_from_weight_decay, strategy,
// F, param/reduce dtypes (collective dtypes), the optimizer kind and every
// hyper-parameter and max_grad_norm (replicas must compute bit-identical
// updates), max_gathered_units (it bounds prefetch, so it fixes the order of
// AllGathers that ranks must match), and with InitScope::kInclude the init
// (kind, parameters and the uploaded bytes themselves). Doubles are hashed
// by bit pattern. The same on every machine and build (no std::hash).
uint64_t Fingerprint(const ModelConfig& model,
                     InitScope scope = InitScope::kInclude);

// OK when the models agree on the fields Fingerprint covers, else
// FAILED_PRECONDITION naming the first differing field and both values
// (mine first), e.g. "units[2].tensors[0].shape: [64, 32] vs [64, 16]",
// "config.optimizer.adamw.lr: 0.001 vs 0.01".
absl::Status CompareModels(const ModelConfig& mine, const ModelConfig& theirs,
                           InitScope scope = InitScope::kInclude);

// The dtype a unit's gathered flat buffer has: param_dtype, else the unit's
// tensor dtype. (The master copy is always fp32.)
DType GatheredDType(const ModelConfig& model, const UnitConfig& unit);

// The unit as UnitLayout sees it: tensors in the gathered dtype.
UnitSpec ToUnitSpec(const ModelConfig& model, const UnitConfig& unit);

// The layouts of every unit for F (the resolved sharding factor). Errors as
// Validate's for the units (with "units[i]: " in front).
absl::StatusOr<std::vector<UnitLayout>> BuildLayouts(const ModelConfig& model,
                                                     int64_t sharding_factor);

// What MemoryPlan needs: the optimizer's state kind, K and the reduce
// dtype (reduce_dtype, else param_dtype, else the units' dtype when they all
// share one, else fp32, the widest).
MemoryOptions ToMemoryOptions(const ModelConfig& model);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_MODEL_CONFIG_H_
