#include "daemon/node/testing/fake_membership.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardd::node::testing {

FakeMembership::FakeMembership(int rank, std::string incarnation)
    : rank_(rank), incarnation_(std::move(incarnation)) {}

coordinator::MembershipView FakeMembership::view() const {
  absl::MutexLock lock(&mu_);
  return view_;
}

absl::StatusOr<coordinator::MembershipView> FakeMembership::WaitFor(
    std::function<bool(const coordinator::MembershipView&)> predicate,
    MonoTime) const {
  absl::MutexLock lock(&mu_);
  if (predicate(view_)) return view_;
  return absl::DeadlineExceededError("the view does not hold");
}

absl::Status FakeMembership::SetReady(int64_t epoch, int64_t committed_step) {
  Log(absl::StrCat("ready(", epoch, ",", committed_step, ")"));
  absl::MutexLock lock(&mu_);
  return ready_status_;
}

absl::Status FakeMembership::ReportFailure(int suspect, v1::FailureKind kind,
                                           absl::string_view detail,
                                           int64_t epoch) {
  Log(absl::StrCat("report(", suspect, ",", v1::FailureKind_Name(kind), ",",
                   epoch, ")"));
  absl::MutexLock lock(&mu_);
  last_detail_ = std::string(detail);
  return absl::OkStatus();
}

absl::Status FakeMembership::SendHeartbeat() {
  Log("heartbeat");
  return absl::OkStatus();
}

absl::StatusOr<v1::ShouldCommitResponse> FakeMembership::ShouldCommit(
    int64_t, int64_t, bool, absl::string_view, uint64_t, MonoTime) {
  return absl::UnimplementedError("FakeMembership has no commit vote");
}

std::string FakeMembership::SettledLeaseToken(MonoTime) const {
  return "token";
}

absl::Status FakeMembership::Leave(absl::string_view) {
  Log("leave");
  return absl::OkStatus();
}

void FakeMembership::SetView(const coordinator::MembershipView& view) {
  absl::MutexLock lock(&mu_);
  view_ = view;
}

void FakeMembership::SetReadyStatus(absl::Status status) {
  absl::MutexLock lock(&mu_);
  ready_status_ = std::move(status);
}

void FakeMembership::Log(const std::string& call) {
  absl::MutexLock lock(&mu_);
  calls_.push_back(call);
}

std::vector<std::string> FakeMembership::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

int FakeMembership::Count(const std::string& call) const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(std::count(calls_.begin(), calls_.end(), call));
}

std::string FakeMembership::last_detail() const {
  absl::MutexLock lock(&mu_);
  return last_detail_;
}

}  // namespace shardd::node::testing
