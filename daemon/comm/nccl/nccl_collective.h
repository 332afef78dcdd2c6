#ifndef SHARDD_DAEMON_COMM_NCCL_NCCL_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_NCCL_NCCL_COLLECTIVE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/comm/store.h"

// The NCCL (GPU) backend of Collective. Built only with --config=cuda.
namespace shardd::comm::nccl {

struct NcclCollectiveOptions {
  int rank = 0;
  int size = 1;
  // The membership epoch this communicator belongs to; with `group` it
  // scopes the unique id's store key (NcclUniqueIdKey).
  int64_t epoch = 0;
  // The group's name ([A-Za-z0-9_.-]+), e.g. "shard0" or "replica1".
  std::string group = "world";
  // The job rank of each group rank; the unique id's key is owned by
  // job_ranks[0], which writes it (the coordinator lets only that member
  // write it). Empty: group ranks are job ranks.
  std::vector<int> job_ranks = {};
  // The CUDA device the communicator, its stream and its buffers live on.
  int cuda_device = 0;
  // Deadline for the whole rendezvous: waiting for rank 0's unique id and
  // the non-blocking ncclCommInitRankConfig together. Also bounds the
  // graceful ncclCommFinalize at destruction.
  absl::Duration connect_timeout = absl::Seconds(60);
  // An operation's deadline when its OpOptions leave it at zero.
  absl::Duration default_op_timeout = absl::Minutes(5);
  // How reductions sum (nccl_plan.h): kFixed, the ring order whatever
  // NCCL's topology and tuning (what bit-identical recovery needs), or
  // NCCL's own reductions.
  ReductionOrder reduction_order = ReductionOrder::kFixed;
};

// Creates the communicator of one group in one epoch: rank 0 makes the
// ncclUniqueId and publishes it through `store`, everyone initialises a
// non-blocking NCCL communicator (config.blocking = 0) and polls it until
// ready or the connect deadline (then ncclCommAbort, DEADLINE_EXCEEDED).
// A peer that fails during init gives UNAVAILABLE; NCCL's refusal of the
// configuration (for example two ranks on one GPU: "Duplicate GPU
// detected") gives FAILED_PRECONDITION. Invalid options: INVALID_ARGUMENT.
// `store` is used only during the call. Callable from any thread; blocks
// for at most about connect_timeout, and leaves the calling thread's current
// CUDA device as it found it.
//
// The returned Collective runs operations on its own CUDA stream, one at a
// time in issue order, on a worker thread it owns. Buffers are device
// pointers on `cuda_device`. A worker thread watches every operation: when
// its deadline passes (DEADLINE_EXCEEDED) or NCCL reports an asynchronous
// error (ncclRemoteError/ncclSystemError: UNAVAILABLE; others: INTERNAL),
// it calls ncclCommAbort (which does not wait on peers), fails the running
// operation and every queued one, and the communicator stays failed. Abort()
// does the same with ABORTED. A failed operation's Wait() returns only
// after the communicator's kernels have stopped, so the caller may free its
// buffers then. Destruction finalizes a healthy communicator (bounded by
// connect_timeout, falling back to abort), aborts a failed or busy one, and
// joins the worker.
//
// Send/Recv: NCCL has no tags; point-to-point messages between two ranks
// match in issue order (which the interface also requires), and the tag is
// not sent.
absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(
    const NcclCollectiveOptions& options, Store& store);

}  // namespace shardd::comm::nccl

#endif  // SHARDD_DAEMON_COMM_NCCL_NCCL_COLLECTIVE_H_
