#include "client/trainer_client.h"

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"

namespace shardd::client {
namespace {

// Payload key that marks "nothing answers at the target".
constexpr char kUnreachablePayload[] = "shardd.client/daemon-unreachable";
constexpr char kJobFailedPayload[] = "shardd.client/job-failed";

bool LooksLikeConnectionFailure(absl::string_view message) {
  for (absl::string_view needle :
       {"failed to connect", "Connection refused", "No such file",
        "Socket closed", "Connection reset", "connections to all backends",
        "Broken pipe", "Connect Failed"}) {
    if (absl::StrContains(message, needle)) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<GatheredUnit> PendingGather::Wait(MonoTime deadline) {
  if (!future_.valid()) {
    return absl::FailedPreconditionError("PendingGather: no gather pending");
  }
  const absl::Duration left = deadline - MonoNow();
  const auto wait = left <= absl::ZeroDuration()
                        ? std::chrono::nanoseconds(0)
                        : absl::ToChronoNanoseconds(left);
  if (future_.wait_for(wait) != std::future_status::ready) {
    return absl::DeadlineExceededError(
        "Gather still in flight at the wait's deadline");
  }
  return future_.get();
}

TrainerClient::TrainerClient(TrainerClientOptions options, std::string target,
                             std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      target_(std::move(target)),
      channel_(std::move(channel)),
      stub_(v1::Trainer::NewStub(channel_)) {}

std::string TrainerClient::NormalizeTarget(absl::string_view target) {
  if (absl::StartsWith(target, "/")) return absl::StrCat("unix:", target);
  return std::string(target);
}

absl::StatusOr<std::unique_ptr<TrainerClient>> TrainerClient::Create(
    TrainerClientOptions options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("target: must not be empty");
  }
  if (options.default_timeout <= absl::ZeroDuration() ||
      options.register_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeouts must be > 0");
  }
  std::string target = NormalizeTarget(options.target);
  grpc::ChannelArguments args;
  // Replies are small (data travels through shared memory), but tools may
  // ask for inline data: lift the 4 MiB default on receive.
  args.SetMaxReceiveMessageSize(256 << 20);
  // Reconnect quickly after a daemon restart.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.credentials != nullptr && !absl::StartsWith(target, "unix:")
          ? options.credentials
          : grpc::InsecureChannelCredentials();
  auto channel = grpc::CreateCustomChannel(target, credentials, args);
  return std::unique_ptr<TrainerClient>(
      new TrainerClient(std::move(options), std::move(target), channel));
}

bool TrainerClient::IsDaemonUnreachable(const absl::Status& status) {
  return absl::IsUnavailable(status) &&
         status.GetPayload(kUnreachablePayload).has_value();
}

bool TrainerClient::IsJobFailed(const absl::Status& status) {
  return absl::IsDataLoss(status) &&
         status.GetPayload(kJobFailedPayload).has_value();
}

absl::Status TrainerClient::WithContext(const absl::Status& status,
                                        absl::string_view context) {
  if (status.ok()) return status;
  absl::Status annotated(status.code(),
                         absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload(
      [&](absl::string_view type_url, const absl::Cord& payload) {
        annotated.SetPayload(type_url, payload);
      });
  return annotated;
}

void TrainerClient::Prepare(grpc::ClientContext& context,
                            std::optional<MonoTime> deadline) const {
  const MonoTime when = deadline.value_or(MonoNow() + options_.default_timeout);
  rpc::SetDeadline(&context, when);
  const uint64_t attachment = attachment_.load(std::memory_order_acquire);
  if (attachment != 0) {
    context.AddMetadata(rpc::kAttachmentMetadata,
                        absl::StrFormat("%016x", attachment));
  }
}

absl::Status TrainerClient::Convert(const grpc::Status& status,
                                    const grpc::ClientContext& context) const {
  absl::Status converted = rpc::FromGrpc(status);
  if (absl::IsDataLoss(converted)) {
    // The job has failed only when the daemon marks it so (trainer.proto);
    // another DATA_LOSS (a corrupt load_from file) is the call's own.
    const auto& trailers = context.GetServerTrailingMetadata();
    if (trailers.find(rpc::kJobFailedTrailer) != trailers.end()) {
      converted.SetPayload(kJobFailedPayload, absl::Cord("1"));
    }
    return converted;
  }
  if (absl::IsCancelled(converted)) {
    // This client never cancels a unary call: the daemon's server did,
    // which it does to the calls it has not finished when it stops
    // (SIGTERM's drain ran out, or the call came in as it began). The
    // daemon is going away: re-attach, as when nothing answers.
    absl::Status down = absl::UnavailableError(absl::StrCat(
        "the shardd daemon at ", target_,
        " cancelled the call (it is stopping): ", converted.message()));
    down.SetPayload(kUnreachablePayload, absl::Cord("1"));
    return down;
  }
  if (!absl::IsUnavailable(converted)) return converted;
  const bool channel_failed =
      channel_->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE;
  if (!channel_failed && !LooksLikeConnectionFailure(converted.message())) {
    return converted;  // The daemon's own UNAVAILABLE.
  }
  absl::Status down = absl::UnavailableError(absl::StrCat(
      "no shardd daemon at ", target_, " (", converted.message(), ")"));
  down.SetPayload(kUnreachablePayload, absl::Cord("1"));
  return down;
}

absl::Status TrainerClient::WaitConnected(MonoTime deadline) {
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (!channel_->WaitForStateChange(state, rpc::ToGrpcDeadline(deadline))) {
      absl::Status down = absl::UnavailableError(absl::StrCat(
          "no shardd daemon at ", target_, " (not connected by the deadline)"));
      down.SetPayload(kUnreachablePayload, absl::Cord("1"));
      return down;
    }
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::RegisterModelResponse> TrainerClient::RegisterModel(
    const v1::RegisterModelRequest& request, std::optional<MonoTime> deadline) {
  // A new registration (after a recovery, the replacement's) hands out new
  // buffers: close the old GPU ones first, before the daemon may free them,
  // and unmap the old segments, so that a dead daemon's unlinked memory is
  // really freed (views handed out keep their own mappings).
  if (absl::Status closed = segments_.ForgetDeviceBuffers(); !closed.ok()) {
    // Not a reason to refuse the registration (a dead daemon's handles may
    // fail to close); the handles are dropped either way. Say so.
    std::fprintf(stderr,
                 "shardd client: closing the daemon's GPU buffers: %s\n",
                 std::string(closed.message()).c_str());
  }
  segments_.Clear();
  grpc::ClientContext context;
  Prepare(context, deadline.value_or(MonoNow() + options_.register_timeout));
  v1::RegisterModelResponse response;
  grpc::Status status = stub_->RegisterModel(&context, request, &response);
  if (!status.ok()) return Convert(status, context);
  // From now on this process's calls say which attachment they are.
  attachment_.store(response.attachment(), std::memory_order_release);
  return response;
}

absl::StatusOr<GatheredUnit> TrainerClient::Gather(
    int unit, v1::Pass pass, const std::vector<int>& prefetch,
    std::optional<MonoTime> deadline) {
  v1::GatherRequest request;
  request.set_unit(unit);
  request.set_pass(pass);
  for (int p : prefetch) request.add_prefetch(p);
  return Gather(request, deadline);
}

absl::StatusOr<GatheredUnit> TrainerClient::Gather(
    const v1::GatherRequest& request, std::optional<MonoTime> deadline) {
  const int unit = request.unit();
  const v1::Pass pass = request.pass();
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::GatherResponse response;
  grpc::Status status = stub_->Gather(&context, request, &response);
  if (!status.ok()) return Convert(status, context);

  GatheredUnit gathered;
  gathered.unit = unit;
  absl::StatusOr<UnitView> params =
      segments_.ReadView(response.params(), "params");
  if (!params.ok()) return params.status();
  gathered.params = std::move(*params);
  if (response.has_grad_buffer()) {
    absl::StatusOr<GradView> grad = segments_.WriteView(
        response.grad_buffer(), "grad_buffer", options_.grad_writer);
    if (!grad.ok()) return grad.status();
    gathered.grad = std::move(*grad);
  } else if (pass == v1::PASS_BACKWARD) {
    return absl::DataLossError(absl::StrCat(
        "Gather(unit ", unit, ", BACKWARD): the reply has no grad_buffer"));
  }
  gathered.response = std::move(response);
  return gathered;
}

PendingGather TrainerClient::GatherAsync(int unit, v1::Pass pass,
                                         std::vector<int> prefetch,
                                         std::optional<MonoTime> deadline) {
  const MonoTime when = deadline.value_or(MonoNow() + options_.default_timeout);
  return PendingGather(
      std::async(std::launch::async,
                 [this, unit, pass, prefetch = std::move(prefetch), when]() {
                   return Gather(unit, pass, prefetch, when);
                 }));
}

absl::StatusOr<v1::ReleaseResponse> TrainerClient::Release(
    int unit, v1::Pass pass, std::optional<MonoTime> deadline) {
  v1::ReleaseRequest request;
  request.set_unit(unit);
  request.set_pass(pass);
  return Release(request, deadline);
}

absl::StatusOr<v1::ReleaseResponse> TrainerClient::Release(
    const v1::ReleaseRequest& request, std::optional<MonoTime> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::ReleaseResponse response;
  grpc::Status status = stub_->Release(&context, request, &response);
  if (!status.ok()) return Convert(status, context);
  return response;
}

absl::StatusOr<v1::ReduceGradResponse> TrainerClient::ReduceGrad(
    int unit, const v1::DataRef& gradient_slot, bool accumulate_only,
    std::optional<MonoTime> deadline) {
  v1::ReduceGradRequest request;
  request.set_unit(unit);
  *request.mutable_grad() = gradient_slot;
  request.set_accumulate_only(accumulate_only);
  return ReduceGrad(request, deadline);
}

absl::StatusOr<v1::ReduceGradResponse> TrainerClient::ReduceGrad(
    const v1::ReduceGradRequest& request, std::optional<MonoTime> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::ReduceGradResponse response;
  grpc::Status status = stub_->ReduceGrad(&context, request, &response);
  if (!status.ok()) return Convert(status, context);
  return response;
}

absl::StatusOr<v1::StepResponse> TrainerClient::Step(
    int64_t step, std::optional<double> learning_rate,
    std::optional<MonoTime> deadline) {
  v1::StepRequest request;
  request.set_step(step);
  if (learning_rate.has_value()) request.set_learning_rate(*learning_rate);
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::StepResponse response;
  grpc::Status status = stub_->Step(&context, request, &response);
  if (!status.ok()) return Convert(status, context);
  return response;
}

absl::StatusOr<v1::WaitReadyResponse> TrainerClient::WaitReady(
    int64_t min_epoch, std::optional<MonoTime> deadline) {
  v1::WaitReadyRequest request;
  request.set_min_epoch(min_epoch);
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::WaitReadyResponse response;
  grpc::Status status = stub_->WaitReady(&context, request, &response);
  if (!status.ok()) return Convert(status, context);
  return response;
}

absl::StatusOr<v1::ExportStateResponse> TrainerClient::ExportState(
    const v1::ExportStateRequest& request, std::optional<MonoTime> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::ExportStateResponse response;
  grpc::Status status = stub_->ExportState(&context, request, &response);
  if (!status.ok()) return Convert(status, context);
  return response;
}

absl::Status EventStream::Finish() { return rpc::FromGrpc(reader_->Finish()); }

std::unique_ptr<EventStream> TrainerClient::WatchEvents(
    const v1::WatchEventsRequest& request, MonoTime deadline) {
  std::unique_ptr<EventStream> stream(new EventStream());
  rpc::SetDeadline(&stream->context_, deadline);
  stream->reader_ = stub_->WatchEvents(&stream->context_, request);
  return stream;
}

absl::StatusOr<v1::GetStatusResponse> TrainerClient::GetStatus(
    std::optional<MonoTime> deadline) {
  grpc::ClientContext context;
  Prepare(context, deadline);
  v1::GetStatusResponse response;
  grpc::Status status =
      stub_->GetStatus(&context, v1::GetStatusRequest(), &response);
  if (!status.ok()) return Convert(status, context);
  return response;
}

}  // namespace shardd::client
