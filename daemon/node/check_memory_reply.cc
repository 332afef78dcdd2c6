#include "daemon/node/check_memory_reply.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/admission_decision.h"
#include "daemon/core/admission_plan.h"
#include "daemon/node/proto_convert.h"

namespace shardd::node {

absl::StatusOr<v1::CheckMemoryResponse> CheckMemoryReply(
    const EngineAdmission& admission, const v1::Topology& topology,
    const v1::CheckMemoryRequest& request) {
  if (request.world_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size: must be >= 0, got ", request.world_size()));
  }
  const int world =
      request.world_size() > 0 ? request.world_size() : topology.world_size();
  if (world <= 0) {
    return absl::FailedPreconditionError(
        "world_size: the coordinator has not formed an epoch yet, so W is "
        "unknown; give world_size");
  }
  const int rank = request.has_rank() ? request.rank() : topology.rank();
  absl::StatusOr<core::ModelConfig> model =
      ProtoConvert::ModelFromProto(request.model());
  if (!model.ok()) return model.status();
  absl::StatusOr<AdmissionCheck> check =
      admission.CheckModel(*model, world, rank);
  if (!check.ok()) return check.status();

  v1::CheckMemoryResponse response;
  response.set_admitted(check->status.ok());
  response.set_refusal(std::string(check->status.message()));
  response.set_world_size(check->world_size);
  response.set_sharding_factor(check->sharding_factor);
  response.set_rank(check->rank);
  for (const core::PlannedBytes& item : check->plan.items()) {
    v1::PlannedMemory* out = response.add_plan();
    out->set_category(item.category);
    out->set_bytes(item.bytes);
    out->set_placement(core::MemoryPlacementName(item.placement));
  }
  response.set_host_bytes(check->plan.BytesIn(core::MemoryPlacement::kHost));
  response.set_shm_bytes(
      check->plan.BytesIn(core::MemoryPlacement::kSharedHost));
  response.set_device_bytes(
      check->plan.BytesIn(core::MemoryPlacement::kDevice));
  for (const core::MemoryLimit& limit : check->reading.limits) {
    v1::MemoryLimit* out = response.add_limits();
    out->set_scope(core::LimitScopeName(limit.scope));
    out->set_available_bytes(limit.available_bytes);
    out->set_usable_bytes(core::UsableBytes(limit, check->fraction));
    out->set_measured(limit.measured);
    out->set_source(limit.source);
  }
  for (const std::string& problem : check->reading.unreadable) {
    response.add_unreadable(problem);
  }
  response.set_memory_limit_fraction(check->fraction);
  return response;
}

}  // namespace shardd::node
