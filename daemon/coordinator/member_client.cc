#include "daemon/coordinator/member_client.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"

namespace shardd::coordinator {
namespace {

namespace pb = ::shardd::v1;

constexpr absl::Duration kFirstBackoff = absl::Milliseconds(50);
constexpr absl::Duration kMaxBackoff = absl::Seconds(1);

bool Transient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

std::string RandomIncarnation() {
  std::random_device seed;
  return absl::StrFormat("%08x%08x", seed(), seed());
}

// 128 bits from the system's entropy source.
std::string RandomSecret() {
  std::random_device seed;
  return absl::StrFormat("%08x%08x%08x%08x", seed(), seed(), seed(), seed());
}

std::shared_ptr<grpc::Channel> MakeChannel(
    const std::string& address,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  // A restarted coordinator is found again within a second, not after
  // gRPC's default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address,
                                   credentials != nullptr
                                       ? std::move(credentials)
                                       : grpc::InsecureChannelCredentials(),
                                   args);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MemberClient>> MemberClient::Join(
    MemberClientOptions options) {
  if (options.channel == nullptr && options.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator_address must be set (or a channel given)");
  }
  if (options.incarnation.empty()) options.incarnation = RandomIncarnation();
  std::unique_ptr<MemberClient> client(new MemberClient(std::move(options)));
  const MonoTime deadline = MonoNow() + client->options_.initial_join_timeout;
  absl::Duration backoff = kFirstBackoff;
  while (true) {
    absl::Status s;
    {
      absl::MutexLock session(&client->session_mu_);
      s = client->DoJoin(/*rejoin=*/false);
    }
    if (s.ok()) break;
    if (!Transient(s) || MonoNow() + backoff > deadline) return s;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  client->heartbeat_thread_ =
      std::thread([c = client.get()] { c->HeartbeatLoop(); });
  client->watch_thread_ = std::thread([c = client.get()] { c->WatchLoop(); });
  return client;
}

MemberClient::MemberClient(MemberClientOptions options)
    : options_(std::move(options)),
      channel_(options_.channel != nullptr
                   ? options_.channel
                   : MakeChannel(options_.coordinator_address,
                                 options_.credentials)),
      stub_(pb::Coordinator::NewStub(channel_)),
      join_secret_(RandomSecret()) {}

MemberClient::~MemberClient() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    for (grpc::ClientContext* context : in_flight_) context->TryCancel();
    if (watch_context_ != nullptr) watch_context_->TryCancel();
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

bool MemberClient::Register(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  in_flight_.insert(context);
  return true;
}

void MemberClient::Unregister(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(context);
}

void MemberClient::NoteContact() {
  absl::MutexLock lock(&mu_);
  view_.last_contact = MonoNow();
}

bool MemberClient::SleepUntil(MonoTime deadline) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  AwaitUntil(&mu_, absl::Condition(&stopping), deadline);
  return stopping_;
}

absl::Status MemberClient::DoJoin(bool rejoin) {
  // Asked without mu_ held: the provider may take the daemon's own locks.
  const MemberShardStatus shard =
      options_.shard_status ? options_.shard_status() : MemberShardStatus{};
  pb::JoinRequest request;
  // The view comes from the watch stream: the reply need not list all W.
  request.set_omit_members(true);
  {
    absl::MutexLock lock(&mu_);
    if (rejoin) {
      request.set_rank(rank_);
      request.set_last_epoch(known_epoch_);
    } else if (options_.rank >= 0) {
      request.set_rank(options_.rank);
    }
  }
  request.set_identity(options_.identity);
  request.set_peer_address(options_.peer_address);
  request.set_incarnation(options_.incarnation);
  request.set_join_secret(join_secret_);
  request.set_device(options_.device);
  for (const auto& [key, value] : options_.info) {
    (*request.mutable_info())[key] = value;
  }
  request.set_holds_shard(shard.holds_shard);
  request.set_last_committed_step(shard.committed_step);
  request.set_model_fingerprint(shard.model_fingerprint);
  request.set_pending_step(shard.holds_shard ? shard.pending_step : 0);
  {
    absl::MutexLock lock(&mu_);
    if (shard.holds_shard && shard.pending_step > 0 &&
        voted_.step == shard.pending_step) {
      request.set_pending_step_fingerprint(voted_.fingerprint);
    }
  }
  request.set_registration_state(shard.holds_shard && shard.registration_state);
  if (options_.checkpoints)
    *request.mutable_checkpoints() = options_.checkpoints();

  {
    absl::MutexLock lock(&mu_);
    ++joins_in_flight_;
  }
  // Dropped after the reply (and its token) is taken in, on every path.
  absl::Cleanup join_done = [this] {
    absl::MutexLock lock(&mu_);
    --joins_in_flight_;
  };
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + options_.rpc_timeout);
  if (!Register(&context)) {
    return absl::CancelledError("the member client is stopping");
  }
  pb::JoinResponse response;
  const grpc::Status status = stub_->Join(&context, request, &response);
  Unregister(&context);
  if (!status.ok()) {
    const absl::Status s = rpc::FromGrpc(status);
    return absl::Status(
        s.code(), absl::StrCat(rejoin ? "re-join" : "join", ": ", s.message()));
  }

  absl::MutexLock lock(&mu_);
  join_ = response;
  lease_token_ = response.lease_token();
  rank_ = response.member().rank();
  lease_ =
      absl::Milliseconds(response.lease_ms() > 0 ? response.lease_ms() : 1500);
  heartbeat_interval_ =
      response.heartbeat_interval_ms() > 0
          ? absl::Milliseconds(response.heartbeat_interval_ms())
          : lease_ / 3;
  known_epoch_ = std::max(known_epoch_, response.epoch());
  recovering_ =
      response.has_recovery() &&
      response.recovery().phase() == pb::RECOVERY_PHASE_TRANSFERRING_STATE;
  committed_step_ =
      shard.holds_shard ? shard.committed_step : response.committed_step();
  view_.rank = rank_;
  ++view_.joins;
  view_.last_contact = MonoNow();
  return absl::OkStatus();
}

absl::Status MemberClient::HeartbeatOnce() {
  // Asked without any lock held: the provider takes the daemon's own.
  const MemberShardStatus shard =
      options_.shard_status ? options_.shard_status() : MemberShardStatus{};
  absl::MutexLock session(&session_mu_);
  pb::HeartbeatRequest request;
  request.set_registration_state(shard.holds_shard && shard.registration_state);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("the member client is stopping");
    if (left_) return absl::FailedPreconditionError("the member has left");
    if (!view_.error.ok()) return view_.error;
    request.set_rank(rank_);
    request.set_lease_token(lease_token_);
    request.set_epoch(known_epoch_);
    request.set_committed_step(committed_step_);
    request.set_state(ready_epoch_ == known_epoch_ ? pb::MEMBER_STATE_READY
                      : recovering_                ? pb::MEMBER_STATE_RECOVERING
                                                   : pb::MEMBER_STATE_JOINING);
  }
  if (options_.unreachable_peers) {
    for (pb::UnreachablePeer& peer : options_.unreachable_peers()) {
      *request.add_unreachable_peers() = std::move(peer);
    }
  }
  if (options_.checkpoints) {
    *request.mutable_checkpoints() = options_.checkpoints();
  }
  if (options_.trainer) *request.mutable_trainer() = options_.trainer();
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + options_.rpc_timeout);
  if (!Register(&context)) {
    return absl::CancelledError("the member client is stopping");
  }
  pb::HeartbeatResponse response;
  const grpc::Status status = stub_->Heartbeat(&context, request, &response);
  Unregister(&context);
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    known_epoch_ = std::max(known_epoch_, response.epoch());
    view_.last_contact = MonoNow();
    // Unknown (a member gone, a coordinator that restarted and has not
    // heard everyone yet) keeps the last step heard: its files are still
    // on every rank's disk.
    if (response.common_checkpoint_step() >= 0) {
      common_checkpoint_step_ = response.common_checkpoint_step();
    }
    return absl::OkStatus();
  }
  const absl::Status s = rpc::FromGrpc(status);
  if (absl::IsDataLoss(s)) {
    NoteJobFailed(s);
    return s;
  }
  if (!absl::IsNotFound(s)) return s;
  // The coordinator does not know this lease: it restarted, or the lease
  // ran out. Claim the same slot again with what the member still holds.
  const absl::Status joined = DoJoin(/*rejoin=*/true);
  if (!joined.ok() && !Transient(joined) && !absl::IsCancelled(joined)) {
    absl::MutexLock lock(&mu_);
    view_.error = joined;
  }
  return joined;
}

int64_t MemberClient::common_checkpoint_step() const {
  absl::MutexLock lock(&mu_);
  return common_checkpoint_step_;
}

void MemberClient::HeartbeatLoop() {
  absl::Duration backoff = kFirstBackoff;
  MonoTime next;
  {
    absl::MutexLock lock(&mu_);
    next = MonoNow() + heartbeat_interval_;
  }
  while (true) {
    absl::Duration interval;
    bool idle = false;
    {
      absl::MutexLock lock(&mu_);
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      AwaitUntil(&mu_, absl::Condition(&stopping), next);
      if (stopping_) return;
      interval = heartbeat_interval_;
      // Watchdog: a watch stream without even a keepalive for two leases
      // is reopened (the coordinator may be gone without a reset).
      if (watch_context_ != nullptr &&
          MonoNow() - last_watch_message_ > 2 * lease_) {
        watch_context_->TryCancel();
        last_watch_message_ = MonoNow();
      }
      idle = left_ || !view_.error.ok();
    }
    if (idle) {
      next = MonoNow() + interval;
      continue;
    }
    const absl::Status s = HeartbeatOnce();
    if (s.ok() || !Transient(s)) {
      backoff = kFirstBackoff;
      next = MonoNow() + interval;
    } else {
      next = MonoNow() + backoff;
      backoff = std::min(backoff * 2, interval);
    }
  }
}

void MemberClient::WatchLoop() {
  absl::Duration backoff = kFirstBackoff;
  while (true) {
    grpc::ClientContext context;
    rpc::SetDeadline(&context, MonoNow() + options_.watch_stream_lifetime);
    pb::WatchMembershipRequest request;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      watch_context_ = &context;
      last_watch_message_ = MonoNow();
      request.set_rank(rank_);
    }
    // Scoped delta updates; a coordinator that predates them sends full
    // ones, which ApplyUpdate takes as they come.
    request.set_scoped(true);
    std::unique_ptr<grpc::ClientReader<pb::MembershipUpdate>> reader =
        stub_->WatchMembership(&context, request);
    pb::MembershipUpdate update;
    bool received = false;
    // The members this stream has listed so far (its deltas apply to it).
    std::map<int, pb::MemberInfo> stream_members;
    while (reader->Read(&update)) {
      ApplyUpdate(update, stream_members);
      received = true;
    }
    const grpc::Status status = reader->Finish();
    {
      absl::MutexLock lock(&mu_);
      watch_context_ = nullptr;
      if (stopping_) return;
    }
    if (received) {
      backoff = kFirstBackoff;
      // The stream reached its lifetime: reopen at once.
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) continue;
    }
    if (SleepUntil(MonoNow() + backoff)) return;
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

void MemberClient::ApplyUpdate(const pb::MembershipUpdate& update,
                               std::map<int, pb::MemberInfo>& stream_members) {
  if (!update.delta()) stream_members.clear();
  for (int r : update.removed_ranks()) stream_members.erase(r);
  for (const pb::MemberInfo& m : update.members()) stream_members[m.rank()] = m;
  absl::MutexLock lock(&mu_);
  const MonoTime now = MonoNow();
  last_watch_message_ = now;
  view_.last_contact = now;
  known_epoch_ = std::max(known_epoch_, update.epoch());
  if (update.job_state() == pb::JOB_STATE_FAILED && view_.error.ok()) {
    view_.error = absl::DataLossError(
        absl::StrCat("the job has failed: ", update.job_failure()));
  }
  if (update.epoch() < view_.epoch) return;
  view_.epoch = update.epoch();
  view_.ready = update.ready();
  view_.world_size = update.world_size();
  view_.sharding_factor = update.sharding_factor();
  view_.committed_step = update.committed_step();
  view_.members.clear();
  view_.members.reserve(stream_members.size());
  for (const auto& [rank, m] : stream_members) view_.members.push_back(m);
  // 0 from a coordinator that predates the field: count the full list.
  view_.live_members = update.live_members() > 0 ? update.live_members() : -1;
  view_.plan = update.plan();
  if (update.plan().epoch() == update.epoch() &&
      ready_epoch_ != update.epoch()) {
    recovering_ = false;
    for (const pb::ShardTransfer& t : update.plan().transfers()) {
      if (t.target_rank() == rank_) recovering_ = true;
    }
  }
  if (!update.keepalive()) {
    view_.reason = update.reason();
    ++view_.updates;
  }
}

pb::JoinResponse MemberClient::join_response() const {
  absl::MutexLock lock(&mu_);
  return join_;
}

int MemberClient::rank() const {
  absl::MutexLock lock(&mu_);
  return rank_;
}

std::string MemberClient::lease_token() const {
  absl::MutexLock lock(&mu_);
  return lease_token_;
}

std::string MemberClient::SettledLeaseToken(MonoTime deadline) const {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return joins_in_flight_ == 0;
  };
  AwaitUntil(&mu_, absl::Condition(&settled), deadline);
  return lease_token_;
}

MembershipView MemberClient::view() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

absl::StatusOr<MembershipView> MemberClient::WaitFor(
    std::function<bool(const MembershipView&)> predicate,
    MonoTime deadline) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !view_.error.ok() || predicate(view_);
  };
  AwaitUntil(&mu_, absl::Condition(&done), deadline);
  if (predicate(view_)) return view_;
  if (stopping_) return absl::CancelledError("the member client is stopping");
  if (!view_.error.ok()) return view_.error;
  return absl::DeadlineExceededError(absl::StrCat(
      "membership condition not met by the deadline (epoch ", view_.epoch, ", ",
      view_.LiveCount(), " of ", view_.world_size, " members live, ready ",
      view_.ready ? "yes" : "no", ")"));
}

absl::StatusOr<MembershipView> MemberClient::WaitForEpochReady(
    int64_t min_epoch, MonoTime deadline) const {
  return WaitFor(
      [min_epoch](const MembershipView& v) {
        return v.epoch >= min_epoch && v.ready;
      },
      deadline);
}

absl::Status MemberClient::SetReady(int64_t epoch, int64_t committed_step) {
  {
    absl::MutexLock lock(&mu_);
    ready_epoch_ = epoch;
    committed_step_ = committed_step;
    recovering_ = false;
  }
  return HeartbeatOnce();
}

absl::StatusOr<pb::ReportFailureResponse> MemberClient::ReportFailure(
    int suspect, pb::FailureKind kind, absl::string_view detail,
    int64_t epoch) {
  pb::ReportFailureRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_reporter_rank(rank_);
    request.set_lease_token(lease_token_);
    request.set_epoch(epoch >= 0 ? epoch : known_epoch_);
  }
  request.set_suspect_rank(suspect);
  request.set_kind(kind);
  request.set_detail(std::string(detail));
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + options_.report_timeout);
  if (!Register(&context)) {
    return absl::CancelledError("the member client is stopping");
  }
  pb::ReportFailureResponse response;
  const grpc::Status status =
      stub_->ReportFailure(&context, request, &response);
  Unregister(&context);
  if (!status.ok()) return rpc::FromGrpc(status);
  NoteContact();
  return response;
}

void MemberClient::NoteJobFailed(const absl::Status& status) {
  // The coordinator answers DATA_LOSS only once the job has failed:
  // terminal, whatever else happens.
  absl::MutexLock lock(&mu_);
  if (view_.error.ok()) view_.error = status;
}

absl::StatusOr<pb::ShouldCommitResponse> MemberClient::ShouldCommit(
    int64_t epoch, int64_t step, bool vote, absl::string_view reason,
    uint64_t step_fingerprint, MonoTime deadline) {
  absl::Duration backoff = absl::Milliseconds(50);
  while (true) {
    pb::ShouldCommitRequest request;
    {
      absl::MutexLock lock(&mu_);
      request.set_rank(rank_);
      request.set_lease_token(lease_token_);
      // Reported with the step if it stays in doubt (the re-join).
      if (vote) voted_ = {step, step_fingerprint};
    }
    request.set_epoch(epoch);
    request.set_step(step);
    request.set_vote(vote);
    request.set_reason(std::string(reason));
    request.set_step_fingerprint(step_fingerprint);
    grpc::ClientContext context;
    rpc::SetDeadline(&context, deadline);
    if (!Register(&context)) {
      return absl::CancelledError("the member client is stopping");
    }
    pb::ShouldCommitResponse response;
    const grpc::Status status =
        stub_->ShouldCommit(&context, request, &response);
    Unregister(&context);
    if (status.ok()) {
      NoteContact();
      return response;
    }
    const absl::Status s = rpc::FromGrpc(status);
    // The vote can be the first to hear that the job has failed: the view
    // says so at once, so the trainer's failed Step already carries the
    // terminal mark (not a plain DATA_LOSS before the watch catches up).
    if (absl::IsDataLoss(s)) {
      NoteJobFailed(s);
      return s;
    }
    // The coordinator is restarting: the vote is asked again (a restarted
    // coordinator starts a new epoch, so the answer will be ABORTED).
    if (!absl::IsUnavailable(s) || MonoNow() + backoff >= deadline) {
      return s;
    }
    if (SleepUntil(MonoNow() + backoff)) {
      return absl::CancelledError("the member client is stopping");
    }
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
}

absl::Status MemberClient::Leave(absl::string_view reason) {
  absl::MutexLock session(&session_mu_);
  pb::LeaveRequest request;
  {
    absl::MutexLock lock(&mu_);
    // Heartbeats stop even if the call fails: the lease then runs out.
    left_ = true;
    request.set_rank(rank_);
    request.set_lease_token(lease_token_);
  }
  request.set_reason(std::string(reason));
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + options_.rpc_timeout);
  if (!Register(&context)) {
    return absl::CancelledError("the member client is stopping");
  }
  pb::LeaveResponse response;
  const grpc::Status status = stub_->Leave(&context, request, &response);
  Unregister(&context);
  return rpc::FromGrpc(status);
}

}  // namespace shardd::coordinator
