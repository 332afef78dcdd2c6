#ifndef SHARDD_DAEMON_NODE_DEVICE_INIT_READER_H_
#define SHARDD_DAEMON_NODE_DEVICE_INIT_READER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/dtype.h"
#include "daemon/core/tensor_init.h"

namespace shardd::node {

// Reads the initial values a trainer left in one of its own device buffers
// (proto TensorInit.cuda_ipc, core::InitKind::kCudaIpc), as
// SharedMemoryInitReader reads a trainer's shared-memory file: a
// registration checksums the whole range once (ranks agree on a digest,
// never on the values; ModelDigest) and then reads only its own shard's
// elements (InitMaterializer), through at most kWindowBytes of host
// staging at a time.
//
// An interface so that ModelDigest and InitMaterializer do not depend on
// CUDA: cuda/cuda_ipc_init_reader.h is the real one (CUDA builds),
// DeviceInitSupport::OfThisBuild() picks the one a daemon uses, and tests
// on a machine without a GPU give a host-memory stand-in
// (testing/host_device_init_reader.h).
//
// Implementations are thread-safe and keep nothing they are given.
class DeviceInitReader {
 public:
  // Largest range staged in host memory at a time (as
  // SharedMemoryInitReader::kWindowBytes, within the host staging every
  // engine plan counts).
  static constexpr int64_t kWindowBytes = int64_t{16} << 20;

  virtual ~DeviceInitReader() = default;

  // CRC-32C (core/crc32c.h) of the source's byte range, equal to Crc32c of
  // the same bytes sent as InlineValues or in shared memory. `field` names
  // the init in messages ("model.units[0].tensors[1].init.cuda_ipc").
  virtual absl::StatusOr<uint32_t> Checksum(const core::CudaIpcSource& source,
                                            absl::string_view field) = 0;

  // Elements [first_element, first_element + n) of the values, encoded as
  // `dtype` (little-endian, row-major), widened to fp32 into out[0, n).
  // INVALID_ARGUMENT for a range outside the source's byte_length; other
  // errors as Checksum.
  virtual absl::Status Read(const core::CudaIpcSource& source,
                            core::DType dtype, int64_t first_element, int64_t n,
                            float* out, absl::string_view field) = 0;

 protected:
  // For implementations. OK when [first_element, first_element + n) lies
  // within the source's byte_length in `dtype`, else INVALID_ARGUMENT
  // naming `field`.
  static absl::Status CheckElements(const core::CudaIpcSource& source,
                                    core::DType dtype, int64_t first_element,
                                    int64_t n, absl::string_view field);
  // count elements encoded as `dtype` at `bytes` -> fp32 at out (exact).
  static void Widen(const char* bytes, core::DType dtype, int64_t count,
                    float* out);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_DEVICE_INIT_READER_H_
