#ifndef SHARDD_DAEMON_COMM_COMPLETION_WORK_H_
#define SHARDD_DAEMON_COMM_COMPLETION_WORK_H_

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/comm/collective.h"

namespace shardd::comm {

// A Work that whoever runs the operation completes once with its status.
// Thread-safe.
class CompletionWork : public Work {
 public:
  // Blocks until Complete(); bounded by the executor, which completes every
  // operation by its deadline.
  absl::Status Wait() override;
  bool Done() const override;

  // Records the status and wakes the waiters. Only the first call counts.
  void Complete(absl::Status status);

 private:
  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_COMPLETION_WORK_H_
