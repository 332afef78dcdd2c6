#ifndef SHARDD_DAEMON_COMM_GLOO_RING_REDUCE_SCATTER_H_
#define SHARDD_DAEMON_COMM_GLOO_RING_REDUCE_SCATTER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "daemon/comm/gloo_abortable_buffer.h"
#include "gloo/context.h"

namespace shardd::comm {

// Makes the (abortable, deadline-bound) unbound buffer over [ptr, +bytes).
using GlooBufferFactory = std::function<std::unique_ptr<GlooAbortableBuffer>(
    void* ptr, size_t bytes)>;

struct GlooRingReduceScatterArgs {
  // Σ counts fp32 elements, this rank's contribution.
  const float* input = nullptr;
  // counts[rank] elements: the sum over ranks of input block `rank`. May
  // alias input + Σ_{q<rank} counts[q] (in place).
  float* output = nullptr;
  std::vector<int64_t> counts;
  // Scratch of at least (W - 1) * max(counts) elements (one receive buffer
  // per ring step), owned by the caller and reused across calls.
  float* scratch = nullptr;
  // Pipelining granularity, in elements (> 0).
  int64_t segment_elements = 256 * 1024;
  // GlooDirectReduceScatter only: receive into a ring of this many segment
  // slots per peer, reused, instead of a whole block per peer (0).
  int64_t window_segments = 0;
  // The Gloo slot this operation's messages travel on; the same on every
  // rank, distinct from the slots of Gloo's algorithms.
  uint64_t slot = 0;
};

// Sum reduce-scatter over a ring, pipelined in segments, on Gloo unbound
// buffers. For context->size >= 2; runs on the calling thread and throws
// on failure (StatusException or a Gloo exception).
//
// Step s = 0 .. W-2: rank r sends the partial sum of block (r-1-s) mod W to
// rank r+1 and receives the partial of block (r-2-s) mod W from rank r-1,
// adds its own input to it, and forwards it at step s+1; at the last step
// the received block is its own and the sum goes to `output`. Each block is
// cut into segments, and a segment is forwarded as soon as it is reduced,
// so the next segment arrives while this one is being added and the
// previous one is being sent.
//
// Deterministic: block b is always summed in the same order, starting with
// rank b+1's input and adding ranks b+2, ..., b in ring order, one
// IEEE-rounded fp32 addition per rank; the order depends only on W and b,
// never on timing, so the same inputs give the same bits on every run.
void GlooRingReduceScatter(gloo::Context& context,
                           const GlooBufferFactory& make_buffer,
                           const GlooRingReduceScatterArgs& args);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_RING_REDUCE_SCATTER_H_
