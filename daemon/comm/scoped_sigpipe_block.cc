#include "daemon/comm/scoped_sigpipe_block.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

namespace shardd::comm {

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, &previous_);
  was_blocked_ = sigismember(&previous_, SIGPIPE) == 1;
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (was_blocked_) return;  // The mask is already what it was.
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    const struct timespec zero = {0, 0};
    sigtimedwait(&pipe, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace shardd::comm
