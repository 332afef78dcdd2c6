#ifndef SHARDD_DAEMON_RPC_GRPC_STATUS_H_
#define SHARDD_DAEMON_RPC_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace shardd::rpc {

// The trailing metadata key (value "1") a daemon adds to a call's DATA_LOSS
// when the job has FAILED for good (trainer.proto), so that clients tell
// the terminal status from another DATA_LOSS (a corrupt load_from file) by
// a typed mark, never by the message.
inline constexpr char kJobFailedTrailer[] = "shardd-job-failed";
// Request metadata of the Trainer API: the caller's
// RegisterModelResponse.attachment, 16 lowercase hex digits.
inline constexpr char kAttachmentMetadata[] = "shardd-attachment";

// absl::Status -> grpc::Status with the same code and message: the managers
// choose codes by how the caller should react, and the wire keeps them.
grpc::Status ToGrpc(const absl::Status& status);

// grpc::Status -> absl::Status, for clients.
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_GRPC_STATUS_H_
