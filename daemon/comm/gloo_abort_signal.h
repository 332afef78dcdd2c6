#ifndef SHARDD_DAEMON_COMM_GLOO_ABORT_SIGNAL_H_
#define SHARDD_DAEMON_COMM_GLOO_ABORT_SIGNAL_H_

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gloo/transport/unbound_buffer.h"

namespace shardd::comm {

// The abort flag of one communicator, and the Gloo buffers whose waits an
// abort must interrupt.
//
// Gloo's TCP transport does not wake a waiter when its own side closes a
// connection, so closing the pairs alone leaves the running operation
// blocked until its timeout. Every unbound buffer of ours is registered here
// while it exists; Abort() calls abortWaitRecv/abortWaitSend on each (Gloo
// keeps that request until the next wait consumes it, so an abort that comes
// before the wait is not lost), and GlooAbortableBuffer turns the
// interrupted wait into an exception.
//
// Thread-safe.
class GlooAbortSignal {
 public:
  // Sets the flag (first status wins) and interrupts every registered
  // buffer's waits. Never blocks on I/O.
  void Abort(absl::Status status);

  // OK until Abort(); then the abort status.
  absl::Status status() const;

  // Throws StatusException(status()) once aborted.
  void ThrowIfAborted() const;

  // A registered buffer must be unregistered before it is destroyed. A
  // buffer registered after Abort() is interrupted at once.
  void Register(gloo::transport::UnboundBuffer* buffer);
  void Unregister(gloo::transport::UnboundBuffer* buffer);

 private:
  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<gloo::transport::UnboundBuffer*> buffers_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_ABORT_SIGNAL_H_
