#ifndef SHARDD_DAEMON_NODE_CHECK_MEMORY_REPLY_H_
#define SHARDD_DAEMON_NODE_CHECK_MEMORY_REPLY_H_

#include "absl/status/statusor.h"
#include "daemon/node/engine_admission.h"
#include "shardd/v1/common.pb.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::node {

// Trainer.CheckMemory without gRPC: converts the request's model, takes W
// and the rank from the request or else from the daemon's `topology`, asks
// `admission` (EngineAdmission::CheckModel) and converts its check into the
// reply. Status codes as trainer.proto documents them. Nothing is logged,
// counted or allocated. Thread-safe.
absl::StatusOr<v1::CheckMemoryResponse> CheckMemoryReply(
    const EngineAdmission& admission, const v1::Topology& topology,
    const v1::CheckMemoryRequest& request);

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CHECK_MEMORY_REPLY_H_
