#include "daemon/comm/gloo_direct_all_gather.h"

#include <memory>

namespace shardd::comm {

void GlooDirectAllGather(gloo::Context& context,
                         const GlooBufferFactory& make_buffer, uint8_t* output,
                         const std::vector<size_t>& byte_counts,
                         uint64_t slot) {
  const int world = context.size;
  const int rank = context.rank;
  std::vector<size_t> offset(world + 1, 0);
  for (int r = 0; r < world; ++r) offset[r + 1] = offset[r] + byte_counts[r];
  if (world == 1 || offset[world] == 0) return;
  std::unique_ptr<GlooAbortableBuffer> buffer =
      make_buffer(output, offset[world]);
  // Every receive is posted before anything is sent, so that no part waits
  // in a socket for its receive. Peers in ring order from this rank (rank-1
  // first, whose part the ring would bring first) and sends to rank+1
  // first: at each moment the ranks send to different peers, which spreads
  // the load over the connections.
  int recvs = 0;
  for (int i = 1; i < world; ++i) {
    const int peer = (rank + world - i) % world;
    if (byte_counts[peer] == 0) continue;
    buffer->recv(peer, slot, offset[peer], byte_counts[peer]);
    ++recvs;
  }
  int sends = 0;
  if (byte_counts[rank] > 0) {
    for (int i = 1; i < world; ++i) {
      const int peer = (rank + i) % world;
      buffer->send(peer, slot, offset[rank], byte_counts[rank]);
      ++sends;
    }
  }
  for (int i = 0; i < recvs; ++i) buffer->WaitRecv();
  for (int i = 0; i < sends; ++i) buffer->WaitSend();
}

}  // namespace shardd::comm
