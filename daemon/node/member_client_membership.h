#ifndef SHARDD_DAEMON_NODE_MEMBER_CLIENT_MEMBERSHIP_H_
#define SHARDD_DAEMON_NODE_MEMBER_CLIENT_MEMBERSHIP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/coordinator/member_client.h"
#include "daemon/node/membership.h"

namespace shardd::node {

// The Membership port over the coordinator's gRPC protocol: a thin adapter
// of coordinator::MemberClient (which joins, heartbeats and watches). Owns
// the client. Thread-safe (the client is).
class MemberClientMembership final : public Membership {
 public:
  // Joins the coordinator with `options` (MemberClient::Join's errors).
  static absl::StatusOr<std::unique_ptr<MemberClientMembership>> Join(
      const coordinator::MemberClientOptions& options);
  explicit MemberClientMembership(
      std::unique_ptr<coordinator::MemberClient> client);

  int rank() const override;
  std::string incarnation() const override;
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
  int64_t common_checkpoint_step() const override;

 private:
  const std::unique_ptr<coordinator::MemberClient> client_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_MEMBER_CLIENT_MEMBERSHIP_H_
