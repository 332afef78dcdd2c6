#ifndef SHARDD_DAEMON_COORDINATOR_WATCH_HUB_H_
#define SHARDD_DAEMON_COORDINATOR_WATCH_HUB_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/coordinator/coordinator_manager.h"
#include "daemon/coordinator/full_update_cache.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::coordinator {

// Every WatchMembership stream of the coordinator, served on gRPC's
// callback API: no thread per stream. With a sync-server thread each, a
// job of 4,096 held 8,000 threads and the coordinator spent its time in
// the kernel scheduling them, past its members' leases.
//
// Responsibility: each stream is a reactor that owes its client the
// message WatchMembership promises (the current state first; then, for a
// scoped stream, what ScopedUpdateStream makes of each change, for a full
// one the shared FullUpdateCache message of each version; a keepalive
// when nothing was sent for a lease, a third of one for full streams). A
// stream writes one message at a time. One dispatcher thread builds every
// message: it waits on the manager's ChangeSignal and, on a change, offers
// it to every stream; every kScanPeriod it looks at every stream for
// keepalives and deadlines; within kPoll it serves streams that opened or
// whose write completed (a change during a write goes out then). gRPC's
// threads only flip a stream's flags: they never wait on the manager's
// lock, so a busy manager cannot stall gRPC's transport.
// A stream ends CANCELLED when its client goes away, DEADLINE_EXCEEDED at
// its deadline, UNAVAILABLE when the manager shuts down.
//
// Thread-safe. Borrows the manager, which must outlive it. The gRPC server
// must be shut down (every stream done) before the hub is destroyed.
class WatchHub {
 public:
  explicit WatchHub(CoordinatorManager* manager);
  ~WatchHub();
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // A new stream's reactor: gRPC owns the call, the hub the reactor until
  // gRPC calls its OnDone. `request` must be valid (rank checked).
  grpc::ServerWriteReactor<shardd::v1::MembershipUpdate>* Open(
      grpc::CallbackServerContext* context,
      const shardd::v1::WatchMembershipRequest& request);

  // Streams not yet done.
  int open_streams() const;

 private:
  class Stream;

  void Run();
  // `stream` (new, or its write completed) is offered what it owes at the
  // dispatcher's next pass (within kPoll).
  void NeedsOffer(Stream* stream);
  void Remove(Stream* stream);

  CoordinatorManager* const manager_;
  FullUpdateCache full_updates_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<Stream*, std::shared_ptr<Stream>> streams_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Stream>> needs_offer_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Open streams that are not scoped (they want every change).
  int full_streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread dispatcher_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_WATCH_HUB_H_
