#ifndef SHARDD_DAEMON_COORDINATOR_WATCH_HUB_H_
#define SHARDD_DAEMON_COORDINATOR_WATCH_HUB_H_

#include <memory>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/full_update_cache.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::coordinator {

// Every WatchMembership stream of the coordinator, served without a thread
// per stream (gRPC's callback API): with a sync-server thread each, a few
// thousand streams opening or waking at once stalled the coordinator past
// its members' leases (W = 4,096 never formed).
//
// Responsibility: one dispatcher thread waits on the manager's
// ChangeSignal (or its next keepalive) and, for each stream that is not
// writing, builds the message it is owed (ScopedUpdateStream for scoped
// streams, the shared FullUpdateCache message otherwise) and starts its
// write; a stream ends CANCELLED when its client goes away, with
// DEADLINE_EXCEEDED at its deadline and UNAVAILABLE when the manager shuts
// down. Messages follow the same rules as before (first message the
// current state, keepalives every lease / 3 for full streams and every
// lease for scoped ones).
//
// Thread-safe. Borrows the manager, which must outlive it; the gRPC server
// must be shut down (every stream done) before the hub is destroyed.
class WatchHub {
 public:
  explicit WatchHub(CoordinatorManager* manager);
  ~WatchHub();
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // A new stream's reactor (owned by the hub until gRPC calls OnDone).
  grpc::ServerWriteReactor<shardd::v1::MembershipUpdate>* Open(
      grpc::CallbackServerContext* context,
      const shardd::v1::WatchMembershipRequest& request);

 private:
  class Stream;

  void Run();
  void Remove(Stream* stream);

  CoordinatorManager* const manager_;
  FullUpdateCache full_updates_;

  absl::Mutex mu_;
  absl::flat_hash_map<Stream*, std::shared_ptr<Stream>> streams_
      ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Open streams that are not scoped (they want every change).
  int full_streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread dispatcher_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_WATCH_HUB_H_
