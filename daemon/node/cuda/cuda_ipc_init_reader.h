#ifndef SHARDD_DAEMON_NODE_CUDA_CUDA_IPC_INIT_READER_H_
#define SHARDD_DAEMON_NODE_CUDA_CUDA_IPC_INIT_READER_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/core/dtype.h"
#include "daemon/core/tensor_init.h"
#include "daemon/node/device_init_reader.h"

namespace shardd::node {

// The DeviceInitReader of a CUDA build: reads a trainer's cudaMalloc'd
// buffer through its CUDA IPC handle. Each call finds the buffer's GPU by
// PCI bus id (the trainer may number the GPUs differently; else its
// ordinal), makes it current for the call only (core::ScopedCudaDevice, so
// the calling thread gets back whatever context it had), opens the handle
// (cudaIpcOpenMemHandle), copies the range it needs device -> host with
// cudaMemcpy, and closes the handle before it returns, on every path. A
// registration makes few calls (one checksum per tensor, one read per
// tensor and host staging chunk), and holding no handle between them means
// that a registration that fails half-way leaves none open, so the
// trainer's allocation is never pinned by the daemon.
//
// Host memory: fp32 slices are copied straight into the caller's output;
// checksums and bf16/fp16 slices go through a staging buffer of at most
// kWindowBytes allocated for the call.
//
// Stateless; thread-safe. Built only with --config=cuda.
class CudaIpcInitReader final : public DeviceInitReader {
 public:
  // FAILED_PRECONDITION when the GPU is not visible to this daemon or the
  // handle does not open (a freed or foreign allocation), INTERNAL for a
  // failed copy; each message names `field` and CUDA's error.
  absl::StatusOr<uint32_t> Checksum(const core::CudaIpcSource& source,
                                    absl::string_view field) override;
  absl::Status Read(const core::CudaIpcSource& source, core::DType dtype,
                    int64_t first_element, int64_t n, float* out,
                    absl::string_view field) override;

 private:
  // Opens the source's allocation and calls use(device address of
  // byte_offset) with its device current; closes it afterwards.
  static absl::Status WithMapping(
      const core::CudaIpcSource& source, absl::string_view field,
      const std::function<absl::Status(const char* range)>& use);
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CUDA_CUDA_IPC_INIT_READER_H_
