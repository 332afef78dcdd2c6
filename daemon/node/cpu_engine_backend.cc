#include "daemon/node/cpu_engine_backend.h"

#include "daemon/comm/host_collective.h"
#include "daemon/node/group_spec.h"
#include "daemon/node/host_engine_math.h"

namespace shardd::node {

CpuEngineBackend::CpuEngineBackend(std::string shm_dir, std::string shm_prefix,
                                   comm::TransportMode transport)
    : shared_(std::move(shm_dir), std::move(shm_prefix)),
      transport_(transport) {}

std::shared_ptr<EngineMath> CpuEngineBackend::math() {
  return HostEngineMath::Get();
}

absl::StatusOr<std::unique_ptr<comm::Collective>>
CpuEngineBackend::MakeCollective(const GroupSpec& spec, comm::Store& store) {
  comm::HostCollectiveOptions options;
  options.gloo = ToGlooOptions(spec);
  options.transport = transport_;
  return comm::CreateHostCollective(options, store);
}

}  // namespace shardd::node
