#ifndef SHARDD_DAEMON_NODE_CPU_ENGINE_BACKEND_H_
#define SHARDD_DAEMON_NODE_CPU_ENGINE_BACKEND_H_

#include <memory>
#include <string>

#include "daemon/comm/host_transport.h"
#include "daemon/memory/private_allocator.h"
#include "daemon/memory/shm_allocator.h"
#include "daemon/node/engine_backend.h"

namespace shardd::node {

// The CPU backend: what trainers map lives in shared-memory segments
// (mode 0600) in one directory, the engine's private state in huge-page
// anonymous memory, the math is HostEngineMath and the communicators
// CreateHostCollective's: shared memory for a group on this host, Gloo over
// TCP otherwise, as `transport` says. Thread-safe.
class CpuEngineBackend : public EngineBackend {
 public:
  // Segments are created in `shm_dir` named "<shm_prefix>.<n>.<what>".
  CpuEngineBackend(std::string shm_dir, std::string shm_prefix,
                   comm::TransportMode transport = comm::TransportMode::kAuto);

  std::string name() const override { return "cpu"; }
  memory::BufferAllocator& shared() override { return shared_; }
  memory::BufferAllocator& private_memory() override { return private_; }
  std::shared_ptr<EngineMath> math() override;
  absl::StatusOr<std::unique_ptr<comm::Collective>> MakeCollective(
      const GroupSpec& spec, comm::Store& store) override;

 private:
  memory::ShmAllocator shared_;
  memory::PrivateAllocator private_;
  const comm::TransportMode transport_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CPU_ENGINE_BACKEND_H_
