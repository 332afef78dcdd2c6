#include "bench/simulated_members.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/membership_update_scan.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"
#include "grpcpp/alarm.h"

namespace shardd::bench {

namespace pb = ::shardd::v1;

namespace {

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);

bool Transient(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

enum class Phase {
  kNew,
  kStandby,  // A replacement waiting for its slot to be empty.
  kJoining,
  kLive,
  kCrashed,
  kLeft,
  kFailed,  // A refusal it cannot retry, or the job failed.
};

struct SimulatedMembers::Member {
  absl::Mutex mu;
  int id = 0;
  int rank = 0;
  bool replacement = false;
  std::string identity;
  std::string incarnation;
  std::string join_secret;
  std::string peer_address;
  grpc::CompletionQueue* cq = nullptr;
  Connection* connection = nullptr;

  Phase phase ABSL_GUARDED_BY(mu) = Phase::kNew;
  absl::Status error ABSL_GUARDED_BY(mu);
  std::string lease_token ABSL_GUARDED_BY(mu);
  absl::Duration interval ABSL_GUARDED_BY(mu) = absl::Milliseconds(500);
  absl::Duration backoff ABSL_GUARDED_BY(mu) = kFirstBackoff;
  absl::Duration watch_backoff ABSL_GUARDED_BY(mu) = kFirstBackoff;
  int64_t known_epoch ABSL_GUARDED_BY(mu) = 0;
  int64_t view_epoch ABSL_GUARDED_BY(mu) = 0;
  int64_t ready_epoch ABSL_GUARDED_BY(mu) = -1;
  int64_t seen_ready_epoch ABSL_GUARDED_BY(mu) = -1;
  int64_t committed_step ABSL_GUARDED_BY(mu) = 0;
  bool recovering ABSL_GUARDED_BY(mu) = false;
  int64_t join_epoch ABSL_GUARDED_BY(mu) = 0;
  // The newest issued plan its watch showed (epoch -1: none): a
  // replacement whose Join reply comes after the update announcing its
  // epoch acts on it then (a scoped stream sends nothing more until the
  // epoch is ready, which it is waiting for).
  int64_t plan_epoch ABSL_GUARDED_BY(mu) = -1;
  int64_t plan_step ABSL_GUARDED_BY(mu) = 0;
  MonoTime joined_at ABSL_GUARDED_BY(mu) = MonoTime::InfinitePast();
  MonoTime saw_slot_empty_at ABSL_GUARDED_BY(mu) = MonoTime::InfinitePast();
  bool rejoin ABSL_GUARDED_BY(mu) = false;
  int64_t updates ABSL_GUARDED_BY(mu) = 0;

  // Calls in flight, to cancel.
  grpc::ClientContext* join_context ABSL_GUARDED_BY(mu) = nullptr;
  grpc::ClientContext* heartbeat_context ABSL_GUARDED_BY(mu) = nullptr;
  WatchOp* watch ABSL_GUARDED_BY(mu) = nullptr;
  bool heartbeat_in_flight ABSL_GUARDED_BY(mu) = false;
  bool heartbeat_again ABSL_GUARDED_BY(mu) = false;
  MonoTime last_heartbeat_sent ABSL_GUARDED_BY(mu) = MonoTime::InfinitePast();
  // The alarm of the next heartbeat period (null: none armed); cleared by
  // the op itself before it is deleted, so cancelling it under `mu` is safe.
  AlarmOp* heartbeat_alarm ABSL_GUARDED_BY(mu) = nullptr;
  // Seeded before the member is published, used under `mu` after.
  std::mt19937_64 random;

  bool stopped() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return phase == Phase::kCrashed || phase == Phase::kLeft ||
           phase == Phase::kFailed;
  }
};

// A completion-queue tag: Done runs on a queue thread, then the op is
// deleted unless it says it lives on.
class SimulatedMembers::Op {
 public:
  Op(SimulatedMembers* fleet, Member* member)
      : fleet_(fleet), member_(member) {}
  virtual ~Op() = default;
  // Returns false when the op stays alive (a stream's next step).
  virtual bool Done(bool ok) = 0;

 protected:
  SimulatedMembers* fleet_;
  Member* member_;
};

class SimulatedMembers::JoinOp final : public Op {
 public:
  using Op::Op;
  bool Done(bool) override {
    fleet_->OnJoin(*member_, *this);
    return true;
  }
  grpc::ClientContext context;
  pb::JoinResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::JoinResponse>> reader;
};

class SimulatedMembers::HeartbeatOp final : public Op {
 public:
  using Op::Op;
  bool Done(bool) override {
    fleet_->OnHeartbeat(*member_, *this);
    return true;
  }
  grpc::ClientContext context;
  pb::HeartbeatResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::HeartbeatResponse>>
      reader;
};

class SimulatedMembers::LeaveOp final : public Op {
 public:
  using Op::Op;
  bool Done(bool) override {
    if (status.ok()) {
      absl::MutexLock lock(&fleet_->mu_);
      ++fleet_->counters_.leaves_ok;
    }
    return true;
  }
  grpc::ClientContext context;
  pb::LeaveResponse response;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::LeaveResponse>> reader;
};

// The member's next heartbeat period, a retry of its Join after a backoff,
// or a new watch stream after one that ended without a message.
class SimulatedMembers::AlarmOp final : public Op {
 public:
  enum class Kind { kHeartbeat, kJoin, kWatch };
  AlarmOp(SimulatedMembers* fleet, Member* member, Kind kind)
      : Op(fleet, member), kind_(kind) {}
  bool Done(bool ok) override {
    if (kind_ == Kind::kHeartbeat) {
      {
        absl::MutexLock lock(&member_->mu);
        member_->heartbeat_alarm = nullptr;
      }
      if (ok) fleet_->OnHeartbeatTick(*member_);
      return true;
    }
    if (!ok) return true;
    absl::MutexLock lock(&member_->mu);
    if (kind_ == Kind::kJoin && member_->phase == Phase::kJoining) {
      fleet_->SendJoin(*member_);
    } else if (kind_ == Kind::kWatch && !member_->stopped() &&
               member_->watch == nullptr) {
      fleet_->StartWatch(*member_);
    }
    return true;
  }
  grpc::Alarm alarm;

 private:
  const Kind kind_;
};

// One WatchMembership stream through the generic stub (raw bytes): start,
// send the request and half-close, read until the stream ends, finish.
class SimulatedMembers::WatchOp final : public Op {
 public:
  using Op::Op;
  enum class Step { kStart, kWrite, kRead, kFinish };

  bool Done(bool ok) override {
    switch (step) {
      case Step::kStart:
        if (!ok) return Finish();
        step = Step::kWrite;
        call->WriteLast(request, grpc::WriteOptions(), this);
        return false;
      case Step::kWrite:
        if (!ok) return Finish();
        step = Step::kRead;
        call->Read(&message, this);
        return false;
      case Step::kRead:
        if (!ok) return Finish();
        ++messages;
        fleet_->OnWatchMessage(*member_, message);
        message.Clear();
        call->Read(&message, this);
        return false;
      case Step::kFinish:
        fleet_->OnWatchEnded(*member_, *this);
        return true;
    }
    return true;
  }

  Step step = Step::kStart;
  int64_t messages = 0;
  grpc::ClientContext context;
  grpc::ByteBuffer request;
  grpc::ByteBuffer message;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call;

 private:
  bool Finish() {
    step = Step::kFinish;
    call->Finish(&status, this);
    return false;
  }
};

SimulatedMembers::SimulatedMembers(SimulatedMembersOptions options)
    : options_(std::move(options)) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    queues_.push_back(std::make_unique<grpc::CompletionQueue>());
  }
  for (auto& q : queues_) {
    threads_.emplace_back([this, cq = q.get()] { Poll(cq); });
  }
}

SimulatedMembers::~SimulatedMembers() {
  Stop();
  for (auto& q : queues_) q->Shutdown();
  for (std::thread& t : threads_) t.join();
}

void SimulatedMembers::Poll(grpc::CompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    Op* op = static_cast<Op*>(tag);
    if (op->Done(ok)) {
      delete op;
      Finished();
    }
  }
}

void SimulatedMembers::Started() {
  absl::MutexLock lock(&mu_);
  ++outstanding_;
}

void SimulatedMembers::Finished() {
  absl::MutexLock lock(&mu_);
  --outstanding_;
}

SimulatedMembers::Member& SimulatedMembers::AddMember(int rank,
                                                      bool replacement) {
  absl::MutexLock lock(&mu_);
  auto m = std::make_unique<Member>();
  m->id = static_cast<int>(members_.size());
  m->rank = rank;
  m->replacement = replacement;
  m->identity = replacement ? absl::StrCat("sim-", rank, "-r", m->id)
                            : absl::StrCat("sim-", rank);
  std::mt19937_64 seed(options_.seed * 1000003 + m->id);
  m->incarnation = absl::StrFormat("%016x", seed());
  m->join_secret = absl::StrFormat("%016x%016x", seed(), seed());
  // Nothing listens there: the coordinator's probes of it fail at once.
  m->peer_address = absl::StrCat("127.0.0.1:", 1 + rank % 1000);
  m->cq = queues_[m->id % queues_.size()].get();
  const int per_channel = std::max(1, options_.members_per_channel);
  const size_t connection = static_cast<size_t>(m->id / per_channel);
  while (connections_.size() <= connection) {
    grpc::ChannelArguments args;
    // A distinct argument per channel: its own TCP connection.
    args.SetInt("shardd.bench.channel", static_cast<int>(connections_.size()));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(-1);
    auto c = std::make_unique<Connection>();
    c->channel = grpc::CreateCustomChannel(
        options_.address, grpc::InsecureChannelCredentials(), args);
    c->stub = pb::Coordinator::NewStub(c->channel);
    c->generic = std::make_unique<grpc::GenericStub>(c->channel);
    connections_.push_back(std::move(c));
  }
  m->connection = connections_[connection].get();
  m->random.seed(seed());
  members_.push_back(std::move(m));
  return *members_.back();
}

int SimulatedMembers::JoinRanks(int first_rank, int count) {
  int first_id = -1;
  for (int i = 0; i < count; ++i) {
    Member& m = AddMember(first_rank + i, /*replacement=*/false);
    if (first_id < 0) first_id = m.id;
    absl::MutexLock lock(&m.mu);
    m.phase = Phase::kJoining;
    SendJoin(m);
  }
  return first_id;
}

int SimulatedMembers::AddReplacement(int rank) {
  Member& m = AddMember(rank, /*replacement=*/true);
  absl::MutexLock lock(&m.mu);
  m.phase = Phase::kStandby;
  StartWatch(m);
  return m.id;
}

void SimulatedMembers::SendJoin(Member& m) {
  pb::JoinRequest request;
  request.set_rank(m.rank);
  request.set_identity(m.identity);
  request.set_omit_members(options_.scoped_watch);
  request.set_peer_address(m.peer_address);
  request.set_incarnation(m.incarnation);
  request.set_join_secret(m.join_secret);
  request.set_device(pb::DEVICE_KIND_CPU);
  if (m.rejoin) {
    request.set_last_epoch(m.known_epoch);
    request.set_holds_shard(m.ready_epoch >= 0);
    request.set_last_committed_step(m.committed_step);
  }
  auto* op = new JoinOp(this, &m);
  rpc::SetDeadline(&op->context, MonoNow() + options_.rpc_timeout);
  op->reader =
      m.connection->stub->PrepareAsyncJoin(&op->context, request, m.cq);
  m.join_context = &op->context;
  Started();
  {
    absl::MutexLock lock(&mu_);
    ++counters_.join_attempts;
  }
  op->reader->StartCall();
  op->reader->Finish(&op->response, &op->status, op);
}

void SimulatedMembers::Retry(Member& m, absl::Duration after) {
  auto* op = new AlarmOp(this, &m, AlarmOp::Kind::kJoin);
  Started();
  op->alarm.Set(m.cq, rpc::ToGrpcDeadline(MonoNow() + after), op);
  m.backoff = std::min(m.backoff * 2, kMaxBackoff);
}

void SimulatedMembers::OnJoin(Member& m, JoinOp& op) {
  absl::MutexLock lock(&m.mu);
  m.join_context = nullptr;
  if (m.phase != Phase::kJoining) return;
  const grpc::Status& s = op.status;
  if (!s.ok()) {
    // A replacement may race the coordinator's own removal of the slot's
    // holder: ALREADY_EXISTS / RESOURCE_EXHAUSTED are retried for it.
    const bool retry =
        Transient(s) ||
        (m.replacement &&
         (s.error_code() == grpc::StatusCode::ALREADY_EXISTS ||
          s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED));
    if (retry) {
      Retry(m, m.backoff);
      return;
    }
    m.phase = Phase::kFailed;
    m.error = rpc::FromGrpc(s);
    return;
  }
  const pb::JoinResponse& r = op.response;
  m.backoff = kFirstBackoff;
  m.phase = Phase::kLive;
  m.lease_token = r.lease_token();
  if (r.heartbeat_interval_ms() > 0) {
    m.interval = absl::Milliseconds(r.heartbeat_interval_ms());
  }
  m.known_epoch = std::max(m.known_epoch, r.epoch());
  m.join_epoch = r.epoch();
  m.joined_at = MonoNow();
  m.recovering = r.has_recovery() &&
                 r.recovery().phase() == pb::RECOVERY_PHASE_TRANSFERRING_STATE;
  if (!m.rejoin || m.ready_epoch < 0) m.committed_step = r.committed_step();
  {
    absl::MutexLock fleet(&mu_);
    ++counters_.joins_ok;
    ++counters_.live;
  }
  NoteEpoch(r.epoch(), -1);
  if (m.watch == nullptr) StartWatch(m);
  MaybeReportReady(m);
  // The first heartbeat at a uniform phase of the period.
  std::uniform_real_distribution<double> phase(0.0, 1.0);
  ArmHeartbeat(m, MonoNow() + m.interval * phase(m.random));
}

void SimulatedMembers::ArmHeartbeat(Member& m, MonoTime at) {
  if (m.heartbeat_alarm != nullptr || m.stopped()) return;
  auto* op = new AlarmOp(this, &m, AlarmOp::Kind::kHeartbeat);
  m.heartbeat_alarm = op;
  Started();
  op->alarm.Set(m.cq, rpc::ToGrpcDeadline(at), op);
}

void SimulatedMembers::OnHeartbeatTick(Member& m) {
  absl::MutexLock lock(&m.mu);
  if (m.phase != Phase::kLive) return;
  const MonoTime now = MonoNow();
  std::uniform_real_distribution<double> jitter(
      1.0 - options_.heartbeat_jitter, 1.0 + options_.heartbeat_jitter);
  const absl::Duration period = m.interval * jitter(m.random);
  // A READY sent at once since the last tick counts as this period's.
  if (m.heartbeat_in_flight || now - m.last_heartbeat_sent < m.interval / 2) {
    ArmHeartbeat(m, std::max(now, m.last_heartbeat_sent) + period);
    return;
  }
  SendHeartbeat(m);
  ArmHeartbeat(m, now + period);
}

void SimulatedMembers::SendHeartbeat(Member& m) {
  if (m.heartbeat_in_flight) {
    m.heartbeat_again = true;
    return;
  }
  pb::HeartbeatRequest request;
  request.set_rank(m.rank);
  request.set_lease_token(m.lease_token);
  request.set_epoch(m.known_epoch);
  request.set_committed_step(m.committed_step);
  request.set_state(m.ready_epoch == m.known_epoch ? pb::MEMBER_STATE_READY
                    : m.recovering                 ? pb::MEMBER_STATE_RECOVERING
                                                   : pb::MEMBER_STATE_JOINING);
  auto* op = new HeartbeatOp(this, &m);
  rpc::SetDeadline(&op->context, MonoNow() + options_.rpc_timeout);
  op->reader =
      m.connection->stub->PrepareAsyncHeartbeat(&op->context, request, m.cq);
  m.heartbeat_context = &op->context;
  m.heartbeat_in_flight = true;
  m.last_heartbeat_sent = MonoNow();
  Started();
  op->reader->StartCall();
  op->reader->Finish(&op->response, &op->status, op);
}

void SimulatedMembers::OnHeartbeat(Member& m, HeartbeatOp& op) {
  absl::MutexLock lock(&m.mu);
  m.heartbeat_in_flight = false;
  m.heartbeat_context = nullptr;
  const grpc::Status& s = op.status;
  if (s.ok()) {
    heartbeats_ok_.fetch_add(1, std::memory_order_relaxed);
  } else {
    heartbeats_failed_.fetch_add(1, std::memory_order_relaxed);
  }
  const absl::Duration took = MonoNow() - m.last_heartbeat_sent;
  if (took > m.interval / 2) {
    absl::MutexLock fleet(&mu_);
    counters_.heartbeat_max_seconds =
        std::max(counters_.heartbeat_max_seconds, absl::ToDoubleSeconds(took));
    if (took > m.interval) ++counters_.heartbeats_slow;
  }
  if (m.phase != Phase::kLive) return;
  if (s.ok()) {
    m.known_epoch = std::max(m.known_epoch, op.response.epoch());
    if (op.response.ready()) NoteReadySeen(m, op.response.epoch());
    if (m.heartbeat_again) {
      m.heartbeat_again = false;
      SendHeartbeat(m);
    }
    return;
  }
  m.heartbeat_again = false;
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    // The lease is gone (expired, or a restarted coordinator): join the
    // same slot again with what the member holds, as MemberClient does.
    m.phase = Phase::kJoining;
    m.rejoin = true;
    {
      absl::MutexLock fleet(&mu_);
      --counters_.live;
      ++counters_.rejoins;
    }
    SendJoin(m);
  } else if (s.error_code() == grpc::StatusCode::DATA_LOSS) {
    m.phase = Phase::kFailed;
    m.error = rpc::FromGrpc(s);
    absl::MutexLock fleet(&mu_);
    --counters_.live;
  }
}

void SimulatedMembers::StartWatch(Member& m) {
  auto* op = new WatchOp(this, &m);
  pb::WatchMembershipRequest request;
  // A standby watches the slot it will take.
  request.set_rank(m.rank);
  request.set_scoped(options_.scoped_watch);
  const std::string bytes = request.SerializeAsString();
  grpc::Slice slice(bytes);
  op->request = grpc::ByteBuffer(&slice, 1);
  op->call = m.connection->generic->PrepareCall(
      &op->context, "/shardd.v1.Coordinator/WatchMembership", m.cq);
  m.watch = op;
  Started();
  op->call->StartCall(op);
}

void SimulatedMembers::OnWatchMessage(Member& m,
                                      const grpc::ByteBuffer& message) {
  absl::StatusOr<ScannedUpdate> scanned = MembershipUpdateScan::Scan(message);
  if (!scanned.ok()) return;
  const ScannedUpdate& u = *scanned;
  if (u.keepalive) {
    keepalive_updates_.fetch_add(1, std::memory_order_relaxed);
    keepalive_bytes_.fetch_add(static_cast<int64_t>(u.bytes),
                               std::memory_order_relaxed);
  } else {
    change_updates_.fetch_add(1, std::memory_order_relaxed);
    change_bytes_.fetch_add(static_cast<int64_t>(u.bytes),
                            std::memory_order_relaxed);
  }
  NoteEpoch(u.epoch, u.live_members > 0 ? u.live_members
                                        : static_cast<int64_t>(u.ranks.size()));
  absl::MutexLock lock(&m.mu);
  ++m.updates;
  if (m.stopped()) return;
  if (u.job_failed) {
    m.phase = Phase::kFailed;
    m.error = absl::DataLossError("the job has failed");
    return;
  }
  if (u.epoch < m.view_epoch) return;
  m.view_epoch = u.epoch;
  const pb::EpochPlanKind kind = u.plan.kind();
  const bool issued =
      u.plan.epoch() == u.epoch &&
      (kind == pb::EPOCH_PLAN_KIND_NEW || kind == pb::EPOCH_PLAN_KIND_RESUME ||
       kind == pb::EPOCH_PLAN_KIND_ROLLBACK);
  if (issued) {
    m.plan_epoch = u.epoch;
    m.plan_step = kind == pb::EPOCH_PLAN_KIND_NEW ? 0 : u.plan.step();
  }
  if (m.phase == Phase::kStandby) {
    const bool listed =
        std::find(u.ranks.begin(), u.ranks.end(), m.rank) != u.ranks.end();
    const bool removed =
        u.delta ? std::find(u.removed_ranks.begin(), u.removed_ranks.end(),
                            m.rank) != u.removed_ranks.end()
                : !listed;
    if (removed) {
      m.saw_slot_empty_at = MonoNow();
      m.phase = Phase::kJoining;
      SendJoin(m);
    }
    return;
  }
  if (m.phase != Phase::kLive) return;
  m.known_epoch = std::max(m.known_epoch, u.epoch);
  if (u.ready) NoteReadySeen(m, u.epoch);
  MaybeReportReady(m);
}

void SimulatedMembers::MaybeReportReady(Member& m) {
  if (m.phase != Phase::kLive || m.plan_epoch != m.known_epoch ||
      m.ready_epoch == m.plan_epoch) {
    return;
  }
  // A daemon would copy its shard (a replacement) and build its
  // communicators here; the simulation is ready at once.
  ReportReady(m, m.plan_epoch, m.plan_step);
}

void SimulatedMembers::ReportReady(Member& m, int64_t epoch, int64_t step) {
  m.ready_epoch = epoch;
  m.committed_step = step;
  m.recovering = false;
  {
    absl::MutexLock fleet(&mu_);
    ++counters_.ready_reports;
  }
  SendHeartbeat(m);
}

void SimulatedMembers::NoteReadySeen(Member& m, int64_t epoch) {
  if (m.seen_ready_epoch >= epoch) return;
  m.seen_ready_epoch = epoch;
  absl::MutexLock fleet(&mu_);
  ready_first_seen_.emplace(epoch, MonoNow());
  ++ready_seen_by_[epoch];
  counters_.ready_epoch = std::max(counters_.ready_epoch, epoch);
}

void SimulatedMembers::NoteEpoch(int64_t epoch, int64_t members_listed) {
  absl::MutexLock fleet(&mu_);
  counters_.max_epoch = std::max(counters_.max_epoch, epoch);
  if (members_listed >= 0 && epoch >= update_epoch_) {
    update_epoch_ = epoch;
    counters_.members_listed = members_listed;
  }
}

void SimulatedMembers::OnWatchEnded(Member& m, WatchOp& op) {
  absl::MutexLock lock(&m.mu);
  if (m.watch == &op) m.watch = nullptr;
  if (m.stopped() || m.phase == Phase::kNew) return;
  {
    absl::MutexLock fleet(&mu_);
    if (stopping_) return;
    ++counters_.watch_restarts;
  }
  // As MemberClient: reopened at once after a stream that delivered
  // messages, after a growing backoff after one that did not.
  if (op.messages > 0) {
    m.watch_backoff = kFirstBackoff;
    StartWatch(m);
    return;
  }
  auto* alarm = new AlarmOp(this, &m, AlarmOp::Kind::kWatch);
  Started();
  alarm->alarm.Set(m.cq, rpc::ToGrpcDeadline(MonoNow() + m.watch_backoff),
                   alarm);
  m.watch_backoff = std::min(m.watch_backoff * 2, kMaxBackoff);
}

void SimulatedMembers::CancelCalls(Member& m) {
  if (m.join_context != nullptr) m.join_context->TryCancel();
  if (m.heartbeat_context != nullptr) m.heartbeat_context->TryCancel();
  if (m.watch != nullptr) m.watch->context.TryCancel();
  if (m.heartbeat_alarm != nullptr) m.heartbeat_alarm->alarm.Cancel();
}

void SimulatedMembers::Crash(int id) {
  Member* m;
  {
    absl::MutexLock lock(&mu_);
    m = members_[id].get();
  }
  absl::MutexLock lock(&m->mu);
  const bool was_live = m->phase == Phase::kLive;
  m->phase = Phase::kCrashed;
  CancelCalls(*m);
  if (was_live) {
    absl::MutexLock fleet(&mu_);
    --counters_.live;
  }
}

int64_t SimulatedMembers::LeaveAll(MonoTime deadline) {
  std::vector<Member*> members;
  int64_t left_before;
  {
    absl::MutexLock lock(&mu_);
    for (auto& m : members_) members.push_back(m.get());
    left_before = counters_.leaves_ok;
  }
  int64_t sent = 0;
  for (Member* m : members) {
    absl::MutexLock lock(&m->mu);
    if (m->phase != Phase::kLive) continue;
    m->phase = Phase::kLeft;
    CancelCalls(*m);
    pb::LeaveRequest request;
    request.set_rank(m->rank);
    request.set_lease_token(m->lease_token);
    request.set_reason("simulation over");
    auto* op = new LeaveOp(this, m);
    rpc::SetDeadline(&op->context, deadline);
    op->reader =
        m->connection->stub->PrepareAsyncLeave(&op->context, request, m->cq);
    Started();
    op->reader->StartCall();
    op->reader->Finish(&op->response, &op->status, op);
    ++sent;
    absl::MutexLock fleet(&mu_);
    --counters_.live;
  }
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return counters_.leaves_ok - left_before >= sent;
  };
  AwaitUntil(&mu_, absl::Condition(&done), deadline);
  return counters_.leaves_ok - left_before;
}

void SimulatedMembers::Stop() {
  std::vector<Member*> members;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
    for (auto& m : members_) members.push_back(m.get());
  }
  for (Member* m : members) {
    absl::MutexLock lock(&m->mu);
    if (!m->stopped()) m->phase = Phase::kLeft;
    CancelCalls(*m);
  }
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outstanding_ == 0;
  };
  AwaitUntil(&mu_, absl::Condition(&idle),
             MonoNow() + options_.rpc_timeout + absl::Seconds(5));
  stopped_ = true;
}

int SimulatedMembers::LiveMemberOf(int rank) const {
  std::vector<Member*> members;
  {
    absl::MutexLock lock(&mu_);
    for (auto& m : members_) members.push_back(m.get());
  }
  for (Member* m : members) {
    absl::MutexLock lock(&m->mu);
    if (m->rank == rank && m->phase == Phase::kLive) return m->id;
  }
  return -1;
}

MemberStatus SimulatedMembers::Status(int id) const {
  Member* m;
  {
    absl::MutexLock lock(&mu_);
    m = members_[id].get();
  }
  absl::MutexLock lock(&m->mu);
  MemberStatus s;
  s.rank = m->rank;
  s.live = m->phase == Phase::kLive;
  s.join_epoch = m->join_epoch;
  s.joined_at = m->joined_at;
  s.saw_slot_empty_at = m->saw_slot_empty_at;
  s.updates = m->updates;
  s.error = m->error;
  return s;
}

FleetCounters SimulatedMembers::Counters() const {
  absl::MutexLock lock(&mu_);
  FleetCounters c = counters_;
  c.heartbeats_ok = heartbeats_ok_.load();
  c.heartbeats_failed = heartbeats_failed_.load();
  c.change_updates = change_updates_.load();
  c.change_bytes = change_bytes_.load();
  c.keepalive_updates = keepalive_updates_.load();
  c.keepalive_bytes = keepalive_bytes_.load();
  return c;
}

std::vector<MemberLease> SimulatedMembers::Leases() const {
  std::vector<Member*> members;
  {
    absl::MutexLock lock(&mu_);
    for (auto& m : members_) members.push_back(m.get());
  }
  std::vector<MemberLease> leases;
  for (Member* m : members) {
    absl::MutexLock lock(&m->mu);
    if (m->phase != Phase::kLive) continue;
    leases.push_back(
        {m->rank, m->lease_token, m->known_epoch, m->committed_step});
  }
  return leases;
}

MonoTime SimulatedMembers::AwaitReadySeen(int64_t min_epoch,
                                          MonoTime deadline) const {
  return AwaitReadySeenBy(min_epoch, 1, deadline);
}

MonoTime SimulatedMembers::AwaitReadySeenBy(int64_t min_epoch, int64_t count,
                                            MonoTime deadline) const {
  absl::MutexLock lock(&mu_);
  auto seen_by = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t n = 0;
    for (auto it = ready_seen_by_.lower_bound(min_epoch);
         it != ready_seen_by_.end(); ++it) {
      n += it->second;
    }
    return n;
  };
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return seen_by() >= count;
  };
  if (!AwaitUntil(&mu_, absl::Condition(&done), deadline)) {
    return MonoTime::InfiniteFuture();
  }
  if (count <= 1) {
    MonoTime first = MonoTime::InfiniteFuture();
    for (auto it = ready_first_seen_.lower_bound(min_epoch);
         it != ready_first_seen_.end(); ++it) {
      first = std::min(first, it->second);
    }
    return first;
  }
  return MonoNow();
}

MemberStatus SimulatedMembers::AwaitJoined(int id, MonoTime deadline) const {
  Member* m;
  {
    absl::MutexLock lock(&mu_);
    m = members_[id].get();
  }
  {
    absl::MutexLock lock(&m->mu);
    auto joined = [m]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu) {
      return m->phase == Phase::kLive || m->stopped();
    };
    AwaitUntil(&m->mu, absl::Condition(&joined), deadline);
  }
  return Status(id);
}

MemberStatus SimulatedMembers::AwaitWatching(int id, MonoTime deadline) const {
  Member* m;
  {
    absl::MutexLock lock(&mu_);
    m = members_[id].get();
  }
  {
    absl::MutexLock lock(&m->mu);
    auto watching = [m]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->mu) {
      return m->updates > 0 || m->stopped();
    };
    AwaitUntil(&m->mu, absl::Condition(&watching), deadline);
  }
  return Status(id);
}

}  // namespace shardd::bench
