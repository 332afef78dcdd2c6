#ifndef SHARDD_DAEMON_COMM_FIXED_ORDER_SUM_H_
#define SHARDD_DAEMON_COMM_FIXED_ORDER_SUM_H_

#include <cstdint>
#include <vector>

#include "daemon/comm/reduce_scatter_algorithm.h"

namespace shardd::comm {

// Sums one block of a reduce-scatter when every rank's contribution is at
// hand (shared memory), in exactly the order GlooCollective's algorithm
// adds it over the network, so that both backends give the same bits:
// - ring and direct: block b is ((x[b+1] + x[b+2]) + ...) + x[b], ranks mod
//   W, the accumulator always the left operand (GlooRingReduceScatter);
// - halving: the tree of GlooHalvingReduceScatter, where at distance d
//   (W/2, ..., 1) the partial of rank r becomes partial(r ^ d) + partial(r).
// One IEEE fp32 addition per step, nothing fused or reassociated.
//
// Responsible for: the order of additions only. Holds scratch for the
// tree's intermediate levels, grown on demand and reused. Not thread-safe
// (one per communicator worker).
class FixedOrderSum {
 public:
  // out[i] = the sum over ranks of inputs[q][i], i < n, for block `block`
  // of a group of inputs.size() ranks. `out` may alias inputs[block] (the
  // rank's own contribution, read last) but no other input.
  void Sum(const std::vector<const float*>& inputs, int block,
           ReduceScatterAlgorithm algorithm, int64_t n, float* out);

 private:
  void SumRing(const std::vector<const float*>& inputs, int block, int64_t n,
               float* out);
  // The partial sum held by rank `rank` after the tree level of distance
  // `distance` (W for the inputs themselves); when it is not an input it
  // is written to scratch (depth, which): 0 for a left operand, 1 right.
  const float* Tree(const std::vector<const float*>& inputs, int rank,
                    int distance, int depth, int which, int64_t n);
  float* Level(int depth, int which, int64_t n);

  std::vector<std::vector<float>> scratch_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_FIXED_ORDER_SUM_H_
