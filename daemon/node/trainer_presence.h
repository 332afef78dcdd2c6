#ifndef SHARDD_DAEMON_NODE_TRAINER_PRESENCE_H_
#define SHARDD_DAEMON_NODE_TRAINER_PRESENCE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/clock.h"
#include "daemon/core/mono_time.h"
#include "shardd/v1/coordinator.pb.h"

namespace shardd::node {

// Whether a trainer has registered with this daemon, and when it last
// called (Gather, Release, ReduceGrad, Step, WaitReady; its registration
// counts as a call), on the monotonic clock. The daemon sends it with every
// heartbeat (v1::TrainerPresence): when a job's epochs keep ending without
// a committed step, the coordinator names the ranks whose trainer went
// quiet, and shardctl cluster shows each member's.
//
// Thread-safe. `clock` is not owned and must outlive the object.
class TrainerPresence {
 public:
  explicit TrainerPresence(Clock* clock = Clock::Real()) : clock_(clock) {}

  // A trainer process registered a model.
  void Registered();
  // The trainer made a call.
  void Called();
  // What the heartbeat reports now: attached, and the time since the last
  // call (0 when none attached).
  v1::TrainerPresence Report() const;

 private:
  Clock* const clock_;
  mutable absl::Mutex mu_;
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  MonoTime last_call_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_TRAINER_PRESENCE_H_
