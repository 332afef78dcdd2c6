#ifndef SHARDD_BENCH_SIMULATED_MEMBERS_H_
#define SHARDD_BENCH_SIMULATED_MEMBERS_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::bench {

struct SimulatedMembersOptions {
  // The coordinator, host:port.
  std::string address;
  // Members that share one HTTP/2 connection (a real daemon has its own;
  // sharing keeps the harness's file descriptors and wakeups down).
  int members_per_channel = 8;
  // Completion queues, one thread each, for all members.
  int threads = 2;
  // Deadline of Join, Heartbeat and Leave.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // Each heartbeat period is the coordinator's interval times a uniform
  // factor in [1 - jitter, 1 + jitter]; the first is at a uniform phase.
  double heartbeat_jitter = 0.1;
  // Scoped delta watch streams (WatchMembershipRequest.scoped) and Joins
  // without the member list, as MemberClient does; false: full updates,
  // as daemons that predate them.
  bool scoped_watch = true;
  uint64_t seed = 1;
};

// Fleet-wide counts since Start (monotonic, for deltas over a window).
struct FleetCounters {
  int64_t join_attempts = 0;
  int64_t joins_ok = 0;
  int64_t heartbeats_ok = 0;
  int64_t heartbeats_failed = 0;
  // The slowest heartbeat reply, and replies slower than a third of the
  // lease (where a lease starts to be at risk).
  double heartbeat_max_seconds = 0;
  int64_t heartbeats_slow = 0;
  // Heartbeats answered NOT_FOUND (the lease had run out): the member
  // joined again.
  int64_t rejoins = 0;
  // READY heartbeats sent at once on seeing an epoch's plan.
  int64_t ready_reports = 0;
  // Watch updates, by kind, and their serialized bytes.
  int64_t change_updates = 0;
  int64_t change_bytes = 0;
  int64_t keepalive_updates = 0;
  int64_t keepalive_bytes = 0;
  int64_t watch_restarts = 0;
  int64_t leaves_ok = 0;
  // Members holding a lease now.
  int64_t live = 0;
  // The highest epoch any update or reply showed, and how many members the
  // newest watch update listed.
  int64_t max_epoch = 0;
  int64_t members_listed = 0;
  // The highest epoch some member has seen ready (-1: none).
  int64_t ready_epoch = -1;
};

// What one simulated member did, for the scenarios' timings.
struct MemberStatus {
  int rank = -1;
  bool live = false;
  int64_t join_epoch = 0;
  MonoTime joined_at = MonoTime::InfinitePast();
  // A replacement: when its watch first showed its slot empty.
  MonoTime saw_slot_empty_at = MonoTime::InfinitePast();
  // Watch updates it received.
  int64_t updates = 0;
  // The last error that stopped it (OK while it runs).
  absl::Status error;
};

// Credentials of a live member, for load generators.
struct MemberLease {
  int rank = 0;
  std::string lease_token;
  int64_t epoch = 0;
  int64_t committed_step = 0;
};

// Simulated shardd daemons, each a light state machine over gRPC's
// asynchronous API, speaking the real shardd.v1 Coordinator protocol the
// way daemon/coordinator/member_client.cc does: Join (retrying transient
// codes, joining again on NOT_FOUND), a Heartbeat every interval (with
// jitter) carrying JOINING / RECOVERING / READY for the epoch it knows, a
// WatchMembership stream per member, READY reported at once for an epoch
// whose plan is issued (the shard copy and communicators of a real daemon
// are left out), and Leave.
//
// A few completion-queue threads serve every member; a member's events are
// handled under its own mutex. Watch updates arrive as raw bytes and are
// scanned (MembershipUpdateScan), not parsed, so their serialized sizes are
// counted exactly and the harness stays cheap next to the coordinator.
//
// A "replacement" is a standby member for one rank: it watches, and joins
// that rank with a fresh identity as soon as an update shows the slot
// empty (a hot spare; detection by the coordinator is part of its time).
//
// Thread-safe. Owns its channels, queues, threads and members; Stop (or
// the destructor) cancels every call and waits for all of them.
class SimulatedMembers {
 public:
  explicit SimulatedMembers(SimulatedMembersOptions options);
  ~SimulatedMembers();
  SimulatedMembers(const SimulatedMembers&) = delete;
  SimulatedMembers& operator=(const SimulatedMembers&) = delete;

  // Members for ranks [first_rank, first_rank + count) all send Join now.
  // Returns the id of the first (ids are consecutive).
  int JoinRanks(int first_rank, int count);
  // A standby replacement for `rank` (see the class comment); its id.
  int AddReplacement(int rank);
  // The member stops as a crashed process would: no more heartbeats, its
  // calls and watch stream are cancelled, no Leave.
  void Crash(int id);
  // Every live member cancels its watch and sends Leave; waits for the
  // replies until `deadline`. Returns how many left.
  int64_t LeaveAll(MonoTime deadline);
  // Cancels every call and waits for them (bounded by rpc_timeout).
  void Stop();

  // The id of the live member holding `rank`, or -1.
  int LiveMemberOf(int rank) const;
  MemberStatus Status(int id) const;
  FleetCounters Counters() const;
  std::vector<MemberLease> Leases() const;

  // Waits until some member has seen an epoch >= min_epoch ready (a watch
  // update or a heartbeat reply); returns the first such time, or
  // InfiniteFuture at the deadline.
  MonoTime AwaitReadySeen(int64_t min_epoch, MonoTime deadline) const;
  // Waits until `count` members have seen an epoch >= min_epoch ready.
  MonoTime AwaitReadySeenBy(int64_t min_epoch, int64_t count,
                            MonoTime deadline) const;
  // Waits until member `id` holds a lease (or has failed); its status.
  MemberStatus AwaitJoined(int id, MonoTime deadline) const;
  // Waits until member `id` has received a watch update (or has failed).
  MemberStatus AwaitWatching(int id, MonoTime deadline) const;

 private:
  struct Member;
  class Op;
  class JoinOp;
  class HeartbeatOp;
  class LeaveOp;
  class AlarmOp;
  class WatchOp;

  Member& AddMember(int rank, bool replacement);
  void SendJoin(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void OnJoin(Member& m, JoinOp& op);
  void SendHeartbeat(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void OnHeartbeat(Member& m, HeartbeatOp& op);
  void OnHeartbeatTick(Member& m);
  void ArmHeartbeat(Member& m, MonoTime at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void StartWatch(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void OnWatchMessage(Member& m, const grpc::ByteBuffer& message);
  void OnWatchEnded(Member& m, WatchOp& op);
  void ReportReady(Member& m, int64_t epoch, int64_t step)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  // READY for the newest issued plan the member's watch showed, if it is
  // live in that epoch and has not reported it yet.
  void MaybeReportReady(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void NoteReadySeen(Member& m, int64_t epoch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void NoteEpoch(int64_t epoch, int64_t members_listed);
  void Retry(Member& m, absl::Duration after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void CancelCalls(Member& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m.mu);
  void Started();
  void Finished();
  void Poll(grpc::CompletionQueue* cq);

  const SimulatedMembersOptions options_;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> queues_;
  std::vector<std::thread> threads_;

  struct Connection {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<shardd::v1::Coordinator::Stub> stub;
    std::unique_ptr<grpc::GenericStub> generic;
  };

  mutable absl::Mutex mu_;
  // Members are never removed before the destructor: calls point to them.
  std::vector<std::unique_ptr<Member>> members_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  FleetCounters counters_ ABSL_GUARDED_BY(mu_);
  // The epoch of the newest watch update seen.
  int64_t update_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Epoch -> when a member first saw it ready, and how many did.
  std::map<int64_t, MonoTime> ready_first_seen_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, int64_t> ready_seen_by_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> change_updates_{0};
  std::atomic<int64_t> change_bytes_{0};
  std::atomic<int64_t> keepalive_updates_{0};
  std::atomic<int64_t> keepalive_bytes_{0};
  std::atomic<int64_t> heartbeats_ok_{0};
  std::atomic<int64_t> heartbeats_failed_{0};
};

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_SIMULATED_MEMBERS_H_
