#include "daemon/node/trainer_service.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "daemon/node/check_memory_reply.h"
#include "daemon/rpc/grpc_deadline.h"
#include "daemon/rpc/grpc_status.h"

namespace shardd::node {
namespace {

MonoTime Deadline(const grpc::ServerContext* context) {
  return rpc::DeadlineOf(*context);
}

// A failed call of a job that has failed says so (DATA_LOSS, terminal,
// marked with rpc::kJobFailedTrailer) instead of the retryable ABORTED or
// UNAVAILABLE its collective saw.
template <typename Response>
grpc::Status Reply(NodeManager& manager, grpc::ServerContext* context,
                   absl::StatusOr<Response> result, Response* response) {
  if (!result.ok()) {
    if (absl::Status failed = manager.JobFailure(); !failed.ok()) {
      manager.NoteJobFailureReplied();
      context->AddTrailingMetadata(rpc::kJobFailedTrailer, "1");
      return rpc::ToGrpc(failed);
    }
    return rpc::ToGrpc(result.status());
  }
  *response = std::move(*result);
  return grpc::Status::OK;
}

// The caller's attachment (metadata rpc::kAttachmentMetadata), when it sent
// one; INVALID_ARGUMENT when it is not 16 hex digits.
absl::StatusOr<std::optional<uint64_t>> AttachmentOf(
    const grpc::ServerContext& context) {
  const auto it = context.client_metadata().find(rpc::kAttachmentMetadata);
  if (it == context.client_metadata().end()) return std::nullopt;
  const std::string text(it->second.data(), it->second.size());
  uint64_t attachment = 0;
  if (text.size() != 16 || !absl::SimpleHexAtoi(text, &attachment)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata ", rpc::kAttachmentMetadata, ": '", text,
                     "' is not 16 hex digits (RegisterModelResponse."
                     "attachment)"));
  }
  return attachment;
}

}  // namespace

grpc::Status TrainerService::RegisterModel(
    grpc::ServerContext* context, const v1::RegisterModelRequest* request,
    v1::RegisterModelResponse* response) {
  return Reply(*manager_, context,
               manager_->RegisterModel(*request, Deadline(context)), response);
}

grpc::Status TrainerService::Gather(grpc::ServerContext* context,
                                    const v1::GatherRequest* request,
                                    v1::GatherResponse* response) {
  absl::StatusOr<std::optional<uint64_t>> attachment = AttachmentOf(*context);
  if (!attachment.ok()) return rpc::ToGrpc(attachment.status());
  return Reply(*manager_, context,
               manager_->Gather(*request, Deadline(context), *attachment),
               response);
}

grpc::Status TrainerService::Release(grpc::ServerContext* context,
                                     const v1::ReleaseRequest* request,
                                     v1::ReleaseResponse* response) {
  absl::StatusOr<std::optional<uint64_t>> attachment = AttachmentOf(*context);
  if (!attachment.ok()) return rpc::ToGrpc(attachment.status());
  return Reply(*manager_, context, manager_->Release(*request, *attachment),
               response);
}

grpc::Status TrainerService::ReduceGrad(grpc::ServerContext* context,
                                        const v1::ReduceGradRequest* request,
                                        v1::ReduceGradResponse* response) {
  absl::StatusOr<std::optional<uint64_t>> attachment = AttachmentOf(*context);
  if (!attachment.ok()) return rpc::ToGrpc(attachment.status());
  return Reply(*manager_, context,
               manager_->ReduceGrad(*request, Deadline(context), *attachment),
               response);
}

grpc::Status TrainerService::Step(grpc::ServerContext* context,
                                  const v1::StepRequest* request,
                                  v1::StepResponse* response) {
  absl::StatusOr<std::optional<uint64_t>> attachment = AttachmentOf(*context);
  if (!attachment.ok()) return rpc::ToGrpc(attachment.status());
  return Reply(*manager_, context,
               manager_->Step(*request, Deadline(context), *attachment),
               response);
}

grpc::Status TrainerService::WaitReady(grpc::ServerContext* context,
                                       const v1::WaitReadyRequest* request,
                                       v1::WaitReadyResponse* response) {
  absl::StatusOr<std::optional<uint64_t>> attachment = AttachmentOf(*context);
  if (!attachment.ok()) return rpc::ToGrpc(attachment.status());
  return Reply(*manager_, context,
               manager_->WaitReady(*request, Deadline(context), *attachment),
               response);
}

grpc::Status TrainerService::ExportState(grpc::ServerContext* context,
                                         const v1::ExportStateRequest* request,
                                         v1::ExportStateResponse* response) {
  return Reply(
      *manager_, context,
      manager_->ExportState(*request, Deadline(context),
                            [context] { return context->IsCancelled(); }),
      response);
}

grpc::Status TrainerService::GetStatus(grpc::ServerContext*,
                                       const v1::GetStatusRequest*,
                                       v1::GetStatusResponse* response) {
  *response = manager_->GetStatus();
  return grpc::Status::OK;
}

grpc::Status TrainerService::WatchEvents(
    grpc::ServerContext* context, const v1::WatchEventsRequest* request,
    grpc::ServerWriter<v1::TrainerEvent>* writer) {
  return rpc::ToGrpc(manager_->WatchEvents(
      *request, rpc::DeadlineOf(*context),
      [&](const v1::TrainerEvent& event) { return writer->Write(event); },
      [&] { return context->IsCancelled(); }));
}

grpc::Status TrainerService::CheckMemory(grpc::ServerContext*,
                                         const v1::CheckMemoryRequest* request,
                                         v1::CheckMemoryResponse* response) {
  if (admission_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "this daemon has no memory admission");
  }
  absl::StatusOr<v1::CheckMemoryResponse> reply =
      CheckMemoryReply(*admission_, manager_->GetStatus().topology(), *request);
  if (!reply.ok()) return rpc::ToGrpc(reply.status());
  *response = *std::move(reply);
  return grpc::Status::OK;
}

}  // namespace shardd::node
