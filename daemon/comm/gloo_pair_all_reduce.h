#ifndef SHARDD_DAEMON_COMM_GLOO_PAIR_ALL_REDUCE_H_
#define SHARDD_DAEMON_COMM_GLOO_PAIR_ALL_REDUCE_H_

#include <cstdint>
#include <functional>

#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "gloo/context.h"

namespace shardd::comm {

struct GlooPairAllReduceArgs {
  // `count` fp32 values: this rank's input. Never written by the algorithm
  // except where `output` aliases it.
  const float* input = nullptr;
  int64_t count = 0;
  // Elements [0, split) are rank 0's half, [split, count) rank 1's: the
  // halves the reduce-scatter would give each rank.
  int64_t split = 0;
  // The result: `count` elements of `element_size` bytes. May alias
  // `input` when element_size == 4 (in place).
  void* output = nullptr;
  int64_t element_size = 4;
  // Where this rank's half is summed in fp32: (count of its half) elements,
  // element i for element (its half's offset + i). May alias `input` at the
  // half's offset (in place).
  float* sums = nullptr;
  // Turns `n` summed elements starting at element `begin` (of the whole
  // buffer; `sum` points at their fp32 sums, which it may change) into
  // `output`'s elements [begin, begin + n): divides for an average, narrows
  // 16-bit results. Runs on the calling thread, once per segment, before
  // the segment is sent to the peer.
  std::function<void(float* sum, int64_t begin, int64_t n)> finish;
  // Receive window for the peer's input of this rank's half: at least
  // min(half, window_segments * segment_elements) elements (the whole half
  // when window_segments is 0). Owned by the caller, reused across calls.
  float* scratch = nullptr;
  // Pipelining granularity, in elements (> 0), and the number of receive
  // slots (0: one per segment of the half).
  int64_t segment_elements = 256 * 1024;
  int64_t window_segments = 0;
  // The Gloo slots this operation's messages travel on: `slot` carries
  // inputs, `slot + 1` finished results. The same on both ranks, distinct
  // from the slots of Gloo's algorithms and of other operations.
  uint64_t slot = 0;
};

// Sum all-reduce over exactly two ranks, on Gloo unbound buffers, with the
// reduce-scatter and the all-gather fused and pipelined segment by segment:
// each rank sends the peer its input of the peer's half, adds the peer's
// input of its own half segment by segment as it arrives, and sends each
// finished segment straight back, where it is received in place in the
// output. The gather of early segments then overlaps the reduction of later
// ones, and no phase waits for the other to drain; every byte crosses once
// each way, as in the ring.
//
// Bits: element i is input_0[i] + input_1[i], one IEEE fp32 addition
// (commutative, so the same as the reduce-scatter's peer + own), then
// `finish` on the rank that owns it; the peer receives the finished bytes.
// The result is identical on both ranks and to the reduce-scatter followed
// by an all-gather of the same halves.
//
// In place is safe: the peer sends a finished segment only after it has
// received this rank's input of that segment, whose send had then already
// been copied out of this rank's buffer.
// Runs on the calling thread and throws on failure (the buffers' deadline
// and abort signal bound every wait).
void GlooPairAllReduce(gloo::Context& context,
                       const GlooBufferFactory& make_buffer,
                       const GlooPairAllReduceArgs& args);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_PAIR_ALL_REDUCE_H_
