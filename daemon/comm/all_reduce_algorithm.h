#ifndef SHARDD_DAEMON_COMM_ALL_REDUCE_ALGORITHM_H_
#define SHARDD_DAEMON_COMM_ALL_REDUCE_ALGORITHM_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace shardd::comm {

// How the host transports run a sum all-reduce: the reduce-scatter of an
// even split followed by an all-gather of the reduced halves in place
// (kReduceScatterThenGather); at W = 2 both fused and pipelined segment by
// segment (kPairFused, GlooPairAllReduce); or at W = 2 one exchange of the
// whole inputs, each rank summing every element (kPairExchange,
// GlooPairExchangeAllReduce).
enum class AllReduceAlgorithm {
  kReduceScatterThenGather,
  kPairFused,
  kPairExchange,
};

// Up to this many fp32 bytes a W = 2 all-reduce is one exchange: it has no
// round trip, and summing every element costs less than the round trip
// saves. Measured on the 2-core VM (bench/collectives, all-reduce W = 2,
// paired ratio to Gloo's ring, alternated runs): exchange / fused 2.27 /
// 1.31 at 4 KiB, 1.72 / 1.27 at 64 KiB, 1.32 / 1.09 at 256 KiB; at 1 MiB
// 1.01 / 0.94 in all-reduce-only runs and 0.89 / 0.89 / 0.90 in full W = 2
// runs (fused: 0.69 / 0.90 / 0.83 in earlier ones); at 4 MiB 0.82 / 1.05,
// the sum of the whole buffer no longer hidden.
inline constexpr int64_t kPairExchangeMaxBytes = int64_t{1} << 20;

// The algorithm for an all-reduce over `world` ranks of `fp32_bytes` bytes
// reduced in fp32 (4 per element, whatever the dtype). `forced` is
// SHARDD_ALL_REDUCE's value: at W = 2 "split", "fused" or "exchange" runs
// that one at every size; empty or anything else gives the default:
// exchange up to kPairExchangeMaxBytes, fused above, split at W != 2. All
// give the same bits at W = 2 (each element is one fp32 addition of the
// two inputs, commutative, then the same division and rounding), so a
// transport may run any and still agree with one that runs another:
// ShmTransport always splits. A pure function of its arguments: the same
// on every rank and every run.
AllReduceAlgorithm ChooseAllReduceAlgorithm(int world, int64_t fp32_bytes,
                                            absl::string_view forced);

// SHARDD_ALL_REDUCE from the environment, read once ("" when unset).
absl::string_view ForcedAllReduceAlgorithm();

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_ALL_REDUCE_ALGORITHM_H_
