#ifndef SHARDD_DAEMON_COMM_SCOPED_SIGPIPE_BLOCK_H_
#define SHARDD_DAEMON_COMM_SCOPED_SIGPIPE_BLOCK_H_

#include <signal.h>

namespace shardd::comm {

// Blocks SIGPIPE in the calling thread for the scope's life.
//
// Gloo's TCP transport writes with writev(2), which raises SIGPIPE when the
// peer has closed the connection; its default action kills the process.
// Rather than ignore SIGPIPE for the whole process, the Gloo backend blocks
// it in the threads that write: its worker thread (for good), and the
// thread that creates the transport device while it does so, which makes
// Gloo's event-loop thread inherit the blocked mask. A write to a closed
// socket then fails with EPIPE, which Gloo reports as an error.
//
// The destructor discards a SIGPIPE raised in this thread meanwhile and
// restores the previous mask.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock();
  ~ScopedSigpipeBlock();

  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t previous_;
  bool was_blocked_ = false;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_SCOPED_SIGPIPE_BLOCK_H_
