#ifndef SHARDD_CLIENT_EXAMPLE_MODEL_H_
#define SHARDD_CLIENT_EXAMPLE_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "client/init_values_file.h"
#include "client/mlp.h"
#include "daemon/core/adamw.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::client {

struct ExampleModelOptions {
  // {in, hidden..., out}: L = widths.size() - 1 layers, one unit each.
  std::vector<int64_t> widths = {32, 64, 64, 8};
  // Names the initial weights (each tensor gets its own seed from it).
  uint64_t init_seed = 1;
  v1::ShardingStrategy strategy = v1::SHARDING_STRATEGY_FULL_SHARD;
  int sharding_factor = 0;   // 0: the strategy's default (required HYBRID).
  core::AdamWOptions adamw;  // Passed literally (torch's defaults).
  double max_grad_norm = 0.0;
  int max_gathered_units = 2;  // K.
};

// The example trainer's model as the daemon sees it: the student MLP of the
// teacher-student task registered as one FSDP unit per layer
// (Mlp::UnitSpecFor: "weight" {out, in} then "bias" {out}, fp32), weights
// initialised normal(WeightSeed(l), 0, 1/sqrt(in)) by the daemon, biases
// zeros, AdamW with the given hyper-parameters (weight decay on every
// tensor, as ReferenceTrainer applies it).
//
// InitialParams() computes, in this process and with the daemon's own
// generator (core::TensorInit), the values the daemon materialises at step
// 0, so that a single-process ReferenceTrainer can start from them.
//
// Immutable after Create; thread-safe. Owns its Mlp (shape only).
class ExampleModel {
 public:
  // INVALID_ARGUMENT for widths Mlp rejects, max_gathered_units < 1,
  // sharding_factor < 0.
  static absl::StatusOr<ExampleModel> Create(ExampleModelOptions options);

  // The RegisterModel request (shared-memory transport). With `weights`
  // (tensor l: layer l's weight, as InitialParams gives it), each weight's
  // init names its values in that file instead of NormalInit: the same
  // values, read by the daemons from shared memory.
  v1::RegisterModelRequest RegisterRequest(
      const InitValuesFile* weights = nullptr) const;

  // InitialParams' weights in a new file in `directory`, for
  // RegisterRequest.
  absl::StatusOr<InitValuesFile> WriteInitialWeights(
      absl::string_view directory) const;

  // Per layer the flat [weight, bias] the daemon starts from.
  absl::StatusOr<std::vector<std::vector<float>>> InitialParams() const;

  // Seed of layer l's weight.
  uint64_t WeightSeed(int layer) const;

  const Mlp& mlp() const { return mlp_; }
  const ExampleModelOptions& options() const { return options_; }

 private:
  ExampleModel(ExampleModelOptions options, Mlp mlp)
      : options_(std::move(options)), mlp_(std::move(mlp)) {}

  ExampleModelOptions options_;
  Mlp mlp_;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_EXAMPLE_MODEL_H_
