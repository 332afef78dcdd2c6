#include "daemon/comm/fixed_order_sum.h"

#include <cstddef>

#include "daemon/comm/host_reduce_math.h"

namespace shardd::comm {

void FixedOrderSum::Sum(const std::vector<const float*>& inputs, int block,
                        ReduceScatterAlgorithm algorithm, int64_t n,
                        float* out) {
  const int world = static_cast<int>(inputs.size());
  if (n <= 0) return;
  if (world == 1) {
    if (out != inputs[0]) {
      for (int64_t i = 0; i < n; ++i) out[i] = inputs[0][i];
    }
    return;
  }
  if (SumsInRingOrder(algorithm) || world == 2) {
    // (For W = 2 the tree is x[b ^ 1] + x[b], the ring's one addition.)
    SumRing(inputs, block, n, out);
    return;
  }
  // Halving: the last level adds partial(block ^ 1) + partial(block).
  const float* left = Tree(inputs, block ^ 1, 2, 0, 0, n);
  const float* right = Tree(inputs, block, 2, 0, 1, n);
  AddTo(out, left, right, n);
}

void FixedOrderSum::SumRing(const std::vector<const float*>& inputs, int block,
                            int64_t n, float* out) {
  const int world = static_cast<int>(inputs.size());
  const float* own = inputs[block];
  if (world == 2) {
    AddTo(out, inputs[(block + 1) % 2], own, n);
    return;
  }
  // The accumulator is never `out` before the last addition: out may alias
  // the rank's own input, which is added last.
  float* acc = Level(0, 0, n);
  AddTo(acc, inputs[(block + 1) % world], inputs[(block + 2) % world], n);
  for (int j = 3; j < world; ++j)
    AddTo(acc, acc, inputs[(block + j) % world], n);
  AddTo(out, acc, own, n);
}

const float* FixedOrderSum::Tree(const std::vector<const float*>& inputs,
                                 int rank, int distance, int depth, int which,
                                 int64_t n) {
  const int world = static_cast<int>(inputs.size());
  if (distance >= world) return inputs[rank];
  // partial after level d = partial_before(rank ^ d) + partial_before(rank),
  // where "before" is the level of distance 2d.
  // Scratch per (depth, which): the left operand's subtree is finished
  // before the right one reuses the deeper levels.
  const float* left =
      Tree(inputs, rank ^ distance, distance * 2, depth + 1, 0, n);
  const float* right = Tree(inputs, rank, distance * 2, depth + 1, 1, n);
  float* out = Level(depth, which, n);
  AddTo(out, left, right, n);
  return out;
}

float* FixedOrderSum::Level(int depth, int which, int64_t n) {
  const size_t index = static_cast<size_t>(depth) * 2 + which;
  if (scratch_.size() <= index) scratch_.resize(index + 1);
  if (static_cast<int64_t>(scratch_[index].size()) < n) {
    scratch_[index].resize(static_cast<size_t>(n));
  }
  return scratch_[index].data();
}

}  // namespace shardd::comm
