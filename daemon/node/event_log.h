#ifndef SHARDD_DAEMON_NODE_EVENT_LOG_H_
#define SHARDD_DAEMON_NODE_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// The daemon's recent events for Trainer.WatchEvents: epoch changes,
// aborted and committed steps, recovery progress, readiness. Each appended
// event gets the next sequence number (from 1) and the time; the newest
// `capacity` are kept, so a reconnecting watcher can resume where it left
// off, or learns (by a gap in the sequence) that it must start from a
// snapshot.
//
// Thread-safe. Owns its events.
class EventLog {
 public:
  explicit EventLog(size_t capacity = 1024) : capacity_(capacity) {}

  // Stamps `event` with sequence and time, keeps it, wakes waiters.
  // Returns the sequence given.
  int64_t Append(v1::TrainerEvent event);

  // The events with sequence > after (oldest first), waiting until there is
  // at least one, `deadline` passes or Close() is called. False when closed
  // (out still gets what there was).
  bool WaitAfter(int64_t after, MonoTime deadline,
                 std::vector<v1::TrainerEvent>* out) const;

  // The oldest sequence still kept (0 when none) and the newest given.
  int64_t oldest_sequence() const;
  int64_t last_sequence() const;

  // Wakes every waiter; later WaitAfter calls return at once.
  void Close();

 private:
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<v1::TrainerEvent> events_ ABSL_GUARDED_BY(mu_);
  int64_t last_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_EVENT_LOG_H_
