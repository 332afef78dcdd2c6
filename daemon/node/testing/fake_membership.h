#ifndef SHARDD_DAEMON_NODE_TESTING_FAKE_MEMBERSHIP_H_
#define SHARDD_DAEMON_NODE_TESTING_FAKE_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/node/membership.h"

namespace shardd::node::testing {

// A Membership for unit tests of the node's classes: the view is what the
// test sets; what the node tells the coordinator is recorded as calls, in
// order: "ready(EPOCH,STEP)", "report(SUSPECT,KIND,EPOCH)", "heartbeat"
// (tests may Log their own between them). WaitFor answers the current view
// at once (DEADLINE_EXCEEDED when the predicate does not hold); a test that
// scripts views overrides it. Thread-safe.
class FakeMembership : public Membership {
 public:
  explicit FakeMembership(int rank = 0, std::string incarnation = "me");

  int rank() const override { return rank_; }
  std::string incarnation() const override { return incarnation_; }
  coordinator::MembershipView view() const override;
  absl::StatusOr<coordinator::MembershipView> WaitFor(
      std::function<bool(const coordinator::MembershipView&)> predicate,
      MonoTime deadline) const override;
  absl::Status SetReady(int64_t epoch, int64_t committed_step) override;
  absl::Status ReportFailure(int suspect, v1::FailureKind kind,
                             absl::string_view detail, int64_t epoch) override;
  absl::Status SendHeartbeat() override;
  absl::StatusOr<v1::ShouldCommitResponse> ShouldCommit(
      int64_t epoch, int64_t step, bool vote, absl::string_view reason,
      uint64_t step_fingerprint, MonoTime deadline) override;
  std::string SettledLeaseToken(MonoTime deadline) const override;
  absl::Status Leave(absl::string_view reason) override;

  void SetView(const coordinator::MembershipView& view);
  // What SetReady answers (OK by default).
  void SetReadyStatus(absl::Status status);
  void Log(const std::string& call);
  std::vector<std::string> calls() const;
  // How many calls equal `call`.
  int Count(const std::string& call) const;
  // The detail of the last ReportFailure.
  std::string last_detail() const;

 protected:
  mutable absl::Mutex mu_;
  // Mutable: a scripted WaitFor (const) moves it, as a watch stream does.
  mutable coordinator::MembershipView view_ ABSL_GUARDED_BY(mu_);

 private:
  const int rank_;
  const std::string incarnation_;
  absl::Status ready_status_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  std::string last_detail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node::testing

#endif  // SHARDD_DAEMON_NODE_TESTING_FAKE_MEMBERSHIP_H_
