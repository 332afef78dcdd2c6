#ifndef SHARDD_DAEMON_COMM_GLOO_DIRECT_ALL_GATHER_H_
#define SHARDD_DAEMON_COMM_GLOO_DIRECT_ALL_GATHER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/comm/gloo_ring_reduce_scatter.h"
#include "gloo/context.h"

namespace shardd::comm {

// All-gather in place in one step, on Gloo unbound buffers: every rank
// sends its own part of `output` straight to every other rank and receives
// theirs into their parts, all posted at once. It moves the same bytes per
// rank as Gloo's ring, (W - 1) times its part out and the others' in, but
// with no rank waiting on another's forwarding: the ring's W - 1 dependent
// steps (Gloo's allgather waits for each half-part before forwarding it)
// become one. Equal or uneven parts alike; the bytes are copied, so the
// result is bit-identical to the ring's.
//
// `output` holds byte_counts[r] bytes for rank r, in rank order; this
// rank's part must be in place already. `slot` must differ from the slots
// of operations that may overlap this one. Runs on the calling thread and
// throws on failure (the factory's buffers carry the deadline and abort).
void GlooDirectAllGather(gloo::Context& context,
                         const GlooBufferFactory& make_buffer, uint8_t* output,
                         const std::vector<size_t>& byte_counts, uint64_t slot);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_DIRECT_ALL_GATHER_H_
