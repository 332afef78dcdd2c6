#include "daemon/comm/completion_work.h"

#include <utility>

namespace shardd::comm {

absl::Status CompletionWork::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  return status_;
}

bool CompletionWork::Done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void CompletionWork::Complete(absl::Status status) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  status_ = std::move(status);
  done_ = true;
}

}  // namespace shardd::comm
