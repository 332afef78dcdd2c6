#ifndef SHARDD_DAEMON_COMM_SHM_TRANSPORT_H_
#define SHARDD_DAEMON_COMM_SHM_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/collective_transport.h"
#include "daemon/comm/fixed_order_sum.h"
#include "daemon/comm/peer_liveness.h"
#include "daemon/comm/shm_rounds.h"
#include "daemon/comm/shm_segment.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {

// The transport of the CPU communicator of a group whose ranks all run on
// one host (QueuedCollective holds the rest): the collectives move data
// through one shared-memory segment (ShmRounds: per-rank double-buffered
// slots, futex waits), a copy into the segment and a copy out instead of
// Gloo's trips through the kernel's TCP stack. The communicator keeps
// GlooCollective's contract in every respect, bits included:
// - AllGather: every rank copies its part into its slot chunk by chunk,
//   and every rank copies every other rank's chunk to its output.
// - ReduceScatter: every rank copies a segment of every block into its
//   slot; each rank sums its own block's segment from all W slots in the
//   order GlooCollective would (FixedOrderSum, with the same
//   ChooseReduceScatterAlgorithm), 16-bit inputs in fp32, rounded once.
// - AllReduce: that reduce-scatter on GlooCollective's even split, each
//   owner rounds its shard, then the all-gather in place.
// - Broadcast: the root's chunks through its slot. Barrier: a round with
//   no data.
// - Send/Recv: delegated to an inner GlooCollective over TCP that this
//   transport owns (created at formation). They are used only by
//   recovery's shard copy, which relies on Gloo's matching (peer, tag) and
//   on a stream of Sends and Recvs being posted together; a per-pair
//   shared-memory channel would cost W × (W - 1) more buffers to match
//   that, for a path that runs once per recovery.
// Memory: the segment, 2 × W × slot_bytes plus a header, whatever the
// message size; large operations are pipelined in slot-sized chunks.
//
// Failure: Break (an operation failed: a peer died, UNAVAILABLE; a peer
// never came, DEADLINE_EXCEEDED) and Abort poison the segment (peers fail
// fast with UNAVAILABLE naming this rank) and abort the inner
// communicator.
//
// Thread-safety: see CollectiveTransport. Owns the segment mapping, the
// liveness watch and the inner communicator.
class ShmTransport : public CollectiveTransport {
 public:
  struct Parts {
    int rank = 0;
    int size = 1;
    int64_t slot_bytes = 0;
    std::unique_ptr<ShmSegment> segment;  // Initialised and validated.
    std::unique_ptr<PeerLiveness> liveness;
    std::unique_ptr<Collective> inner;  // For Send and Recv.
  };
  explicit ShmTransport(Parts parts);

  absl::Status AllGather(const void* input, void* output,
                         const std::vector<int64_t>& counts,
                         int64_t element_size, MonoTime deadline) override;
  absl::Status ReduceScatter(const void* input, void* output,
                             const std::vector<int64_t>& counts,
                             core::DType dtype, ReduceOp op,
                             MonoTime deadline) override;
  absl::Status AllReduce(void* buffer, int64_t count, core::DType dtype,
                         ReduceOp op, MonoTime deadline) override;
  absl::Status Broadcast(void* buffer, int64_t bytes, int root,
                         MonoTime deadline) override;
  absl::Status Barrier(MonoTime deadline) override;
  absl::StatusOr<PointToPointWait> StartPointToPoint(
      const PointToPoint& op) override;
  void Break(const absl::Status& cause) override;
  void Abort(const absl::Status& status) override;

 private:
  absl::Status GatherInPlace(uint8_t* output,
                             const std::vector<int64_t>& byte_counts,
                             MonoTime deadline);
  float* Scratch(size_t index, int64_t elements);

  const int rank_;
  const int size_;
  const std::unique_ptr<ShmSegment> segment_;
  const std::unique_ptr<PeerLiveness> liveness_;
  // Set by Abort: the running operation's waits end at their next check.
  std::atomic<bool> aborted_{false};
  // Used by the running operation only.
  ShmRounds rounds_;
  FixedOrderSum sum_;
  std::vector<std::vector<float>> scratch_;
  const std::unique_ptr<Collective> inner_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_SHM_TRANSPORT_H_
