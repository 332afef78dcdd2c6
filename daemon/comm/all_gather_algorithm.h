#ifndef SHARDD_DAEMON_COMM_ALL_GATHER_ALGORITHM_H_
#define SHARDD_DAEMON_COMM_ALL_GATHER_ALGORITHM_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace shardd::comm {

// How the Gloo transport runs an all-gather (and the all-gather half of a
// split all-reduce): Gloo's ring (gloo::allgather / allgatherv, kRing), or
// every part sent straight to every peer at once (kDirect,
// GlooDirectAllGather). Both copy the same bytes to the same places.
enum class AllGatherAlgorithm { kRing, kDirect };

// The algorithm for an all-gather over `world` ranks whose largest part is
// `max_part_bytes`. `forced` is SHARDD_ALL_GATHER's value: "ring" or
// "direct" force one (set it alike on every rank of a group: the ranks must
// run the same one); empty or anything else for the default: direct at
// W = 2 and for parts up to 2 MiB, where the ring's dependent steps cost
// most; the ring for larger parts on more ranks, where it keeps up with
// direct or wins (scripts/bench collectives: docs/benchmarks.md). A pure
// function of its arguments: the same on every rank and every run.
AllGatherAlgorithm ChooseAllGatherAlgorithm(int world, int64_t max_part_bytes,
                                            absl::string_view forced);

// SHARDD_ALL_GATHER from the environment, read once ("" when unset).
absl::string_view ForcedAllGatherAlgorithm();

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_ALL_GATHER_ALGORITHM_H_
