#ifndef SHARDD_DAEMON_COMM_GLOO_PAIR_EXCHANGE_ALL_REDUCE_H_
#define SHARDD_DAEMON_COMM_GLOO_PAIR_EXCHANGE_ALL_REDUCE_H_

#include <cstdint>
#include <functional>

#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "gloo/context.h"

namespace shardd::comm {

struct GlooPairExchangeAllReduceArgs {
  // `count` fp32 values: this rank's input. Read only; the result is
  // written (by `finish`) after every send of it has completed, so the
  // output may alias it.
  const float* input = nullptr;
  int64_t count = 0;
  // `count` fp32 values: receives the peer's input, then holds the sums.
  // Owned by the caller, reused across calls.
  float* scratch = nullptr;
  // Turns `n` sums starting at element `begin` (`sum` points at them; it
  // may change them) into the output's elements [begin, begin + n).
  std::function<void(float* sum, int64_t begin, int64_t n)> finish;
  // Message size, in elements (> 0): a segment is summed as soon as it has
  // arrived. One message each way up to 1 MiB: in full bench/collectives
  // W = 2 runs the 1 MiB point scored 0.89 / 0.89 / 0.90 (paired ratio to
  // Gloo's ring) as one message and 1.04 / 0.94 / 0.59 as four of 256 KiB;
  // sixteen of 64 KiB scored 0.72 in --quick runs (each message costs the
  // receiver a wake-up).
  int64_t segment_elements = 256 * 1024;
  // The Gloo slot this operation's messages travel on: the same on both
  // ranks, distinct from other operations'.
  uint64_t slot = 0;
};

// Sum all-reduce over exactly two ranks in one exchange: each rank sends
// the peer its whole input and sums the peer's as it arrives. At W = 2
// every rank sends `count` elements either way (half as input and half as
// result in the fused reduce-scatter + all-gather), but nothing waits for
// a round trip: one transfer, then the sums, instead of a transfer, the
// peer's sum and a transfer back. Each rank sums every element (twice the
// additions), so it is for small and middle sizes.
//
// Bits: element i is input_0[i] + input_1[i], one IEEE fp32 addition
// (commutative: the same on both ranks and as GlooPairAllReduce's), then
// `finish`, which must be a pure function of the sum (both ranks run it).
// Runs on the calling thread and throws on failure (the buffers' deadline
// and abort signal bound every wait).
void GlooPairExchangeAllReduce(gloo::Context& context,
                               const GlooBufferFactory& make_buffer,
                               const GlooPairExchangeAllReduceArgs& args);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_PAIR_EXCHANGE_ALL_REDUCE_H_
