#include "daemon/node/init_materializer.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/core/tensor_init.h"
#include "daemon/node/device_init_support.h"
#include "daemon/node/shared_memory_init_reader.h"

namespace shardd::node {

InitMaterializer::InitMaterializer(const core::ModelConfig& model,
                                   const std::vector<core::UnitLayout>& layouts)
    : InitMaterializer(model, layouts, DeviceInitSupport::OfThisBuild()) {}

InitMaterializer::InitMaterializer(const core::ModelConfig& model,
                                   const std::vector<core::UnitLayout>& layouts,
                                   DeviceInitReader& device)
    : model_(model), layouts_(layouts), device_(device) {}

void InitMaterializer::Fill(int unit, int64_t offset, float* out, int64_t n) {
  std::fill(out, out + n, 0.0f);  // Padding stays zero.
  if (unit < 0 || static_cast<size_t>(unit) >= layouts_.size() ||
      static_cast<size_t>(unit) >= model_.units.size()) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("init of unit ", unit, ": no such unit"));
    }
    return;
  }
  const std::vector<core::TensorView>& views = layouts_[unit].tensors();
  for (size_t t = 0; t < views.size(); ++t) {
    const int64_t lo = std::max(offset, views[t].offset);
    const int64_t hi = std::min(offset + n, views[t].offset + views[t].numel);
    if (lo >= hi) continue;
    const core::TensorConfig& tensor = model_.units[unit].tensors[t];
    const int64_t first = lo - views[t].offset;
    float* dest = out + (lo - offset);
    absl::Status s;
    if (tensor.init.kind == core::InitKind::kSharedMemory) {
      s = SharedMemoryInitReader::Read(
          tensor.init.shared_memory, tensor.spec.dtype, first, hi - lo, dest,
          absl::StrCat("model.units[", unit, "].tensors[", t,
                       "].init.shared_memory"));
    } else if (tensor.init.kind == core::InitKind::kCudaIpc) {
      s = device_.Read(tensor.init.cuda_ipc, tensor.spec.dtype, first, hi - lo,
                       dest,
                       absl::StrCat("model.units[", unit, "].tensors[", t,
                                    "].init.cuda_ipc"));
    } else {
      s = core::TensorInit::Fill(tensor.init, views[t].numel, first, dest,
                                 hi - lo);
      if (!s.ok()) {
        s = absl::Status(s.code(),
                         absl::StrCat("model.units[", unit, "].tensors[", t,
                                      "].init.", s.message()));
      }
    }
    if (!s.ok() && status_.ok()) status_ = s;
  }
}

}  // namespace shardd::node
