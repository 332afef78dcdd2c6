#include "daemon/node/device_init_support.h"

#include "absl/strings/str_cat.h"
#ifdef SHARDD_WITH_CUDA
#include "daemon/node/cuda/cuda_ipc_init_reader.h"
#endif

namespace shardd::node {
namespace {

#ifndef SHARDD_WITH_CUDA
// A build without CUDA cannot open a CUDA IPC handle.
class NoCudaInitReader final : public DeviceInitReader {
 public:
  absl::StatusOr<uint32_t> Checksum(const core::CudaIpcSource&,
                                    absl::string_view field) override {
    return Refusal(field);
  }
  absl::Status Read(const core::CudaIpcSource&, core::DType, int64_t, int64_t,
                    float*, absl::string_view field) override {
    return Refusal(field);
  }

 private:
  static absl::Status Refusal(absl::string_view field) {
    return absl::FailedPreconditionError(
        absl::StrCat(field,
                     ": reading a trainer's device buffer needs a CUDA build "
                     "of shardd (bazel build --config=cuda) on a GPU"));
  }
};
#endif

}  // namespace

DeviceInitReader& DeviceInitSupport::OfThisBuild() {
#ifdef SHARDD_WITH_CUDA
  static CudaIpcInitReader* reader = new CudaIpcInitReader();
#else
  static NoCudaInitReader* reader = new NoCudaInitReader();
#endif
  return *reader;
}

absl::Status DeviceInitSupport::CheckBackend(const core::ModelConfig& model,
                                             bool device_memory) {
  if (device_memory) return absl::OkStatus();
  for (size_t u = 0; u < model.units.size(); ++u) {
    for (size_t t = 0; t < model.units[u].tensors.size(); ++t) {
      if (model.units[u].tensors[t].init.kind != core::InitKind::kCudaIpc) {
        continue;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "model.units[", u, "].tensors[", t,
          "].init.cuda_ipc: an init from a trainer's device buffer needs a "
          "daemon on a GPU (--device=cuda:N); this one keeps its shards in "
          "host memory: pass the values in shared memory"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardd::node
