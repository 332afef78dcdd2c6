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

// How often the dispatcher looks at every stream without a change:
// keepalives (due every lease or third of one) and deadlines. A look at a
// stream with nothing due is a lock and two comparisons.
constexpr absl::Duration kScanPeriod = absl::Milliseconds(100);
// After a change, the dispatcher waits this long before offering it, so
// that a burst (many members reporting READY) goes out as one message.
constexpr absl::Duration kCoalesce = absl::Milliseconds(2);
// The longest a new stream or one whose write completed waits for the
// dispatcher to offer it what it owes.
constexpr absl::Duration kPoll = absl::Milliseconds(5);

}  // namespace

// One WatchMembership stream. State under mu_; StartWrite and Finish are
// called with mu_ released (gRPC may run the completion on the calling
// thread).
class WatchHub::Stream final
    : public grpc::ServerWriteReactor<pb::MembershipUpdate> {
 public:
  Stream(WatchHub* hub, grpc::CallbackServerContext* context,
         const pb::WatchMembershipRequest& request)
      : hub_(hub),
        deadline_(rpc::DeadlineOf(*context)),
        scoped_(request.scoped()),
        rank_(request.rank()),
        scoped_stream_(request.rank()) {}

  bool scoped() const { return scoped_; }

  // Sends what the stream owes at `now` given the manager's versions `v`
  // (the first message, a change, a keepalive), or ends it (shutdown,
  // deadline). Nothing while a write is in flight: its completion offers
  // again.
  void Offer(const ChangeSignal::Versions& v, MonoTime now) {
    const pb::MembershipUpdate* message = nullptr;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      // The write's completion offers whatever is current then.
      if (writing_) return;
      if (v.shut_down || hub_->manager_->shut_down()) {
        finish = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "the coordinator is shutting down");
      } else if (now >= deadline_) {
        finish = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                              "watch deadline reached");
      } else {
        message = NextLocked(v, now);
      }
      if (finish.has_value()) {
        finished_ = true;
      } else if (message != nullptr) {
        writing_ = true;
        next_keepalive_ = now + keepalive_;
      }
    }
    if (finish.has_value()) {
      Finish(*std::move(finish));
    } else if (message != nullptr) {
      StartWrite(message);
    }
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      out_.reset();
      full_.reset();
      if (!ok || cancelled_) {
        finish = grpc::Status::CANCELLED;
        finished_ = true;
      }
    }
    if (finish.has_value()) {
      Finish(*std::move(finish));
      return;
    }
    // Whatever changed while the write was in flight goes out from the
    // dispatcher: gRPC's threads never wait on the manager's lock.
    hub_->NeedsOffer(this);
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      // A write in flight completes (not ok) and finishes the stream.
      if (finished_ || writing_) return;
      finished_ = true;
    }
    Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override { hub_->Remove(this); }

 private:
  // The message owed now, kept in out_ or full_ until its write completes;
  // nullptr when nothing is owed.
  const pb::MembershipUpdate* NextLocked(const ChangeSignal::Versions& v,
                                         MonoTime now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CoordinatorManager* const manager = hub_->manager_;
    const bool first = !started_;
    const bool keepalive_due = started_ && now >= next_keepalive_;
    started_ = true;
    if (scoped_) {
      if (first) {
        // The versions were read before the snapshot: a change after them
        // is offered again.
        woken_ = v.scoped;
        std::shared_ptr<const MembershipChanges> c =
            manager->ScopedSnapshot(rank_);
        // A lease, not a third of one: the member's watchdog reopens a
        // stream silent for two leases, and its heartbeat replies carry
        // epoch and readiness meanwhile.
        keepalive_ = c->snapshot.lease;
        out_ = scoped_stream_.Next(*c);
      } else if (v.scoped > woken_ || keepalive_due) {
        woken_ = std::max(woken_, v.scoped);
        out_ =
            scoped_stream_.Next(*manager->ChangesSince(scoped_stream_.seen()));
        if (!out_.has_value() && keepalive_due) {
          out_ = scoped_stream_.Keepalive();
        }
      }
      return out_.has_value() ? &*out_ : nullptr;
    }
    if (!first && v.any <= sent_version_ && !keepalive_due) return nullptr;
    std::shared_ptr<const ClusterSnapshot> snap = manager->SharedSnapshot();
    if (first) keepalive_ = snap->lease / 3;
    const bool news = first || snap->version != sent_version_;
    if (!news && !keepalive_due) return nullptr;
    sent_version_ = snap->version;
    full_ = hub_->full_updates_.Get(snap, /*keepalive=*/!news);
    return full_.get();
  }

  WatchHub* const hub_;
  const MonoTime deadline_;
  const bool scoped_;
  const int rank_;
  absl::Mutex mu_;
  ScopedUpdateStream scoped_stream_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration keepalive_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(500);
  MonoTime next_keepalive_ ABSL_GUARDED_BY(mu_);
  // Scoped: the scoped version last acted on. Full: the version last sent.
  int64_t woken_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sent_version_ ABSL_GUARDED_BY(mu_) = -1;
  // The message being written, alive until OnWriteDone.
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
  {
    absl::MutexLock lock(&mu_);
    if (!raw->scoped()) ++full_streams_;
    streams_.emplace(raw, stream);
  }
  // The first message now, on gRPC's thread, not at the next scan.
  stream->Offer(
      manager_->AwaitVersion(/*scoped=*/false, 0, MonoTime::InfinitePast()),
      MonoNow());
  return raw;
}

int WatchHub::open_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

void WatchHub::NeedsOffer(Stream* stream) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(stream);
  if (it != streams_.end()) needs_offer_.push_back(it->second);
}

void WatchHub::Remove(Stream* stream) {
  // The dispatcher may hold a reference for its current pass; the stream
  // is destroyed with the last one, outside mu_.
  std::shared_ptr<Stream> last;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return;
    last = std::move(it->second);
    streams_.erase(it);
    if (!last->scoped()) --full_streams_;
  }
}

void WatchHub::Run() {
  ChangeSignal::Versions seen =
      manager_->AwaitVersion(/*scoped=*/false, 0, MonoTime::InfinitePast());
  MonoTime next_scan = MonoNow() + kScanPeriod;
  std::vector<std::shared_ptr<Stream>> pass;
  while (true) {
    bool any_full = false;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      any_full = full_streams_ > 0;
    }
    // The next change a stream shows (scoped streams show fewer than full
    // ones), the next scan, or kPoll for streams that asked (new ones,
    // completed writes): they cannot wake this wait.
    ChangeSignal::Versions v = manager_->AwaitVersion(
        /*scoped=*/!any_full, any_full ? seen.any : seen.scoped,
        std::min(next_scan, MonoNow() + kPoll));
    const bool changed = any_full ? v.any > seen.any : v.scoped > seen.scoped;
    if (changed) {
      absl::SleepFor(kCoalesce);
      v = manager_->AwaitVersion(/*scoped=*/false, 0, MonoTime::InfinitePast());
    }
    const MonoTime now = MonoNow();
    const bool scan = now >= next_scan;
    {
      absl::MutexLock lock(&mu_);
      if (changed || scan || v.shut_down) {
        pass.reserve(streams_.size());
        for (const auto& [raw, stream] : streams_) pass.push_back(stream);
        needs_offer_.clear();
      } else {
        pass.swap(needs_offer_);
      }
    }
    for (const std::shared_ptr<Stream>& s : pass) s->Offer(v, now);
    pass.clear();
    seen = v;
    if (scan) next_scan = now + kScanPeriod;
    if (v.shut_down) {
      // Every stream has been told; idle until the hub is destroyed.
      absl::SleepFor(kScanPeriod);
    }
  }
}

}  // namespace shardd::coordinator
