#ifndef SHARDD_DAEMON_NODE_DEVICE_INIT_SUPPORT_H_
#define SHARDD_DAEMON_NODE_DEVICE_INIT_SUPPORT_H_

#include "absl/status/status.h"
#include "daemon/core/model_config.h"
#include "daemon/node/device_init_reader.h"

namespace shardd::node {

// Which inits from a trainer's device buffers (TensorInit.cuda_ipc) this
// daemon can take: the DeviceInitReader of this build (the CUDA one with
// --config=cuda; without CUDA one that answers FAILED_PRECONDITION "needs a
// CUDA build"), and whether the daemon's backend takes them at all (only a
// daemon on a GPU does: a trainer that shares device memory has a GPU
// daemon beside it, and a CPU daemon's trainer hands over shared memory).
//
// Stateless; thread-safe.
class DeviceInitSupport {
 public:
  // The reader ModelDigest and InitMaterializer use unless given another.
  // Lives for the process.
  static DeviceInitReader& OfThisBuild();

  // OK unless `model` has a cuda_ipc init and the daemon keeps its shards
  // in host memory (`device_memory` false): then FAILED_PRECONDITION
  // naming the first such init ("model.units[0].tensors[1].init.cuda_ipc").
  static absl::Status CheckBackend(const core::ModelConfig& model,
                                   bool device_memory);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_DEVICE_INIT_SUPPORT_H_
