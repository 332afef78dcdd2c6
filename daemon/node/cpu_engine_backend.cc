#include "daemon/node/cpu_engine_backend.h"

#include "daemon/comm/gloo_collective.h"
#include "daemon/node/group_spec.h"
#include "daemon/node/host_engine_math.h"

namespace shardd::node {

CpuEngineBackend::CpuEngineBackend(std::string shm_dir, std::string shm_prefix)
    : shared_(std::move(shm_dir), std::move(shm_prefix)) {}

std::shared_ptr<EngineMath> CpuEngineBackend::math() {
  return HostEngineMath::Get();
}

absl::StatusOr<std::unique_ptr<comm::Collective>>
CpuEngineBackend::MakeCollective(const GroupSpec& spec, comm::Store& store) {
  return comm::CreateGlooCollective(ToGlooOptions(spec), store);
}

}  // namespace shardd::node
