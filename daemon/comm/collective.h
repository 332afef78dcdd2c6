#ifndef SHARDD_DAEMON_COMM_COLLECTIVE_H_
#define SHARDD_DAEMON_COMM_COLLECTIVE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/dtype.h"

namespace shardd::comm {

enum class ReduceOp {
  kSum,
  kAverage,  // Sum, then divided by the group size (in fp32).
};

enum class OpKind : int {
  kAllGather = 0,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kSend,
  kRecv,
  kBarrier,
  kNumOpKinds,
};

absl::string_view OpKindName(OpKind kind);

// Per-operation options, in the manner of Gloo's *Options structs.
struct OpOptions {
  // Deadline for this operation, counted from when it starts running (not
  // from when it was queued). Zero means the communicator's default.
  absl::Duration timeout = absl::ZeroDuration();
  // The caller will Wait() for this operation right away (it issues and
  // waits, as the daemon's step engine does). A backend may then run it on
  // the calling thread when nothing else is queued or running, instead of
  // handing it to its worker and back: two thread wake-ups less per
  // operation, which matter for small operations on machines with few
  // cores. The call then returns only when the operation is done; issue
  // order and every other guarantee stay the same. A hint: backends may
  // ignore it.
  bool caller_waits = false;
  // What the caller issues the collective for (e.g. which unit), the same
  // on every rank; only VerifiedCollective reads it, to tell apart two
  // collectives of the same kind and size. 0: nothing to compare.
  uint64_t match_tag = 0;
};

// Counters for one kind of operation, since the communicator was created.
struct OpCounters {
  int64_t calls = 0;
  int64_t failures = 0;
  // Payload bytes by the nccl-tests convention: the all-gather's output,
  // the reduce-scatter's input, the all-reduce's and broadcast's buffer,
  // the bytes sent or received.
  int64_t bytes = 0;
  // Wall time spent running (not queued), summed.
  absl::Duration busy = absl::ZeroDuration();
};

struct CollectiveStats {
  std::array<OpCounters, static_cast<int>(OpKind::kNumOpKinds)> ops;
  const OpCounters& of(OpKind kind) const {
    return ops[static_cast<int>(kind)];
  }
};

// The handle of an operation issued asynchronously.
//
// Thread-safe. The caller keeps the operation's buffers alive and untouched
// until Wait() returns (whatever it returns).
class Work {
 public:
  virtual ~Work() = default;

  // Blocks until the operation finishes or fails; never longer than the
  // operation's deadline plus scheduling slack. Returns the same status
  // every time it is called.
  virtual absl::Status Wait() = 0;

  // True once Wait() would return without blocking.
  virtual bool Done() const = 0;
};

// A communicator: the collectives of one group of ranks in one membership
// epoch.
//
// Shaped like Gloo's algorithm interface (one call per collective, options
// per call) with NCCL's life cycle: it is created for one epoch, it fails as
// a whole, and it is never mended in place. After any operation fails (a
// peer died: UNAVAILABLE; a peer hung: DEADLINE_EXCEEDED) or after Abort(),
// every queued and later operation fails with the same error, and the owner
// makes the next epoch's communicator instead.
//
// Operations run in the order they are issued, one at a time, on a thread
// the communicator owns, so that the daemon can prefetch the next unit while
// the trainer computes. Every rank of the group must issue the same
// operations in the same order. Invalid arguments (wrong count vector, root
// or peer outside the group, unsupported dtype) fail that operation with
// INVALID_ARGUMENT before anything is sent, and do not poison the
// communicator.
//
// Reductions of bf16/fp16 inputs accumulate in fp32 and round once.
// Reductions are deterministic: the same inputs on the same ranks give the
// same bits on every run.
//
// Thread-safe: operations may be issued from any thread (they are queued in
// issue order).
class Collective {
 public:
  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int64_t epoch() const = 0;

  // Rank r contributes counts[r] elements from `input`; every rank's
  // `output` receives all contributions back to back in rank order
  // (Σ counts elements). Equal shards are the case of equal counts.
  // `input` may point into `output` at this rank's offset (in place).
  virtual std::shared_ptr<Work> AllGather(const void* input, void* output,
                                          const std::vector<int64_t>& counts,
                                          core::DType dtype,
                                          const OpOptions& options = {}) = 0;

  // `input` holds Σ counts elements on every rank; rank r's `output`
  // (counts[r] elements) receives the reduction over ranks of the input
  // range [Σ_{q<r} counts[q], + counts[r]).
  virtual std::shared_ptr<Work> ReduceScatter(
      const void* input, void* output, const std::vector<int64_t>& counts,
      core::DType dtype, ReduceOp op, const OpOptions& options = {}) = 0;

  // In place: `buffer` (count elements) becomes the reduction over ranks.
  virtual std::shared_ptr<Work> AllReduce(void* buffer, int64_t count,
                                          core::DType dtype, ReduceOp op,
                                          const OpOptions& options = {}) = 0;

  // In place: every rank's `buffer` becomes root's.
  virtual std::shared_ptr<Work> Broadcast(void* buffer, int64_t count,
                                          core::DType dtype, int root,
                                          const OpOptions& options = {}) = 0;

  // Point to point, matched by (peer, tag) and issue order. Operations run
  // one at a time, and a Send completes only once the peer's matching Recv
  // runs, so two ranks that both Send to each other first wait for each
  // other until the deadline: one side sends first, the other receives
  // first.
  virtual std::shared_ptr<Work> Send(const void* buffer, int64_t bytes,
                                     int peer, uint32_t tag,
                                     const OpOptions& options = {}) = 0;
  virtual std::shared_ptr<Work> Recv(void* buffer, int64_t bytes, int peer,
                                     uint32_t tag,
                                     const OpOptions& options = {}) = 0;

  virtual std::shared_ptr<Work> Barrier(const OpOptions& options = {}) = 0;

  // Fails the running operation and every queued one with ABORTED (reason
  // in the message), and every later one too. Idempotent; returns without
  // waiting on any peer.
  virtual void Abort(absl::string_view reason) = 0;

  // OK while healthy; otherwise the first error (or the abort) that ended
  // this communicator. The owner polls it, or learns it from a Wait().
  virtual absl::Status AsyncError() const = 0;

  virtual CollectiveStats Stats() const = 0;

  // Device scratch: a backend whose operations need device memory of their
  // own (NCCL: fp32 copies of 16-bit inputs, fixed-order reduction slots)
  // allocates it here, in issue order before any operation issued after
  // this call, so that no collective allocates while peers may have issued
  // it already. An allocation that fails ends the communicator (its error
  // is the work's and AsyncError's: RESOURCE_EXHAUSTED). Host backends
  // (Gloo) keep none: the default completes at once.
  virtual std::shared_ptr<Work> ReserveScratch(int64_t bytes);
  // Device scratch held now (0 for host backends).
  virtual int64_t scratch_bytes() const { return 0; }
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_COLLECTIVE_H_
