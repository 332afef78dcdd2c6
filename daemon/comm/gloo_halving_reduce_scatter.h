#ifndef SHARDD_DAEMON_COMM_GLOO_HALVING_REDUCE_SCATTER_H_
#define SHARDD_DAEMON_COMM_GLOO_HALVING_REDUCE_SCATTER_H_

#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "gloo/context.h"

namespace shardd::comm {

// Sum reduce-scatter by recursive halving, for a power-of-two number of
// ranks, on Gloo unbound buffers: log2(W) steps; at the step of distance
// d = W/2, W/4, ..., 1 a rank exchanges with rank ^ d the half of its
// current partial sums that the partner keeps, and adds what it receives
// to the half it keeps. It moves the same bytes per rank as the ring,
// (W - 1)/W of the input, in log2(W) dependent steps instead of W - 1 and
// with one peer at a time instead of W - 1 at once: the fastest way for
// small messages (what Gloo's ReduceScatterHalvingDoubling does, with
// uneven blocks and abortable buffers).
//
// Same arguments as GlooRingReduceScatter (scratch: (W - 1) * max(counts)
// elements; output may alias this rank's block of the input). Deterministic:
// block b is summed as a fixed tree over the ranks ((x_0 + x_1) + (x_2 +
// x_3) for W = 4, pairs by rank ^ d), a function of W only; the bits can
// differ from the ring's order, which sums the same values in another
// association. Runs on the calling thread and throws on failure. W must be
// a power of two (the caller checks).
void GlooHalvingReduceScatter(gloo::Context& context,
                              const GlooBufferFactory& make_buffer,
                              const GlooRingReduceScatterArgs& args);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_HALVING_REDUCE_SCATTER_H_
