#ifndef SHARDD_DAEMON_COORDINATOR_RENDEZVOUS_STORE_H_
#define SHARDD_DAEMON_COORDINATOR_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

struct RendezvousLimits {
  size_t max_key_bytes = 1024;
  size_t max_value_bytes = 1 << 20;
  // Keys per epoch: W ranks times a few communicators each is far below.
  size_t max_keys_per_epoch = 1 << 16;
};

// The key-value store communicators rendezvous through, scoped by epoch.
// Who may read or write which key is decided before (AuthorizeRendezvous);
// this class only keeps the values.
//
// Only the current epoch's namespace exists: advancing the epoch drops the
// old keys and wakes every waiter of an older epoch with ABORTED, so a
// communicator of a dead epoch can never pick up a new epoch's addresses.
//
// Thread-safe. Wait blocks (with a deadline) on the calling thread.
class RendezvousStore {
 public:
  explicit RendezvousStore(RendezvousLimits limits = {}) : limits_(limits) {}

  // Moves to `epoch` (no-op if not newer), dropping older keys.
  void AdvanceEpoch(int64_t epoch);
  int64_t epoch() const;

  // Unless `replace`, a key is written once per epoch: setting it again with
  // the same value is a no-op, with another value ALREADY_EXISTS. With
  // `replace` another value overwrites it. INVALID_ARGUMENT (key empty/too
  // long, value too long), ABORTED (epoch older than current),
  // FAILED_PRECONDITION (epoch not begun), ALREADY_EXISTS (set with another
  // value, or if_absent and present), RESOURCE_EXHAUSTED (namespace full).
  absl::Status Set(int64_t epoch, absl::string_view key,
                   absl::string_view value, bool if_absent,
                   bool replace = false);

  // NOT_FOUND when not set; ABORTED / FAILED_PRECONDITION as Set.
  absl::StatusOr<std::string> Get(int64_t epoch, absl::string_view key);

  // Waits until every key is set, then returns their values in order.
  // DEADLINE_EXCEEDED naming the missing keys; ABORTED if the epoch is or
  // becomes stale; INVALID_ARGUMENT for no keys or an empty key;
  // CANCELLED once Shutdown() was called.
  absl::StatusOr<std::vector<std::string>> Wait(
      int64_t epoch, const std::vector<std::string>& keys, MonoTime deadline);

  // Wakes every waiter with CANCELLED; later waits fail the same way.
  void Shutdown();

 private:
  absl::Status CheckEpoch(int64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RendezvousLimits limits_;
  mutable absl::Mutex mu_;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_RENDEZVOUS_STORE_H_
