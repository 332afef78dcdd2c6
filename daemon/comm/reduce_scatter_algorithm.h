#ifndef SHARDD_DAEMON_COMM_REDUCE_SCATTER_ALGORITHM_H_
#define SHARDD_DAEMON_COMM_REDUCE_SCATTER_ALGORITHM_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace shardd::comm {

// How a sum reduce-scatter adds the W inputs of a block. Ring and direct
// add in ring order (block b: rank b+1's input first, then b+2, ..., b);
// halving adds as a fixed tree (pairs by rank ^ d, d = W/2, ..., 1). Every
// host backend that must give the same bits as GlooCollective (the
// shared-memory one) follows the same choice.
enum class ReduceScatterAlgorithm { kRing, kDirect, kHalving };

// The algorithm for a reduce-scatter over `world` ranks whose largest block
// has `max_count` fp32 elements (16-bit inputs are reduced in fp32, so they
// count 4 bytes an element too). `forced` is SHARDD_REDUCE_SCATTER's value
// ("ring", "direct", "halving"; halving only when W is a power of two),
// empty or anything else for the default: halving for power-of-two W > 2
// and blocks of at most 256 KiB, direct up to 2 MiB, ring above. A pure
// function of its arguments: the same on every rank and every run.
ReduceScatterAlgorithm ChooseReduceScatterAlgorithm(int world,
                                                    int64_t max_count,
                                                    absl::string_view forced);

// SHARDD_REDUCE_SCATTER from the environment, read once ("" when unset).
absl::string_view ForcedReduceScatterAlgorithm();

// True when `algorithm` sums in ring order (ring and direct).
inline bool SumsInRingOrder(ReduceScatterAlgorithm algorithm) {
  return algorithm != ReduceScatterAlgorithm::kHalving;
}

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_REDUCE_SCATTER_ALGORITHM_H_
