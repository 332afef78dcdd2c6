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
// empty or anything else for the default: direct at W = 2 (where the ring
// is the same single exchange); for W > 2 halving for power-of-two W and
// blocks of at most 256 KiB, direct up to 2 MiB, ring above. A pure
// function of its arguments: the same on every rank and every run.
ReduceScatterAlgorithm ChooseReduceScatterAlgorithm(int world,
                                                    int64_t max_count,
                                                    absl::string_view forced);

// How the ring and direct reduce-scatters pipeline a block: segments of
// `segment_elements`, each its own message, and for direct a receive
// window of `window_segments` segment slots per peer, reused from segment
// to segment (0: a slot for every segment of the block).
struct ReduceScatterPipelining {
  int64_t segment_elements = 0;
  int64_t window_segments = 0;
};

// For a group of `world` ranks whose largest block has `max_count` (> 0)
// fp32 elements. W = 2: segments of at most 1 MiB (a block of up to 1 MiB
// goes whole) through a window of 2, the segment being summed and the next
// one arriving: the kernel copies each segment into memory still in cache
// from the previous sum, and an operation wakes its thread once per MiB
// (on the 2-core VM under load: 16 MiB 0.81-0.89 -> 0.87-1.00 of Gloo's
// ring all-reduce at half its time; README, "Benchmarks"). W > 2: a
// quarter of the block, clamped to 256 KiB .. 1 MiB, no window. The W = 2
// all-reduce (GlooPairAllReduce) cuts its halves the same way, rank 0's
// half counting as the largest block. Every choice gives the same bits
// (the order of additions does not depend on it). Pure.
ReduceScatterPipelining ChooseReduceScatterPipelining(int world,
                                                      int64_t max_count);

// SHARDD_REDUCE_SCATTER from the environment, read once ("" when unset).
absl::string_view ForcedReduceScatterAlgorithm();

// True when `algorithm` sums in ring order (ring and direct).
inline bool SumsInRingOrder(ReduceScatterAlgorithm algorithm) {
  return algorithm != ReduceScatterAlgorithm::kHalving;
}

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_REDUCE_SCATTER_ALGORITHM_H_
