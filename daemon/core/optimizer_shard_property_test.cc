// Property: updating a flat parameter shard by shard (the ranges UnitLayout
// gives for random units, F and alignment modes) equals updating the whole
// flat buffer at once, bit for bit: parameters, AdamW moments, SGD momentum,
// the low-precision copies and the clip scale. Padding is never touched.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/core/adamw.h"
#include "daemon/core/dtype.h"
#include "daemon/core/grad_clip.h"
#include "daemon/core/kernel_dispatch.h"
#include "daemon/core/sgd.h"
#include "daemon/core/unit_layout.h"
#include "gtest/gtest.h"

namespace shardd::core {
namespace {

// A NaN with a payload no arithmetic produces: marks padding, which must keep
// it (and which would poison the norm if it were read).
float Poison() {
  const uint32_t bits = 0x7fc0dead;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

// The state of one flat buffer and its optimizer.
struct FlatState {
  std::vector<float> param, state_a, state_b;  // AdamW m, v; SGD momentum.
  std::vector<uint16_t> lowp;
};

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class OptimizerShardPropertyTest : public ::testing::Test {
 protected:
  // [offset, offset + numel) pieces of a flat buffer.
  struct Piece {
    int64_t offset;
    int64_t numel;
  };

  OptimizerShardPropertyTest() : rng_(20240601) {}

  UnitSpec RandomUnit() {
    std::uniform_int_distribution<int> tensors(1, 5), rank(0, 3), dim(1, 24);
    UnitSpec spec;
    spec.name = "unit";
    const int count = tensors(rng_);
    for (int t = 0; t < count; ++t) {
      TensorSpec tensor;
      tensor.name = absl::StrCat("t", t);
      const int r = rank(rng_);
      for (int d = 0; d < r; ++d) tensor.shape.push_back(dim(rng_));
      spec.tensors.push_back(tensor);
    }
    return spec;
  }

  AlignmentSpec RandomAlignment() {
    AlignmentSpec alignment;
    switch (std::uniform_int_distribution<int>(0, 2)(rng_)) {
      case 0:
        alignment.mode = AlignmentMode::kElement;
        break;
      case 1:
        alignment.mode = AlignmentMode::kBlock;
        alignment.block_elements =
            std::uniform_int_distribution<int64_t>(1, 100)(rng_);
        break;
      default:
        alignment.mode = AlignmentMode::kWholeTensor;
    }
    return alignment;
  }

  std::vector<float> RandomVector(int64_t n, float scale) {
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> out(n);
    for (float& x : out) x = dist(rng_);
    return out;
  }

  KernelIsa RandomIsa() {
    const std::vector<KernelIsa> isas = SupportedKernelIsas();
    return isas[std::uniform_int_distribution<size_t>(0,
                                                      isas.size() - 1)(rng_)];
  }

  // Runs `steps` steps of the optimizer chosen by `which` (0: AdamW, 1: SGD
  // with Nesterov momentum and weight decay, 2: SGD with dampened momentum)
  // on a flat buffer of `stored` elements whose real elements are the
  // pieces, once on the whole real range [0, numel) and once piece by piece
  // (in a random order, on a random instruction set per piece), with global
  // norm clipping from per-piece partials. Expects bit-equal results.
  void CheckShardedEqualsWhole(const std::vector<Piece>& pieces, int64_t numel,
                               int64_t stored, int which,
                               const std::string& what) {
    SCOPED_TRACE(what);
    const GradClipper clipper = *GradClipper::Create(0.5);
    FlatState init;
    init.param = RandomVector(stored, 1.0f);
    init.state_a = std::vector<float>(stored, 0.0f);
    init.state_b = std::vector<float>(stored, 0.0f);
    for (int64_t i = numel; i < stored; ++i) {
      init.param[i] = init.state_a[i] = init.state_b[i] = Poison();
    }
    init.lowp = std::vector<uint16_t>(stored, 0xabcd);
    FlatState whole = init, sharded = init;

    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<float> grad = RandomVector(stored, step == 2 ? 10.0f : 0.1f);
      for (int64_t i = numel; i < stored; ++i) grad[i] = Poison();

      // Clip scale: whole vs per-piece partials combined in index order.
      const absl::StatusOr<ClipResult> whole_clip =
          clipper.Finish({*GradClipper::ShardPartial(grad.data(), numel)});
      ASSERT_TRUE(whole_clip.ok()) << whole_clip.status();
      std::vector<GradNormPartial> partials;
      for (const Piece& piece : pieces) {
        partials.push_back(*GradClipper::ShardPartial(
            grad.data() + piece.offset, piece.numel));
      }
      const absl::StatusOr<ClipResult> sharded_clip = clipper.Finish(partials);
      ASSERT_TRUE(sharded_clip.ok()) << sharded_clip.status();
      ASSERT_EQ(std::memcmp(&whole_clip->total_norm, &sharded_clip->total_norm,
                            sizeof(double)),
                0);
      ASSERT_EQ(whole_clip->scale, sharded_clip->scale);
      const float scale = whole_clip->scale;

      ASSERT_TRUE(
          Apply(which, KernelIsa::kAuto, step, scale, grad, 0, numel, whole));
      std::vector<size_t> order(pieces.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng_);
      for (size_t i : order) {
        ASSERT_TRUE(Apply(which, RandomIsa(), step, scale, grad,
                          pieces[i].offset, pieces[i].numel, sharded));
      }
      ASSERT_TRUE(BitEqual(whole.param, sharded.param)) << "step " << step;
      ASSERT_TRUE(BitEqual(whole.state_a, sharded.state_a)) << "step " << step;
      ASSERT_TRUE(BitEqual(whole.state_b, sharded.state_b)) << "step " << step;
      ASSERT_EQ(whole.lowp, sharded.lowp) << "step " << step;
    }
    // Padding untouched; real elements really were updated.
    for (int64_t i = numel; i < stored; ++i) {
      ASSERT_EQ(std::memcmp(&sharded.param[i], &init.param[i], 4), 0) << i;
      ASSERT_EQ(std::memcmp(&sharded.state_a[i], &init.state_a[i], 4), 0);
      ASSERT_EQ(sharded.lowp[i], 0xabcd);
    }
    if (numel > 0) {
      EXPECT_FALSE(BitEqual(whole.param, init.param));
    }
  }

  // One optimizer update of [offset, offset + n) of `state`.
  bool Apply(int which, KernelIsa isa, int64_t step, float scale,
             const std::vector<float>& grad, int64_t offset, int64_t n,
             FlatState& state) {
    absl::Status status;
    if (which == 0) {
      AdamWOptions options;
      options.lr = 1e-2;
      options.weight_decay = 0.1;
      status = AdamW::Create(options, isa)
                   ->Update(step, scale, grad.data() + offset,
                            state.param.data() + offset,
                            state.state_a.data() + offset,
                            state.state_b.data() + offset, n, DType::kBFloat16,
                            state.lowp.data() + offset);
    } else {
      SgdOptions options;
      options.lr = 0.05;
      options.momentum = 0.9;
      options.weight_decay = which == 1 ? 0.01 : 0.0;
      options.nesterov = which == 1;
      options.dampening = which == 1 ? 0.0 : 0.3;
      status = Sgd::Create(options, isa)
                   ->Update(step, scale, grad.data() + offset,
                            state.param.data() + offset,
                            state.state_a.data() + offset, n, DType::kFloat16,
                            state.lowp.data() + offset);
    }
    EXPECT_TRUE(status.ok()) << status;
    return status.ok();
  }

  std::mt19937_64 rng_;
};

TEST_F(OptimizerShardPropertyTest, ShardedUpdateEqualsWholeUpdateBitForBit) {
  std::uniform_int_distribution<int64_t> factor(1, 8);
  for (int trial = 0; trial < 60; ++trial) {
    const UnitSpec spec = RandomUnit();
    const AlignmentSpec alignment = RandomAlignment();
    const int64_t f = factor(rng_);
    const absl::StatusOr<UnitLayout> layout =
        UnitLayout::Create(spec, f, alignment);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ASSERT_EQ(layout->sharding_factor(), f);

    std::vector<Piece> pieces;
    int64_t real = 0;
    for (const ShardRange& shard : layout->shards()) {
      ASSERT_GE(shard.offset, 0);
      // Real elements lie in [0, numel); an all-padding shard has none.
      if (shard.numel > 0) {
        ASSERT_LE(shard.end(), layout->numel());
      }
      ASSERT_LE(shard.offset + shard.stored(), layout->padded_numel());
      pieces.push_back({shard.offset, shard.numel});
      real += shard.numel;
    }
    ASSERT_EQ(real, layout->numel());
    CheckShardedEqualsWhole(
        pieces, layout->numel(), layout->padded_numel(), trial % 3,
        absl::StrCat("trial ", trial, " F=", f,
                     " mode=", static_cast<int>(alignment.mode), " block=",
                     alignment.block_elements, " numel=", layout->numel(),
                     " padding=", layout->padding_elements()));
  }
}

// Any contiguous split, not only the ones UnitLayout makes: odd offsets and
// lengths exercise every vector-loop prologue and epilogue.
TEST_F(OptimizerShardPropertyTest, ArbitrarySplitsEqualWholeUpdateBitForBit) {
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t numel = std::uniform_int_distribution<int64_t>(1, 5000)(rng_);
    const int64_t padding = std::uniform_int_distribution<int64_t>(0, 9)(rng_);
    std::vector<int64_t> cuts = {0, numel};
    const int count = std::uniform_int_distribution<int>(0, 9)(rng_);
    for (int i = 0; i < count; ++i) {
      cuts.push_back(std::uniform_int_distribution<int64_t>(0, numel)(rng_));
    }
    std::sort(cuts.begin(), cuts.end());
    std::vector<Piece> pieces;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      pieces.push_back({cuts[i], cuts[i + 1] - cuts[i]});
    }
    CheckShardedEqualsWhole(pieces, numel, numel + padding, trial % 3,
                            absl::StrCat("trial ", trial, " numel=", numel,
                                         " pieces=", pieces.size()));
  }
}

}  // namespace
}  // namespace shardd::core
