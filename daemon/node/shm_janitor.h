#ifndef SHARDD_DAEMON_NODE_SHM_JANITOR_H_
#define SHARDD_DAEMON_NODE_SHM_JANITOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/core/mono_notification.h"
#include "daemon/memory/shm_owner_lock.h"
#include "daemon/metrics/node_observer.h"

namespace shardd::node {

// Keeps a shared-memory directory free of dead daemons' segments.
//
// Start() sweeps the directory once (a previous incarnation's leftovers,
// e.g. a sidecar that crashed and restarted in place with the same pid)
// and then takes this daemon's owner lock for `prefix`, before any segment
// of the prefix exists; then a thread sweeps every `interval` (a sibling
// daemon sharing the directory may die while this one runs). Each sweep is
// logged when it frees something ("shardd: shm sweep: removed ...") and
// reported to the observer; leftover_bytes() and swept_bytes() are for
// GetStatus.
//
// Thread-safe. Owns its thread and the owner lock (released, the owner
// file removed, when destroyed: after the segments are gone). The observer
// is borrowed (may be null) and must outlive the janitor.
class ShmJanitor {
 public:
  // The first sweep's error is returned only if the directory cannot be
  // read; the lock's error (ALREADY_EXISTS: a live process holds the
  // prefix) always.
  static absl::StatusOr<std::unique_ptr<ShmJanitor>> Start(
      std::string dir, std::string prefix, absl::Duration interval,
      metrics::NodeObserver* observer);
  ~ShmJanitor();

  int64_t leftover_bytes() const { return leftover_bytes_.load(); }
  int64_t swept_bytes() const { return swept_bytes_.load(); }

  // One sweep now (the thread's work); false if the directory is unreadable.
  // It also removes the names of communicator segments (in /dev/shm) whose
  // creator died before every rank had mapped them.
  bool SweepOnce();

 private:
  ShmJanitor(std::string dir, std::string prefix, absl::Duration interval,
             metrics::NodeObserver* observer);
  void SweepCommunicatorSegments();

  const std::string dir_;
  const std::string prefix_;
  const absl::Duration interval_;
  metrics::NodeObserver* const observer_;
  std::unique_ptr<memory::ShmOwnerLock> lock_;
  std::atomic<int64_t> leftover_bytes_{0};
  std::atomic<int64_t> swept_bytes_{0};
  MonoNotification stop_;
  std::thread thread_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_SHM_JANITOR_H_
