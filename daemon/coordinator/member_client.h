#ifndef SHARDD_DAEMON_COORDINATOR_MEMBER_CLIENT_H_
#define SHARDD_DAEMON_COORDINATOR_MEMBER_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/coordinator/membership_view.h"
#include "daemon/core/mono_time.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::coordinator {

struct MemberClientOptions {
  // host:port of the coordinator. Ignored when `channel` is set.
  std::string coordinator_address;
  // A channel to use instead of creating one (shared by simulated members
  // in benchmarks). Created channels reconnect quickly (100 ms .. 1 s
  // backoff) so that a restarted coordinator is found again at once.
  std::shared_ptr<grpc::Channel> channel;
  // Credentials of the created channel (rpc::TlsConfig::ChannelCredentials
  // for TLS to the coordinator). Null: insecure. Ignored with `channel`.
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
  // The slot to claim; -1: any empty slot. Re-joins always claim the slot
  // the member holds.
  int rank = -1;
  // Stable identity (e.g. the pod name). Required.
  std::string identity;
  // host:port of this member's Peer service. Required.
  std::string peer_address;
  // Random per process; empty: a random one is chosen.
  std::string incarnation;
  shardd::v1::DeviceKind device = shardd::v1::DEVICE_KIND_CPU;
  std::map<std::string, std::string> info;
  // Called at every join and re-join (on the calling or the heartbeat
  // thread; it must not call the client). Null: holds nothing, step 0.
  std::function<MemberShardStatus()> shard_status;
  // The peers this member cannot reach, sent with every heartbeat (called
  // on the heartbeat thread without the client's lock; it must not call the
  // client). Null: none reported.
  std::function<std::vector<shardd::v1::UnreachablePeer>()> unreachable_peers;
  // The member's verified sharded checkpoints, sent with every join and
  // heartbeat (called without the client's lock; it must be cheap and must
  // not call the client). Null: keeps none.
  std::function<shardd::v1::CheckpointInventory()> checkpoints;
  // What the member knows of its trainer, sent with every heartbeat (called
  // without the client's lock; it must be cheap and must not call the
  // client). Null: not reported.
  std::function<shardd::v1::TrainerPresence()> trainer;
  // Deadline of every unary RPC (Join, Heartbeat, Leave).
  absl::Duration rpc_timeout = absl::Seconds(2);
  // Deadline of ReportFailure (the coordinator probes the suspect first).
  absl::Duration report_timeout = absl::Seconds(5);
  // How long the first Join keeps retrying while the coordinator is
  // UNAVAILABLE (not yet started, restarting).
  absl::Duration initial_join_timeout = absl::Seconds(30);
  // Longest a watch stream stays open before it is reopened (the first
  // message of a new stream is the current state, so nothing is lost).
  absl::Duration watch_stream_lifetime = absl::Seconds(60);
};

// The daemon side of the Coordinator protocol, without decisions of its
// own: it joins, renews the lease, keeps a view of the membership, reports
// READY and failures when told to, and re-joins when the coordinator no
// longer knows it.
//
// Responsibility:
//  - Join (retrying UNAVAILABLE up to initial_join_timeout).
//  - A heartbeat thread: every heartbeat_interval_ms of the JoinResponse it
//    sends the member's state for the newest epoch it knows: READY if
//    SetReady was called for that epoch, RECOVERING if the join planned a
//    shard copy that is not done, JOINING otherwise. UNAVAILABLE and
//    DEADLINE_EXCEEDED are retried with exponential backoff from 50 ms,
//    capped at the heartbeat interval. NOT_FOUND (the coordinator
//    restarted, or the lease expired) triggers a re-join with the same
//    rank, identity and incarnation, the last epoch and the current shard
//    status; a re-join rejected for any reason but UNAVAILABLE ends the
//    membership (view().error). The thread also reopens a watch stream
//    that has been silent for two leases.
//  - A watch thread: WatchMembership, reconnecting with backoff, keeping
//    the MembershipView.
//  - WaitFor: block until a predicate over the view holds, with a deadline.
//
// Every RPC has a deadline except the watch stream, which is bounded by
// watch_stream_lifetime and the keepalive watchdog.
//
// Thread-safe: every method may be called from any thread. Heartbeats are
// serialised (one in flight at a time), so a READY heartbeat is never
// overtaken by an older JOINING one.
//
// Ownership: owns its threads and (unless given one) its channel. The
// destructor stops both threads promptly (cancelling in-flight calls and the
// watch stream) without leaving: a destroyed client looks to the
// coordinator like a crashed daemon, its lease runs out.
class MemberClient {
 public:
  // Joins and starts the heartbeat and watch threads. Errors are the Join's
  // (INVALID_ARGUMENT, ALREADY_EXISTS, RESOURCE_EXHAUSTED, ...), or
  // UNAVAILABLE / DEADLINE_EXCEEDED when the coordinator could not be
  // reached within initial_join_timeout.
  static absl::StatusOr<std::unique_ptr<MemberClient>> Join(
      MemberClientOptions options);

  ~MemberClient();
  MemberClient(const MemberClient&) = delete;
  MemberClient& operator=(const MemberClient&) = delete;

  // The reply to the latest (re-)join.
  shardd::v1::JoinResponse join_response() const;
  int rank() const;
  const std::string& incarnation() const { return options_.incarnation; }
  // The lease token of the latest (re-)join: the member's credential for
  // the calls it makes as that rank (e.g. the rendezvous store,
  // comm::CoordinatorStoreOptions::lease_token). Never log it.
  std::string lease_token() const;
  // The lease token once no (re-)join is in flight, waiting until
  // `deadline` at most (then the token it has). A re-join replaces the
  // token, and the coordinator announces the epoch it starts on the watch
  // stream before the Join reply reaches this client: a daemon that built
  // that epoch's communicators with lease_token() could present the old
  // token and be refused by the rendezvous store.
  std::string SettledLeaseToken(MonoTime deadline) const;

  MembershipView view() const;
  // The newest checkpoint step every rank holds, as the coordinator's
  // latest heartbeat reply said (the last known one while it does not
  // know); -1 before any.
  int64_t common_checkpoint_step() const;

  // Blocks until `predicate(view)` holds, returning that view. The
  // predicate runs under the client's lock on any thread: it must be cheap
  // and must not call the client. DEADLINE_EXCEEDED at `deadline`;
  // view().error if the membership ended; CANCELLED when the client is
  // being destroyed.
  absl::StatusOr<MembershipView> WaitFor(
      std::function<bool(const MembershipView&)> predicate,
      MonoTime deadline) const;

  // WaitFor(epoch >= min_epoch && ready).
  absl::StatusOr<MembershipView> WaitForEpochReady(int64_t min_epoch,
                                                   MonoTime deadline) const;

  // Records that this member is READY in `epoch` at `committed_step` (its
  // communicators of that epoch are up, its shard is at that step) and
  // sends a heartbeat at once; returns that heartbeat's status (after a
  // re-join if the coordinator answered NOT_FOUND).
  absl::Status SetReady(int64_t epoch, int64_t committed_step);

  // Fast-path failure report about `suspect`, seen in `epoch` (-1: the
  // newest epoch this member knows). The coordinator's reply or status
  // (ABORTED: already handled by a later epoch).
  absl::StatusOr<shardd::v1::ReportFailureResponse> ReportFailure(
      int suspect, shardd::v1::FailureKind kind, absl::string_view detail,
      int64_t epoch = -1);

  // The commit vote on `step` of `epoch` (Coordinator.ShouldCommit), with
  // this member's vote and step fingerprint. Blocks until every member has
  // voted or `deadline`. UNAVAILABLE (coordinator restarting) is retried
  // until the deadline; the coordinator's ABORTED, NOT_FOUND,
  // FAILED_PRECONDITION and DEADLINE_EXCEEDED are returned as they are.
  absl::StatusOr<shardd::v1::ShouldCommitResponse> ShouldCommit(
      int64_t epoch, int64_t step, bool vote, absl::string_view reason,
      uint64_t step_fingerprint, MonoTime deadline);

  // Sends a heartbeat now (with the current checkpoint inventory), e.g. so
  // that the coordinator knows a checkpoint went bad before it plans the
  // next epoch. The heartbeat's status.
  absl::Status SendHeartbeat() { return HeartbeatOnce(); }

  // Leaves gracefully and stops heartbeating (the threads keep running
  // until destruction, the watch keeps the view current).
  absl::Status Leave(absl::string_view reason);

 private:
  explicit MemberClient(MemberClientOptions options);

  // Sends a Join with the member's identity and (on re-join) its slot and
  // last epoch; on success records the lease. Serialised by session_mu_.
  absl::Status DoJoin(bool rejoin) ABSL_EXCLUSIVE_LOCKS_REQUIRED(session_mu_);
  // One heartbeat with the current state; re-joins on NOT_FOUND.
  absl::Status HeartbeatOnce() ABSL_LOCKS_EXCLUDED(session_mu_);
  void HeartbeatLoop();
  void WatchLoop();
  // Applies one watch message; `stream_members` is what the stream has
  // listed so far (a scoped stream's deltas apply to it).
  void ApplyUpdate(const shardd::v1::MembershipUpdate& update,
                   std::map<int, shardd::v1::MemberInfo>& stream_members);
  // The coordinator answered DATA_LOSS (the job has failed): the view's
  // terminal error, if it has none yet.
  void NoteJobFailed(const absl::Status& status);
  void NoteContact();
  // Registers a call's context so that the destructor can cancel it; false
  // when the client is stopping (the call must not start).
  bool Register(grpc::ClientContext* context);
  void Unregister(grpc::ClientContext* context);
  // Sleeps until `deadline` or Stop; true when stopping.
  bool SleepUntil(MonoTime deadline);

  MemberClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<shardd::v1::Coordinator::Stub> stub_;
  // Sent with every Join (JoinRequest.join_secret): random per client.
  const std::string join_secret_;

  // Serialises Join/Heartbeat/Leave so that heartbeats reach the
  // coordinator in the order their state was decided.
  absl::Mutex session_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool left_ ABSL_GUARDED_BY(mu_) = false;
  shardd::v1::JoinResponse join_ ABSL_GUARDED_BY(mu_);
  std::string lease_token_ ABSL_GUARDED_BY(mu_);
  // Join RPCs in flight (SettledLeaseToken waits for none).
  int joins_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int rank_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_) =
      absl::Milliseconds(500);
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(1500);
  // Newest epoch heard of (join, heartbeat replies, watch).
  int64_t known_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t common_checkpoint_step_ ABSL_GUARDED_BY(mu_) = -1;
  // The last step this member voted yes on, and the step fingerprint it
  // sent: a re-join in doubt about that step reports the fingerprint.
  struct Voted {
    int64_t step = 0;
    uint64_t fingerprint = 0;
  };
  Voted voted_ ABSL_GUARDED_BY(mu_);
  int64_t ready_epoch_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t committed_step_ ABSL_GUARDED_BY(mu_) = 0;
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  MonoTime last_watch_message_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::flat_hash_set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  MembershipView view_ ABSL_GUARDED_BY(mu_);

  std::thread heartbeat_thread_;
  std::thread watch_thread_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_MEMBER_CLIENT_H_
