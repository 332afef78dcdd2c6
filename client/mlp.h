#ifndef SHARDD_CLIENT_MLP_H_
#define SHARDD_CLIENT_MLP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "daemon/core/unit_layout.h"

namespace shardd::client {

// The math of a multi-layer perceptron whose parameters live elsewhere.
//
// Layer l (0-based, L = widths.size() - 1 layers) maps in(l) = widths[l]
// features to out(l) = widths[l + 1] features:
//   y = x · Wᵀ + b, then ReLU for every layer but the last (no activation
//   after the last layer).
// Activations are row-major [batch, features]: row i is sample i.
//
// Parameter layout of layer l (one FSDP unit; what the trainer registers as
// tensors "weight" shape {out, in} then "bias" shape {out}, fp32):
//   params[0, out*in)              weight, row-major [out, in]
//   (torch.nn.Linear) params[out*in, out*in + out)   bias [out]
// WeightOffset / BiasOffset / ParamCount give these offsets; UnitSpecFor(l)
// is the matching registration, so UnitLayout puts the tensors at exactly
// these offsets. A parameter or gradient span may be longer than
// ParamCount(l) (a gathered FlatParameter's padding): the extra elements are
// never read nor written.
//
// Training a step: ForwardLayer(0 .. L-1), MseLoss on the last output with
// its gradient, then BackwardLayer(L-1 .. 0), feeding each layer's
// grad_input to the layer below as its grad_output. Gradients are of
// whatever loss grad_output is the gradient of (MseLoss: the mean over all
// batch × features elements, like torch.nn.MSELoss), so the gradient of a
// batch's mean equals the average of equally sized sub-batches' gradients:
// the identity the daemon's averaging reduce-scatter relies on.
//
// Ownership: Mlp owns only its shape and a workspace (each layer's input and
// output as seen by the last ForwardLayer, needed by BackwardLayer, and one
// scratch buffer). It never keeps a pointer it is given; parameters are read
// from the caller's buffer at each call, so the same buffer may be a
// different gathered slot every time. The workspace is allocated in Create
// for `batch_capacity` samples and grows only when a larger batch comes.
// Thread-safety: ForwardLayer and BackwardLayer write the workspace and must
// not run concurrently on one Mlp; const methods (shapes, layouts,
// ForwardLayerWithoutSaving, MseLoss) are safe from any thread. Computation is
// single-threaded (Eigen without OpenMP) and deterministic: the same inputs
// give the same bits (within one build: `--define=shardd_mlp_arch=x86-64-v3`
// uses FMA and rounds differently; see client/BUILD). Only mlp.cc includes
// Eigen, so that it alone instantiates Eigen's templates.
class Mlp {
 public:
  // widths = {in(0), out(0) = in(1), ..., out(L-1)}: at least two entries,
  // each >= 1, and every layer's ParamCount must fit in 64 bits. batch_capacity
  // >= 0 sizes the workspace up front (first touch of fresh memory is slow
  // here: allocate once, outside the step loop). Errors: INVALID_ARGUMENT
  // naming the field, e.g. "mlp.widths[2] must be >= 1".
  static absl::StatusOr<Mlp> Create(std::vector<int64_t> widths,
                                    int64_t batch_capacity = 0);

  int num_layers() const { return static_cast<int>(widths_.size()) - 1; }
  const std::vector<int64_t>& widths() const { return widths_; }
  // For 0 <= layer < num_layers() (not checked).
  int64_t in_features(int layer) const { return widths_[layer]; }
  int64_t out_features(int layer) const { return widths_[layer + 1]; }
  bool has_relu(int layer) const { return layer + 1 < num_layers(); }

  // Element offsets and sizes of the flat [weight, bias] layout of `layer`.
  static constexpr int64_t WeightOffset() { return 0; }
  int64_t BiasOffset(int layer) const {
    return out_features(layer) * in_features(layer);
  }
  int64_t ParamCount(int layer) const {
    return BiasOffset(layer) + out_features(layer);
  }
  // Σ ParamCount over all layers.
  int64_t TotalParamCount() const;

  // The unit the trainer registers for `layer`: name "layer<l>", tensors
  // "weight" {out, in} and "bias" {out}, fp32, in that order.
  core::UnitSpec UnitSpecFor(int layer) const;

  // Forward of one layer: output = act(input · Wᵀ + b), with input
  // [batch, in(layer)] and output [batch, out(layer)] (batch = input.size() /
  // in(layer) >= 1). Saves the input and output in the workspace for
  // BackwardLayer(layer). input and output must not overlap. Errors
  // (INVALID_ARGUMENT, nothing computed): bad layer, params shorter than
  // ParamCount, input not a whole number >= 1 of rows, output of another
  // size.
  absl::Status ForwardLayer(int layer, absl::Span<const float> params,
                            absl::Span<const float> input,
                            absl::Span<float> output);

  // The same output, saving nothing (inference, e.g. a teacher network).
  absl::Status ForwardLayerWithoutSaving(int layer,
                                         absl::Span<const float> params,
                                         absl::Span<const float> input,
                                         absl::Span<float> output) const;

  // Backward of one layer, using what the last ForwardLayer(layer) saved:
  // given grad_output = ∂loss/∂output [batch, out], writes (overwrites, does
  // not accumulate) grad_params [weight, bias] (same layout as params) and,
  // when grad_input is not empty, grad_input = ∂loss/∂input [batch, in]
  // (layer 0 may pass an empty span to skip it). params must be the same
  // values the forward used. ReLU's gradient at exactly 0 is 0 (as PyTorch).
  // Buffers must not overlap. Errors: INVALID_ARGUMENT for bad sizes,
  // FAILED_PRECONDITION if the layer has no saved forward, or it was saved
  // for another batch size; nothing is written then.
  absl::Status BackwardLayer(int layer, absl::Span<const float> params,
                             absl::Span<const float> grad_output,
                             absl::Span<float> grad_params,
                             absl::Span<float> grad_input);

  // Mean squared error over all elements (torch.nn.MSELoss, reduction
  // "mean"): mean((prediction - target)²), accumulated in double. When
  // grad_prediction is not empty it receives ∂loss/∂prediction =
  // 2 (prediction - target) / n in fp32. Sizes must match and be >= 1
  // (INVALID_ARGUMENT otherwise).
  static absl::StatusOr<double> MseLoss(absl::Span<const float> prediction,
                                        absl::Span<const float> target,
                                        absl::Span<float> grad_prediction = {});

 private:
  explicit Mlp(std::vector<int64_t> widths) : widths_(std::move(widths)) {}

  absl::Status CheckLayer(int layer) const;
  // Validates params/input/output for a forward; sets *batch.
  absl::Status CheckForwardArgs(int layer, absl::Span<const float> params,
                                absl::Span<const float> input,
                                absl::Span<float> output, int64_t* batch) const;
  void ComputeForward(int layer, const float* params, const float* input,
                      int64_t batch, float* output) const;
  void ReserveBatch(int64_t batch);

  std::vector<int64_t> widths_;
  int64_t capacity_ = 0;  // Samples the workspace holds.
  // Per layer: the input and output of the last ForwardLayer, and its batch
  // (0 = nothing saved).
  std::vector<std::vector<float>> saved_input_;
  std::vector<std::vector<float>> saved_output_;
  std::vector<int64_t> saved_batch_;
  std::vector<float> grad_pre_activation_;  // Scratch [batch, max out].
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_MLP_H_
