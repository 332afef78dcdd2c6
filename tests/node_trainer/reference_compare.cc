// reference_compare: runs the single-process ReferenceTrainer on the union
// of every rank's data (the configuration example_trainer was given) from
// the daemon's initial parameters, and compares its final parameters with
// the raw fp32 file example_trainer --params_out wrote.
//
// Prints "max_abs_diff D max_rel_diff R over N parameters" and exits 0 when
// D <= --tolerance, 1 otherwise (2: bad input).

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "client/example_model.h"
#include "client/reference_trainer.h"
#include "client/teacher_student.h"

ABSL_FLAG(std::string, widths, "32,64,64,8", "MLP widths");
ABSL_FLAG(uint64_t, seed, 1, "example_trainer --seed");
ABSL_FLAG(int, world_size, 2, "W");
ABSL_FLAG(int64_t, batch_per_rank, 16, "samples per rank");
ABSL_FLAG(int64_t, steps, 10, "steps");
ABSL_FLAG(double, lr, 1e-2, "AdamW lr");
ABSL_FLAG(double, weight_decay, 0.0, "AdamW weight decay");
ABSL_FLAG(double, max_grad_norm, 1.0, "clip norm");
ABSL_FLAG(std::string, params, "", "file written by --params_out");
ABSL_FLAG(double, tolerance, 1e-5, "largest absolute difference accepted");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  using namespace shardd::client;
  std::vector<int64_t> widths;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_widths), ',')) {
    int64_t w = 0;
    if (!absl::SimpleAtoi(part, &w)) return 2;
    widths.push_back(w);
  }
  ExampleModelOptions model_options;
  model_options.widths = widths;
  model_options.init_seed = absl::GetFlag(FLAGS_seed);
  auto model = ExampleModel::Create(model_options);
  auto task = TeacherStudent::Create({widths, absl::GetFlag(FLAGS_seed)});
  if (!model.ok() || !task.ok()) return 2;
  auto initial = model->InitialParams();
  if (!initial.ok()) return 2;
  ReferenceTrainerOptions options;
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.batch_per_rank = absl::GetFlag(FLAGS_batch_per_rank);
  options.adamw.lr = absl::GetFlag(FLAGS_lr);
  options.adamw.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  options.max_grad_norm = absl::GetFlag(FLAGS_max_grad_norm);
  auto reference =
      ReferenceTrainer::Create(&*task, options, std::move(*initial));
  if (!reference.ok()) {
    std::fprintf(stderr, "%s\n", reference.status().ToString().c_str());
    return 2;
  }
  for (int64_t s = 0; s < absl::GetFlag(FLAGS_steps); ++s) {
    auto step = reference->Step();
    if (!step.ok()) return 2;
    std::printf("reference step %lld loss %.6g grad_norm %.6g\n",
                static_cast<long long>(step->step), step->loss,
                step->grad_norm);
  }
  std::ifstream in(absl::GetFlag(FLAGS_params), std::ios::binary);
  double max_abs = 0.0, max_rel = 0.0;
  int64_t n = 0;
  for (int l = 0; l < reference->num_layers(); ++l) {
    auto expected = reference->params(l);
    std::vector<float> got(expected.size());
    in.read(reinterpret_cast<char*>(got.data()),
            static_cast<std::streamsize>(got.size() * sizeof(float)));
    if (!in.good()) {
      std::fprintf(stderr, "params file too short at layer %d\n", l);
      return 2;
    }
    for (size_t i = 0; i < got.size(); ++i, ++n) {
      const double d = std::fabs(double{got[i]} - double{expected[i]});
      if (!(d <= max_abs)) max_abs = d;  // NaN propagates as a failure.
      max_rel =
          std::max(max_rel, d / std::max(1e-3, std::fabs(double{expected[i]})));
    }
  }
  if (in.peek() != std::char_traits<char>::eof()) {
    std::fprintf(stderr, "params file longer than the model\n");
    return 2;
  }
  std::printf("max_abs_diff %.3g max_rel_diff %.3g over %lld parameters\n",
              max_abs, max_rel, static_cast<long long>(n));
  return max_abs <= absl::GetFlag(FLAGS_tolerance) ? 0 : 1;
}
