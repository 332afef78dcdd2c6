#ifndef SHARDD_DAEMON_NODE_INIT_MATERIALIZER_H_
#define SHARDD_DAEMON_NODE_INIT_MATERIALIZER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/core/model_config.h"
#include "daemon/core/unit_layout.h"
#include "daemon/node/device_init_reader.h"

namespace shardd::node {

// Writes the initial values of any range of a unit's flat fp32 buffer: the
// ShardInitializer a first registration hands to StepEngine::Create, which
// asks only for this rank's shard (on a GPU, one host staging chunk of it
// at a time). Each tensor's overlap with the range comes from its init:
// computed (zeros, constant, normal, uniform), sliced from uploaded values,
// read from the trainer's shared-memory file through
// SharedMemoryInitReader, which maps only the slice asked for, a bounded
// window at a time, or copied from the trainer's device buffer (cuda_ipc)
// through a DeviceInitReader, which copies only the slice asked for.
// Padding is zero. So a daemon never materialises more of
// a model than its own shard (issue #18).
//
// Fill cannot fail through its signature (StepEngine's initializer returns
// nothing); the first error is kept and status() returns it, and the caller
// discards the engine when it is not OK.
//
// Not thread-safe (one engine creation uses it). Keeps references to the
// model, layouts and device reader, which must outlive it.
class InitMaterializer {
 public:
  // Device buffers are read by DeviceInitSupport::OfThisBuild().
  InitMaterializer(const core::ModelConfig& model,
                   const std::vector<core::UnitLayout>& layouts);
  // Device buffers are read by `device`.
  InitMaterializer(const core::ModelConfig& model,
                   const std::vector<core::UnitLayout>& layouts,
                   DeviceInitReader& device);

  // Elements [offset, offset + n) of unit `unit`'s flat buffer into
  // out[0, n).
  void Fill(int unit, int64_t offset, float* out, int64_t n);

  // OK, or the first error a Fill met (its message names the tensor).
  const absl::Status& status() const { return status_; }

 private:
  const core::ModelConfig& model_;
  const std::vector<core::UnitLayout>& layouts_;
  DeviceInitReader& device_;
  absl::Status status_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_INIT_MATERIALIZER_H_
