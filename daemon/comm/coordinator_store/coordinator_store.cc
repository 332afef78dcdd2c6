#include "daemon/comm/coordinator_store/coordinator_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/mono_time.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"

namespace shardd::comm {
namespace {

namespace pb = ::shardd::v1;

// The coordinator's status with what was asked prepended.
absl::Status Annotate(const grpc::Status& status, absl::string_view what) {
  const absl::Status s = rpc::FromGrpc(status);
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
}

}  // namespace

CoordinatorStore::CoordinatorStore(std::shared_ptr<grpc::Channel> channel,
                                   int64_t epoch,
                                   CoordinatorStoreOptions options)
    : channel_(std::move(channel)),
      stub_(pb::Coordinator::NewStub(channel_)),
      epoch_(epoch),
      options_(std::move(options)) {}

std::unique_ptr<CoordinatorStore> CoordinatorStore::Connect(
    const std::string& address, int64_t epoch,
    CoordinatorStoreOptions options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr ? options.credentials
                                     : grpc::InsecureChannelCredentials();
  return std::make_unique<CoordinatorStore>(
      grpc::CreateChannel(address, std::move(credentials)), epoch,
      std::move(options));
}

absl::Status CoordinatorStore::Set(absl::string_view key,
                                   absl::string_view value) {
  pb::RendezvousSetRequest request;
  request.set_epoch(epoch_);
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_rank(options_.rank);
  request.set_lease_token(options_.lease_token);
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + options_.rpc_timeout);
  pb::RendezvousSetResponse response;
  const grpc::Status status =
      stub_->RendezvousSet(&context, request, &response);
  if (status.ok()) return absl::OkStatus();
  return Annotate(status,
                  absl::StrCat("rendezvous set '", key, "' in epoch ", epoch_));
}

absl::StatusOr<std::string> CoordinatorStore::Get(absl::string_view key) {
  pb::RendezvousGetRequest request;
  request.set_epoch(epoch_);
  request.set_key(std::string(key));
  request.set_lease_token(options_.lease_token);
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + options_.rpc_timeout);
  pb::RendezvousGetResponse response;
  const grpc::Status status =
      stub_->RendezvousGet(&context, request, &response);
  if (!status.ok()) {
    return Annotate(
        status, absl::StrCat("rendezvous get '", key, "' in epoch ", epoch_));
  }
  return std::move(*response.mutable_value());
}

absl::Status CoordinatorStore::Wait(const std::vector<std::string>& keys,
                                    absl::Duration timeout) {
  if (keys.empty()) return absl::OkStatus();
  const absl::Duration wait =
      std::clamp(timeout, absl::ZeroDuration(), options_.max_wait);
  pb::RendezvousWaitRequest request;
  request.set_epoch(epoch_);
  request.set_lease_token(options_.lease_token);
  for (const std::string& key : keys) request.add_keys(key);
  grpc::ClientContext context;
  rpc::SetDeadline(&context, MonoNow() + wait);
  pb::RendezvousWaitResponse response;
  const grpc::Status status =
      stub_->RendezvousWait(&context, request, &response);
  if (status.ok()) return absl::OkStatus();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // The client deadline may fire before the coordinator's own answer
    // (which names the missing keys): name them here either way.
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous wait in epoch ", epoch_, " timed out after ",
        absl::FormatDuration(wait), " for key(s) ", absl::StrJoin(keys, ", "),
        " (first: '", keys.front(), "'): ", status.error_message()));
  }
  return Annotate(
      status,
      absl::StrCat("rendezvous wait in epoch ", epoch_, " for ", keys.size(),
                   " key(s) (first: '", keys.front(), "')"));
}

}  // namespace shardd::comm
