#include "daemon/node/member_client_membership.h"

#include <utility>

namespace shardd::node {

absl::StatusOr<std::unique_ptr<MemberClientMembership>>
MemberClientMembership::Join(const coordinator::MemberClientOptions& options) {
  absl::StatusOr<std::unique_ptr<coordinator::MemberClient>> client =
      coordinator::MemberClient::Join(options);
  if (!client.ok()) return client.status();
  return std::make_unique<MemberClientMembership>(std::move(*client));
}

MemberClientMembership::MemberClientMembership(
    std::unique_ptr<coordinator::MemberClient> client)
    : client_(std::move(client)) {}

int MemberClientMembership::rank() const { return client_->rank(); }

std::string MemberClientMembership::incarnation() const {
  return client_->incarnation();
}

coordinator::MembershipView MemberClientMembership::view() const {
  return client_->view();
}

int64_t MemberClientMembership::common_checkpoint_step() const {
  return client_->common_checkpoint_step();
}

absl::StatusOr<coordinator::MembershipView> MemberClientMembership::WaitFor(
    std::function<bool(const coordinator::MembershipView&)> predicate,
    MonoTime deadline) const {
  return client_->WaitFor(std::move(predicate), deadline);
}

absl::Status MemberClientMembership::SetReady(int64_t epoch,
                                              int64_t committed_step) {
  return client_->SetReady(epoch, committed_step);
}

absl::Status MemberClientMembership::ReportFailure(int suspect,
                                                   v1::FailureKind kind,
                                                   absl::string_view detail,
                                                   int64_t epoch) {
  return client_->ReportFailure(suspect, kind, detail, epoch).status();
}

absl::Status MemberClientMembership::SendHeartbeat() {
  return client_->SendHeartbeat();
}

absl::StatusOr<v1::ShouldCommitResponse> MemberClientMembership::ShouldCommit(
    int64_t epoch, int64_t step, bool vote, absl::string_view reason,
    uint64_t step_fingerprint, MonoTime deadline) {
  return client_->ShouldCommit(epoch, step, vote, reason, step_fingerprint,
                               deadline);
}

std::string MemberClientMembership::SettledLeaseToken(MonoTime deadline) const {
  return client_->SettledLeaseToken(deadline);
}

absl::Status MemberClientMembership::Leave(absl::string_view reason) {
  return client_->Leave(reason);
}

}  // namespace shardd::node
