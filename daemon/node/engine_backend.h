#ifndef SHARDD_DAEMON_NODE_ENGINE_BACKEND_H_
#define SHARDD_DAEMON_NODE_ENGINE_BACKEND_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/comm/collective.h"
#include "daemon/comm/store.h"
#include "daemon/core/memory_plan.h"
#include "daemon/memory/byte_buffer.h"
#include "daemon/node/engine_math.h"
#include "daemon/node/group_spec.h"

namespace shardd::node {

// Where a daemon's step engine keeps its memory and how its communicators
// are made: the CPU (shared-memory segments for what trainers map,
// huge-page private memory for the rest, host math, Gloo) or a GPU (device
// memory exported by CUDA IPC, device math, NCCL). NodeManager asks it for
// the allocators and the math when it builds an engine, and for each
// epoch's communicators.
//
// Implementations are thread-safe. The manager borrows the allocators for
// its engines' lifetimes; the backend must outlive the manager.
class EngineBackend {
 public:
  virtual ~EngineBackend() = default;

  // "cpu", "cuda:0", ...: for logs and status.
  virtual std::string name() const = 0;
  // Buffers a trainer maps (gathered slots, the gradient slot).
  virtual memory::BufferAllocator& shared() = 0;
  // The engine's private buffers.
  virtual memory::BufferAllocator& private_memory() = 0;
  virtual std::shared_ptr<EngineMath> math() = 0;
  // The PCI bus id of the GPU the buffers live on ("0000:3b:00.0"), which
  // CudaIpcRefs carry so that a trainer whose CUDA_VISIBLE_DEVICES numbers
  // the GPUs differently finds it; empty for host memory.
  virtual std::string pci_bus_id() const { return ""; }
  // What device scratch this backend's communicators need for an engine's
  // operations (core/memory_plan.h): planned, admitted and reserved with
  // the engine. None for host backends.
  virtual core::CommScratch comm_scratch() const {
    return core::CommScratch::kNone;
  }
  // Free and total memory of the backend's device now, for memory reports;
  // nullopt for host memory or when it cannot be read.
  struct DeviceMemory {
    int64_t free_bytes = 0;
    int64_t total_bytes = 0;
  };
  virtual std::optional<DeviceMemory> device_memory() const {
    return std::nullopt;
  }
  // One group's communicator of one epoch, formed through `store`
  // (borrowed for the call).
  virtual absl::StatusOr<std::unique_ptr<comm::Collective>> MakeCollective(
      const GroupSpec& spec, comm::Store& store) = 0;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_ENGINE_BACKEND_H_
