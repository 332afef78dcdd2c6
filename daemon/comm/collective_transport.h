#ifndef SHARDD_DAEMON_COMM_COLLECTIVE_TRANSPORT_H_
#define SHARDD_DAEMON_COMM_COLLECTIVE_TRANSPORT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/core/dtype.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {

// How one host communicator moves and reduces data: the transport half of
// a Collective. QueuedCollective holds the other half, the same for every
// transport (argument checks, issue order, Work, stats, the communicator's
// error and abort), and calls in here; GlooCollective's transport runs over
// Gloo's TCP pairs, ShmTransport through one shared-memory segment.
//
// Thread-safety: the operation methods are called one at a time (on the
// communicator's worker, or on a caller's thread that waits), always with
// arguments QueuedCollective has validated; Break and Abort may be called
// from any thread while an operation runs. An operation returns its error
// (it never throws); QueuedCollective adds which operation and which
// communicator to the message.
class CollectiveTransport {
 public:
  // A Send or Recv, validated, with its deadline.
  struct PointToPoint {
    OpKind kind = OpKind::kSend;  // kSend or kRecv.
    void* buffer = nullptr;       // Only read by a Send.
    int64_t bytes = 0;
    int peer = 0;
    uint32_t tag = 0;
    absl::Duration timeout = absl::ZeroDuration();
    MonoTime deadline;
  };
  // Ends a started Send or Recv: returns once it has completed, failed, or
  // passed its deadline. Called at most once.
  using PointToPointWait = std::function<absl::Status()>;

  virtual ~CollectiveTransport() = default;

  // The bodies of Collective's operations (see there), with the timeout
  // already turned into a deadline. AllGather takes the element size, for
  // it only moves bytes; Broadcast takes bytes.
  virtual absl::Status AllGather(const void* input, void* output,
                                 const std::vector<int64_t>& counts,
                                 int64_t element_size, MonoTime deadline) = 0;
  virtual absl::Status ReduceScatter(const void* input, void* output,
                                     const std::vector<int64_t>& counts,
                                     core::DType dtype, ReduceOp op,
                                     MonoTime deadline) = 0;
  virtual absl::Status AllReduce(void* buffer, int64_t count, core::DType dtype,
                                 ReduceOp op, MonoTime deadline) = 0;
  virtual absl::Status Broadcast(void* buffer, int64_t bytes, int root,
                                 MonoTime deadline) = 0;
  virtual absl::Status Barrier(MonoTime deadline) = 0;

  // Starts a Send or Recv and returns how to wait for it, so that a stream
  // of them (a shard copied piece by piece) can all be started before the
  // first is waited for, without a pause between pieces. An error here
  // means it never started.
  virtual absl::StatusOr<PointToPointWait> StartPointToPoint(
      const PointToPoint& op) = 0;

  // The communicator broke with `cause` (its first failure): make peers
  // that wait on this rank fail now rather than at their deadlines. Never
  // waits on a peer.
  virtual void Break(const absl::Status& cause) = 0;
  // Abort: the running operation's waits end now (it returns an error),
  // nothing new starts, and peers fail as after Break. Never waits on a
  // peer.
  virtual void Abort(const absl::Status& status) = 0;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_COLLECTIVE_TRANSPORT_H_
