#ifndef SHARDD_DAEMON_COMM_ALL_REDUCE_ALGORITHM_H_
#define SHARDD_DAEMON_COMM_ALL_REDUCE_ALGORITHM_H_

#include "absl/strings/string_view.h"

namespace shardd::comm {

// How the host transports run a sum all-reduce: the reduce-scatter of an
// even split followed by an all-gather of the reduced halves in place
// (kReduceScatterThenGather), or at W = 2 both fused and pipelined
// segment by segment (kPairFused, GlooPairAllReduce).
enum class AllReduceAlgorithm { kReduceScatterThenGather, kPairFused };

// The algorithm for an all-reduce over `world` ranks. `forced` is
// SHARDD_ALL_REDUCE's value ("split" forces the reduce-scatter and
// all-gather at W = 2 too), empty or anything else for the default: fused
// at W = 2, split otherwise. Both give the same bits at W = 2 (each
// element is one fp32 addition of the two inputs, commutative, rounded and
// divided by its owner), so a transport may run either and still agree
// with one that runs the other: ShmTransport always splits. A pure
// function of its arguments: the same on every rank and every run.
AllReduceAlgorithm ChooseAllReduceAlgorithm(int world,
                                            absl::string_view forced);

// SHARDD_ALL_REDUCE from the environment, read once ("" when unset).
absl::string_view ForcedAllReduceAlgorithm();

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_ALL_REDUCE_ALGORITHM_H_
