#include "daemon/node/cuda/cuda_engine_backend.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/comm/nccl/nccl_collective.h"
#include "daemon/comm/nccl/nccl_kernels.h"
#include "daemon/memory/device_probe.h"
#include "daemon/node/group_spec.h"

namespace shardd::node {

absl::StatusOr<std::shared_ptr<CudaEngineBackend>> CudaEngineBackend::Create(
    int device, comm::nccl::ReductionOrder order) {
  absl::StatusOr<std::shared_ptr<CudaEngineMath>> math =
      CudaEngineMath::Create(device);
  if (!math.ok()) return math.status();
  // The communicators' conversion kernels: loaded now, not at their first
  // launch in the middle of a step (which would wait for the device).
  if (cudaError_t e =
          static_cast<cudaError_t>(comm::nccl::cuda::PreloadKernels());
      e != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat("loading the NCCL backend's kernels on cuda:", device,
                     ": ", cudaGetErrorName(e)));
  }
  char bus_id[32] = {};  // "0000:3b:00.0" fits in 13.
  if (cudaError_t e = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device);
      e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaDeviceGetPCIBusId(", device,
                                            "): ", cudaGetErrorName(e)));
  }
  return std::shared_ptr<CudaEngineBackend>(
      new CudaEngineBackend(device, order, bus_id, *std::move(math)));
}

CudaEngineBackend::CudaEngineBackend(int device,
                                     comm::nccl::ReductionOrder order,
                                     std::string pci_bus_id,
                                     std::shared_ptr<CudaEngineMath> math)
    : device_(device),
      order_(order),
      pci_bus_id_(std::move(pci_bus_id)),
      shared_(device, /*exportable=*/true),
      private_(device, /*exportable=*/false),
      math_(std::move(math)) {}

core::CommScratch CudaEngineBackend::comm_scratch() const {
  return order_ == comm::nccl::ReductionOrder::kFixed
             ? core::CommScratch::kNcclFixedOrder
             : core::CommScratch::kNcclNative;
}

std::optional<EngineBackend::DeviceMemory> CudaEngineBackend::device_memory()
    const {
  absl::StatusOr<memory::DeviceMemoryInfo> info =
      memory::ProbeDeviceMemory(device_);
  if (!info.ok()) return std::nullopt;
  return DeviceMemory{info->free_bytes, info->total_bytes};
}

std::string CudaEngineBackend::name() const {
  return absl::StrCat("cuda:", device_);
}

absl::StatusOr<std::unique_ptr<comm::Collective>>
CudaEngineBackend::MakeCollective(const GroupSpec& spec, comm::Store& store) {
  comm::nccl::NcclCollectiveOptions o;
  o.rank = spec.rank;
  o.size = spec.size;
  o.epoch = spec.epoch;
  o.group = NcclGroupName(spec.group);
  o.job_ranks = spec.job_ranks;
  o.cuda_device = device_;
  o.connect_timeout = spec.connect_timeout;
  o.default_op_timeout = spec.default_op_timeout;
  o.reduction_order = order_;
  return comm::nccl::CreateNcclCollective(o, store);
}

}  // namespace shardd::node
