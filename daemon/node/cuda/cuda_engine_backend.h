#ifndef SHARDD_DAEMON_NODE_CUDA_CUDA_ENGINE_BACKEND_H_
#define SHARDD_DAEMON_NODE_CUDA_CUDA_ENGINE_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/comm/nccl/nccl_plan.h"
#include "daemon/memory/cuda_device_allocator.h"
#include "daemon/node/cuda/cuda_engine_math.h"
#include "daemon/node/engine_backend.h"

namespace shardd::node {

// The GPU backend of one device: what trainers map is device memory
// exported by CUDA IPC (Gather and GradientSlot replies carry CudaIpcRefs),
// the engine's private state is device memory too, the math is
// CudaEngineMath and the communicators NCCL's (the group "shard/0" becomes
// NCCL's group "shard.0"). Built only with --config=cuda. Thread-safe.
class CudaEngineBackend : public EngineBackend {
 public:
  // Binds to `device`; INTERNAL/FAILED_PRECONDITION when it cannot be used.
  // Its NCCL communicators reduce in `order` (nccl_plan.h).
  static absl::StatusOr<std::shared_ptr<CudaEngineBackend>> Create(
      int device,
      comm::nccl::ReductionOrder order = comm::nccl::ReductionOrder::kFixed);

  std::string name() const override;
  memory::BufferAllocator& shared() override { return shared_; }
  memory::BufferAllocator& private_memory() override { return private_; }
  std::shared_ptr<EngineMath> math() override { return math_; }
  std::string pci_bus_id() const override { return pci_bus_id_; }
  core::CommScratch comm_scratch() const override;
  std::optional<DeviceMemory> device_memory() const override;
  absl::StatusOr<std::unique_ptr<comm::Collective>> MakeCollective(
      const GroupSpec& spec, comm::Store& store) override;

 private:
  CudaEngineBackend(int device, comm::nccl::ReductionOrder order,
                    std::string pci_bus_id,
                    std::shared_ptr<CudaEngineMath> math);

  const int device_;
  const comm::nccl::ReductionOrder order_;
  const std::string pci_bus_id_;
  memory::CudaDeviceAllocator shared_;
  memory::CudaDeviceAllocator private_;
  const std::shared_ptr<CudaEngineMath> math_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CUDA_CUDA_ENGINE_BACKEND_H_
