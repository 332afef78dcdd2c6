#ifndef SHARDD_DAEMON_COMM_GLOO_DIRECT_REDUCE_SCATTER_H_
#define SHARDD_DAEMON_COMM_GLOO_DIRECT_REDUCE_SCATTER_H_

#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "gloo/context.h"

namespace shardd::comm {

// Sum reduce-scatter in one step, on Gloo unbound buffers: every rank sends
// each other rank its block directly and sums the W - 1 blocks it receives
// (segment by segment, as they arrive). It moves the same bytes per rank
// as the ring, (W - 1)/W of the input, but in one step instead of W - 1
// dependent ones, so it wins where per-message latency dominates (mid-size
// messages, few ranks); the ring wins for large messages on many ranks.
//
// Same arguments as GlooRingReduceScatter and the same bits: block b is
// summed in the ring's order, rank b+1's input first, then b+2, ..., ending
// with b. Scratch: one region per peer, of (W - 1) * max(counts) elements
// in all, or with args.window_segments > 0 (W - 1) * min(max(counts),
// window_segments * segment_elements): each peer's segments then pass
// through a ring of that many slots.
// Runs on the calling thread and throws on failure.
void GlooDirectReduceScatter(gloo::Context& context,
                             const GlooBufferFactory& make_buffer,
                             const GlooRingReduceScatterArgs& args);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_DIRECT_REDUCE_SCATTER_H_
