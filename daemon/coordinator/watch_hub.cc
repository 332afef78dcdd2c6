#include "daemon/coordinator/watch_hub.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "daemon/coordinator/scoped_update_stream.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"

namespace shardd::coordinator {

namespace pb = ::shardd::v1;

namespace {

// How often the dispatcher looks at every stream without a change: new
// streams, writes that completed while a change waited, keepalives.
constexpr absl::Duration kTick = absl::Milliseconds(20);
// The shortest time between two passes over every stream: a pass costs
// O(streams), and the changes it serves can come thousands a second.
constexpr absl::Duration kCoalesce = absl::Milliseconds(2);

}  // namespace

// One WatchMembership stream. Its state is guarded by mu_; the dispatcher
// builds and starts writes, gRPC's threads report their completion.
class WatchHub::Stream final
    : public grpc::ServerWriteReactor<pb::MembershipUpdate> {
 public:
  Stream(WatchHub* hub, grpc::CallbackServerContext* context,
         const pb::WatchMembershipRequest& request)
      : hub_(hub),
        deadline_(rpc::DeadlineOf(*context)),
        scoped_(request.scoped()),
        scoped_stream_(request.rank()),
        rank_(request.rank()) {}

  // Called by the dispatcher: writes what the stream is owed now, if it is
  // not writing already; ends it at its deadline or on shutdown.
  void Poll(const ChangeSignal::Versions& v, MonoTime now) {
    absl::MutexLock lock(&mu_);
    if (finished_ || writing_) return;
    if (v.shut_down) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "the coordinator is shutting down"));
      return;
    }
    if (now >= deadline_) {
      FinishLocked(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                "watch deadline reached"));
      return;
    }
    const bool first = !started_;
    const bool keepalive_due = started_ && now >= next_keepalive_;
    const pb::MembershipUpdate* message = nullptr;
    CoordinatorManager* const manager = hub_->manager_;
    if (scoped_) {
      if (first) {
        woken_ = v.scoped;
        scope_ = manager->ScopeOf(rank_);
        std::shared_ptr<const MembershipChanges> c =
            manager->ScopedSnapshot(rank_);
        keepalive_ = c->snapshot.lease;
        out_ = scoped_stream_.Next(*c);
      } else if (v.scoped > woken_ || keepalive_due) {
        woken_ = v.scoped;
        out_ = scoped_stream_.Next(
            *manager->ScopedChangesSince(scoped_stream_.seen(), scope_));
        if (!out_.has_value() && keepalive_due)
          out_ = scoped_stream_.Keepalive();
      }
      if (out_.has_value()) message = &*out_;
    } else {
      if (first || v.any > seen_ || keepalive_due) {
        std::shared_ptr<const ClusterSnapshot> snap = manager->SharedSnapshot();
        if (first) keepalive_ = snap->lease / 3;
        const bool is_keepalive = !first && snap->version == seen_;
        if (first || snap->version != seen_ || keepalive_due) {
          seen_ = snap->version;
          full_ = hub_->full_updates_.Get(snap, is_keepalive);
          message = full_.get();
        }
      }
    }
    started_ = true;
    if (message == nullptr) return;
    next_keepalive_ = now + keepalive_;
    writing_ = true;
    StartWrite(message);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    out_.reset();
    full_.reset();
    if (!ok) {
      FinishLocked(grpc::Status::CANCELLED);
    } else if (finish_after_write_.has_value()) {
      grpc::Status status = *std::move(finish_after_write_);
      finish_after_write_.reset();
      FinishLocked(std::move(status));
    }
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override { hub_->Remove(this); }

  bool scoped() const { return scoped_; }

 private:
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    if (writing_) {
      // Finished once the write in flight completes.
      if (!finish_after_write_.has_value()) finish_after_write_ = status;
      return;
    }
    finished_ = true;
    Finish(std::move(status));
  }

  WatchHub* const hub_;
  const MonoTime deadline_;
  const bool scoped_;
  absl::Mutex mu_;
  ScopedUpdateStream scoped_stream_ ABSL_GUARDED_BY(mu_);
  const int rank_;
  // ScopeOf(rank_), looked up once (empty: everyone).
  std::vector<int> scope_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_after_write_ ABSL_GUARDED_BY(mu_);
  absl::Duration keepalive_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(500);
  MonoTime next_keepalive_ ABSL_GUARDED_BY(mu_);
  // Scoped: the wake counter last acted on. Full: the version last sent.
  int64_t woken_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seen_ ABSL_GUARDED_BY(mu_) = -1;
  // The message being written (kept alive until OnWriteDone).
  std::optional<pb::MembershipUpdate> out_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const pb::MembershipUpdate> full_ ABSL_GUARDED_BY(mu_);
};

WatchHub::WatchHub(CoordinatorManager* manager)
    : manager_(manager), dispatcher_([this] { Run(); }) {}

WatchHub::~WatchHub() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  dispatcher_.join();
}

grpc::ServerWriteReactor<pb::MembershipUpdate>* WatchHub::Open(
    grpc::CallbackServerContext* context,
    const pb::WatchMembershipRequest& request) {
  auto stream = std::make_shared<Stream>(this, context, request);
  Stream* raw = stream.get();
  absl::MutexLock lock(&mu_);
  if (!raw->scoped()) ++full_streams_;
  streams_.emplace(raw, std::move(stream));
  return raw;
}

void WatchHub::Remove(Stream* stream) {
  // The dispatcher may still hold a reference for its current pass; the
  // stream is destroyed with the last one.
  std::shared_ptr<Stream> last;
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  last = std::move(it->second);
  streams_.erase(it);
  if (!last->scoped()) --full_streams_;
}

void WatchHub::Run() {
  ChangeSignal::Versions seen =
      manager_->AwaitVersion(/*scoped=*/false, 0, MonoTime::InfinitePast());
  std::vector<std::shared_ptr<Stream>> pass;
  while (true) {
    bool any_full = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      any_full = full_streams_ > 0;
      pass.clear();
      pass.reserve(streams_.size());
      for (const auto& [raw, stream] : streams_) pass.push_back(stream);
    }
    const MonoTime now = MonoNow();
    for (const std::shared_ptr<Stream>& s : pass) s->Poll(seen, now);
    pass.clear();
    // Changes in a burst (W members reporting READY) are taken together.
    absl::SleepFor(kCoalesce);
    // The next change (only one a scoped stream shows, unless a full
    // stream is open), or the next tick (new streams, completed writes,
    // keepalives, deadlines).
    seen = manager_->AwaitVersion(/*scoped=*/!any_full,
                                  any_full ? seen.any : seen.scoped,
                                  MonoNow() + kTick);
    if (seen.shut_down) {
      // Let every stream end UNAVAILABLE, then idle on the tick until the
      // server has shut down and the hub is destroyed.
      absl::SleepFor(kTick);
    }
  }
}

}  // namespace shardd::coordinator
