#ifndef SHARDD_DAEMON_COMM_GLOO_ABORTABLE_BUFFER_H_
#define SHARDD_DAEMON_COMM_GLOO_ABORTABLE_BUFFER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "daemon/comm/gloo_abort_signal.h"
#include "daemon/core/mono_time.h"
#include "gloo/transport/unbound_buffer.h"

namespace shardd::comm {

// A Gloo unbound buffer (decorating the transport's own) whose waits end at
// one operation's deadline and throw when the communicator is aborted.
//
// Gloo's algorithms (allgather, allgatherv, broadcast) take unbound buffers
// through their options and call only the virtual interface, so handing
// them this decorator makes them abortable and deadline-bound too. Gloo
// passes the same per-wait timeout to every wait of an algorithm; this
// buffer shortens each wait to what is left of the operation's deadline.
//
// Waits throw instead of returning false: StatusException(ABORTED ...) after
// an abort, StatusException(DEADLINE_EXCEEDED ...) once the deadline has
// passed; Gloo's own exceptions (a timed-out or failed transport) pass
// through. Send and recv throw once aborted, so that nothing new is posted
// on connections the abort has closed.
class GlooAbortableBuffer : public gloo::transport::UnboundBuffer {
 public:
  // `signal` must outlive this buffer.
  GlooAbortableBuffer(std::unique_ptr<gloo::transport::UnboundBuffer> inner,
                      GlooAbortSignal* signal, MonoTime deadline);
  ~GlooAbortableBuffer() override;

  GlooAbortableBuffer(const GlooAbortableBuffer&) = delete;
  GlooAbortableBuffer& operator=(const GlooAbortableBuffer&) = delete;

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override;
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override;
  void abortWaitRecv() override;
  void abortWaitSend() override;
  void send(int dst_rank, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(int src_rank, uint64_t slot, size_t offset, size_t nbytes) override;
  void recv(std::vector<int> src_ranks, uint64_t slot, size_t offset,
            size_t nbytes) override;

  // Plain forms for our own algorithms (the base class's overloads are
  // hidden by the overrides above).
  void WaitRecv() { waitRecv(nullptr, gloo::transport::kUnsetTimeout); }
  void WaitSend() { waitSend(nullptr, gloo::transport::kUnsetTimeout); }

 private:
  // What is left of the deadline, shortened to `timeout` when Gloo passes
  // one; throws DEADLINE_EXCEEDED when nothing is left.
  std::chrono::milliseconds Remaining(std::chrono::milliseconds timeout,
                                      const char* what) const;

  std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
  GlooAbortSignal* const signal_;
  const MonoTime deadline_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_GLOO_ABORTABLE_BUFFER_H_
