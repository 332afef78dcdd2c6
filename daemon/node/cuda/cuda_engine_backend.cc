#include "daemon/node/cuda/cuda_engine_backend.h"

#include "absl/strings/str_cat.h"
#include "daemon/comm/nccl/nccl_collective.h"
#include "daemon/node/group_spec.h"

namespace shardd::node {

absl::StatusOr<std::shared_ptr<CudaEngineBackend>> CudaEngineBackend::Create(
    int device, comm::nccl::ReductionOrder order) {
  absl::StatusOr<std::shared_ptr<CudaEngineMath>> math =
      CudaEngineMath::Create(device);
  if (!math.ok()) return math.status();
  return std::shared_ptr<CudaEngineBackend>(
      new CudaEngineBackend(device, order, *std::move(math)));
}

CudaEngineBackend::CudaEngineBackend(int device,
                                     comm::nccl::ReductionOrder order,
                                     std::shared_ptr<CudaEngineMath> math)
    : device_(device),
      order_(order),
      shared_(device, /*exportable=*/true),
      private_(device, /*exportable=*/false),
      math_(std::move(math)) {}

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
  o.cuda_device = device_;
  o.connect_timeout = spec.connect_timeout;
  o.default_op_timeout = spec.default_op_timeout;
  o.reduction_order = order_;
  return comm::nccl::CreateNcclCollective(o, store);
}

}  // namespace shardd::node
