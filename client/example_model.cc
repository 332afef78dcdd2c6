#include "client/example_model.h"

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/counter_normal.h"
#include "client/teacher_student.h"
#include "daemon/core/tensor_init.h"

namespace shardd::client {

absl::StatusOr<ExampleModel> ExampleModel::Create(ExampleModelOptions options) {
  if (options.max_gathered_units < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_gathered_units must be >= 1, got ", options.max_gathered_units));
  }
  if (options.sharding_factor < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding_factor must be >= 0, got ", options.sharding_factor));
  }
  absl::StatusOr<Mlp> mlp = Mlp::Create(options.widths);
  if (!mlp.ok()) return mlp.status();
  return ExampleModel(std::move(options), std::move(*mlp));
}

uint64_t ExampleModel::WeightSeed(int layer) const {
  // A distinct, well-mixed seed per (init_seed, layer).
  return CounterNormal::Mix(options_.init_seed ^
                            CounterNormal::Mix(static_cast<uint64_t>(layer)));
}

v1::RegisterModelRequest ExampleModel::RegisterRequest(
    const InitValuesFile* weights) const {
  v1::RegisterModelRequest request;
  // Unspecified: the daemon's own (shared memory on a CPU daemon; CUDA IPC
  // on a GPU one, which the client stages through host copies).
  request.set_transport(v1::TRANSPORT_UNSPECIFIED);
  v1::ModelSpec* model = request.mutable_model();
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    const core::UnitSpec spec = mlp_.UnitSpecFor(l);
    v1::UnitSpec* unit = model->add_units();
    unit->set_name(spec.name);
    for (size_t t = 0; t < spec.tensors.size(); ++t) {
      v1::TensorSpec* tensor = unit->add_tensors();
      tensor->set_name(spec.tensors[t].name);
      for (int64_t d : spec.tensors[t].shape) tensor->add_shape(d);
      tensor->set_dtype(v1::DTYPE_FP32);
      if (spec.tensors[t].name == "weight" && weights != nullptr) {
        *tensor->mutable_init()->mutable_shared_memory() = weights->Ref(l);
      } else if (spec.tensors[t].name == "weight") {
        v1::NormalInit* normal = tensor->mutable_init()->mutable_normal();
        normal->set_seed(WeightSeed(l));
        normal->set_mean(0.0f);
        normal->set_std(static_cast<float>(
            TeacherStudent::StudentWeightInitStd(mlp_.in_features(l))));
      } else {
        tensor->mutable_init()->mutable_zeros();
      }
    }
  }
  v1::ShardingConfig* config = model->mutable_config();
  config->set_strategy(options_.strategy);
  config->set_sharding_factor(options_.sharding_factor);
  config->set_param_dtype(v1::DTYPE_FP32);
  config->set_reduce_dtype(v1::DTYPE_FP32);
  v1::AdamW* adamw = config->mutable_optimizer()->mutable_adamw();
  adamw->set_lr(options_.adamw.lr);
  adamw->set_beta1(options_.adamw.beta1);
  adamw->set_beta2(options_.adamw.beta2);
  adamw->set_eps(options_.adamw.eps);
  adamw->set_weight_decay(options_.adamw.weight_decay);
  config->set_max_grad_norm(options_.max_grad_norm);
  config->set_max_gathered_units(options_.max_gathered_units);
  return request;
}

absl::StatusOr<std::vector<std::vector<float>>> ExampleModel::InitialParams()
    const {
  std::vector<std::vector<float>> params;
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    std::vector<float> layer(mlp_.ParamCount(l), 0.0f);
    const int64_t weights = mlp_.BiasOffset(l);
    const float std = static_cast<float>(
        TeacherStudent::StudentWeightInitStd(mlp_.in_features(l)));
    for (int64_t k = 0; k < weights; ++k) {
      layer[k] = core::TensorInit::NormalAt(WeightSeed(l), 0.0f, std, k);
    }
    params.push_back(std::move(layer));
  }
  return params;
}

absl::StatusOr<InitValuesFile> ExampleModel::WriteInitialWeights(
    absl::string_view directory) const {
  absl::StatusOr<std::vector<std::vector<float>>> params = InitialParams();
  if (!params.ok()) return params.status();
  std::vector<absl::Span<const float>> weights;
  for (int l = 0; l < mlp_.num_layers(); ++l) {
    weights.emplace_back((*params)[l].data(), mlp_.BiasOffset(l));
  }
  return InitValuesFile::Write(directory, weights);
}

}  // namespace shardd::client
