#include "client/mlp.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "daemon/core/checked_math.h"

namespace shardd::client {
namespace {

using RowMajorMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatrixMap = Eigen::Map<const RowMajorMatrix>;
using MatrixMap = Eigen::Map<RowMajorMatrix>;
using ConstRowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

// Spans may alias only when one of them is empty.
bool Overlap(absl::Span<const float> a, absl::Span<const float> b) {
  if (a.empty() || b.empty()) return false;
  return a.data() < b.data() + b.size() && b.data() < a.data() + a.size();
}

}  // namespace

absl::StatusOr<Mlp> Mlp::Create(std::vector<int64_t> widths,
                                int64_t batch_capacity) {
  if (widths.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp.widths must have at least 2 entries (one layer), "
                     "got ",
                     widths.size()));
  }
  for (size_t i = 0; i < widths.size(); ++i) {
    if (widths[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp.widths[", i, "] must be >= 1, got ", widths[i]));
    }
  }
  std::optional<int64_t> total = 0;
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    std::optional<int64_t> weight = core::CheckedMul(widths[l], widths[l + 1]);
    std::optional<int64_t> count =
        weight ? core::CheckedAdd(*weight, widths[l + 1]) : std::nullopt;
    total = (count && total) ? core::CheckedAdd(*total, *count) : std::nullopt;
    if (!total) {
      return absl::InvalidArgumentError(
          absl::StrCat("mlp layer ", l, " has too many parameters (",
                       widths[l + 1], " x ", widths[l], ")"));
    }
  }
  if (batch_capacity < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp.batch_capacity must be >= 0, got ", batch_capacity));
  }
  Mlp mlp(std::move(widths));
  const int layers = mlp.num_layers();
  mlp.saved_input_.resize(layers);
  mlp.saved_output_.resize(layers);
  mlp.saved_batch_.assign(layers, 0);
  mlp.ReserveBatch(batch_capacity);
  return mlp;
}

int64_t Mlp::TotalParamCount() const {
  int64_t total = 0;
  for (int l = 0; l < num_layers(); ++l) total += ParamCount(l);
  return total;
}

core::UnitSpec Mlp::UnitSpecFor(int layer) const {
  core::UnitSpec spec;
  spec.name = absl::StrCat("layer", layer);
  spec.tensors.push_back(
      core::TensorSpec{"weight",
                       {out_features(layer), in_features(layer)},
                       core::DType::kFloat32});
  spec.tensors.push_back(
      core::TensorSpec{"bias", {out_features(layer)}, core::DType::kFloat32});
  return spec;
}

void Mlp::ReserveBatch(int64_t batch) {
  if (batch <= capacity_) return;
  int64_t max_out = 0;
  for (int l = 0; l < num_layers(); ++l) {
    saved_input_[l].resize(batch * in_features(l));
    saved_output_[l].resize(batch * out_features(l));
    max_out = std::max(max_out, out_features(l));
  }
  grad_pre_activation_.resize(batch * max_out);
  capacity_ = batch;
}

absl::Status Mlp::CheckLayer(int layer) const {
  if (layer < 0 || layer >= num_layers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp layer ", layer, " out of range [0, ", num_layers(), ")"));
  }
  return absl::OkStatus();
}

absl::Status Mlp::CheckForwardArgs(int layer, absl::Span<const float> params,
                                   absl::Span<const float> input,
                                   absl::Span<float> output,
                                   int64_t* batch) const {
  if (absl::Status status = CheckLayer(layer); !status.ok()) return status;
  const int64_t in = in_features(layer);
  const int64_t out = out_features(layer);
  const int64_t n_input = static_cast<int64_t>(input.size());
  if (static_cast<int64_t>(params.size()) < ParamCount(layer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer ", layer, " params has ", params.size(),
                     " elements, needs ", ParamCount(layer)));
  }
  if (n_input == 0 || n_input % in != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer ", layer, " input has ", n_input,
                     " elements, not a whole number >= 1 of rows of ", in));
  }
  *batch = n_input / in;
  if (static_cast<int64_t>(output.size()) != *batch * out) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer ", layer, " output has ", output.size(),
                     " elements, needs ", *batch, " x ", out));
  }
  if (Overlap(input, output)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer ", layer, " input and output overlap"));
  }
  return absl::OkStatus();
}

void Mlp::ComputeForward(int layer, const float* params, const float* input,
                         int64_t batch, float* output) const {
  const int64_t in = in_features(layer);
  const int64_t out = out_features(layer);
  ConstMatrixMap weight(params + WeightOffset(), out, in);
  ConstRowVectorMap bias(params + BiasOffset(layer), out);
  ConstMatrixMap x(input, batch, in);
  MatrixMap y(output, batch, out);
  y.noalias() = x * weight.transpose();
  y.rowwise() += bias;
  if (has_relu(layer)) y = y.cwiseMax(0.0f);
}

absl::Status Mlp::ForwardLayer(int layer, absl::Span<const float> params,
                               absl::Span<const float> input,
                               absl::Span<float> output) {
  int64_t batch = 0;
  if (absl::Status status =
          CheckForwardArgs(layer, params, input, output, &batch);
      !status.ok()) {
    return status;
  }
  ReserveBatch(batch);
  ComputeForward(layer, params.data(), input.data(), batch, output.data());
  std::memcpy(saved_input_[layer].data(), input.data(),
              input.size() * sizeof(float));
  std::memcpy(saved_output_[layer].data(), output.data(),
              output.size() * sizeof(float));
  saved_batch_[layer] = batch;
  return absl::OkStatus();
}

absl::Status Mlp::ForwardLayerWithoutSaving(int layer,
                                            absl::Span<const float> params,
                                            absl::Span<const float> input,
                                            absl::Span<float> output) const {
  int64_t batch = 0;
  if (absl::Status status =
          CheckForwardArgs(layer, params, input, output, &batch);
      !status.ok()) {
    return status;
  }
  ComputeForward(layer, params.data(), input.data(), batch, output.data());
  return absl::OkStatus();
}

absl::Status Mlp::BackwardLayer(int layer, absl::Span<const float> params,
                                absl::Span<const float> grad_output,
                                absl::Span<float> grad_params,
                                absl::Span<float> grad_input) {
  if (absl::Status status = CheckLayer(layer); !status.ok()) return status;
  const int64_t in = in_features(layer);
  const int64_t out = out_features(layer);
  const int64_t count = ParamCount(layer);
  if (static_cast<int64_t>(params.size()) < count ||
      static_cast<int64_t>(grad_params.size()) < count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mlp layer ", layer, " params (", params.size(), ") and grad_params (",
        grad_params.size(), ") need ", count, " elements each"));
  }
  const int64_t batch = saved_batch_[layer];
  if (batch == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("mlp layer ", layer, " backward without a saved forward"));
  }
  if (static_cast<int64_t>(grad_output.size()) != batch * out) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mlp layer ", layer, " grad_output has ", grad_output.size(),
        " elements; the saved forward had ", batch, " x ", out));
  }
  if (!grad_input.empty() &&
      static_cast<int64_t>(grad_input.size()) != batch * in) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer ", layer, " grad_input has ", grad_input.size(),
                     " elements, needs ", batch, " x ", in, " (or none)"));
  }
  const absl::Span<const float> grad_params_used(grad_params.data(), count);
  if (Overlap(grad_output, grad_params_used) ||
      Overlap(grad_output, grad_input) ||
      Overlap(grad_input, grad_params_used) ||
      Overlap(params.subspan(0, count), grad_params_used) ||
      Overlap(params.subspan(0, count), grad_input)) {
    return absl::InvalidArgumentError(
        absl::StrCat("mlp layer ", layer, " backward buffers overlap"));
  }

  // dZ = dY ⊙ [Y > 0] for a ReLU layer, dY itself otherwise.
  const float* grad_pre = grad_output.data();
  if (has_relu(layer)) {
    const float* y = saved_output_[layer].data();
    float* dz = grad_pre_activation_.data();
    const float* dy = grad_output.data();
    for (int64_t i = 0; i < batch * out; ++i) {
      dz[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
    grad_pre = dz;
  }
  ConstMatrixMap dz(grad_pre, batch, out);
  ConstMatrixMap x(saved_input_[layer].data(), batch, in);
  // dW [out, in] = dZᵀ · X.
  MatrixMap grad_weight(grad_params.data() + WeightOffset(), out, in);
  grad_weight.noalias() = dz.transpose() * x;
  // db [out] = Σ over samples of dZ, in sample order (a fixed order, so the
  // result does not depend on the buffers' alignment).
  float* grad_bias = grad_params.data() + BiasOffset(layer);
  std::memcpy(grad_bias, grad_pre, out * sizeof(float));
  for (int64_t i = 1; i < batch; ++i) {
    const float* row = grad_pre + i * out;
    for (int64_t j = 0; j < out; ++j) grad_bias[j] += row[j];
  }
  // dX [batch, in] = dZ · W.
  if (!grad_input.empty()) {
    ConstMatrixMap weight(params.data() + WeightOffset(), out, in);
    MatrixMap grad_x(grad_input.data(), batch, in);
    grad_x.noalias() = dz * weight;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Mlp::MseLoss(absl::Span<const float> prediction,
                                    absl::Span<const float> target,
                                    absl::Span<float> grad_prediction) {
  const size_t n = prediction.size();
  if (n == 0 || target.size() != n ||
      (!grad_prediction.empty() && grad_prediction.size() != n)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mse_loss sizes must match and be >= 1: prediction ", n, ", target ",
        target.size(), ", grad_prediction ", grad_prediction.size()));
  }
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(prediction[i]) - target[i];
    sum += d * d;
  }
  if (!grad_prediction.empty()) {
    const float scale = static_cast<float>(2.0 / static_cast<double>(n));
    for (size_t i = 0; i < n; ++i) {
      grad_prediction[i] = scale * (prediction[i] - target[i]);
    }
  }
  return sum / static_cast<double>(n);
}

}  // namespace shardd::client
