#ifndef SHARDD_CLIENT_CUDA_IPC_BUFFERS_H_
#define SHARDD_CLIENT_CUDA_IPC_BUFFERS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shardd/v1/common.pb.h"

namespace shardd::client {

// The daemon's GPU buffers in this process: opens each CUDA IPC handle a
// reply names once (cudaIpcOpenMemHandle, cached by handle) and copies
// ranges of them to and from host memory. Built only with --config=cuda.
//
// Thread-safe. Handles stay open until CloseAll() or destruction
// (cudaIpcCloseMemHandle); a new handle for a new allocation is a new cache
// entry.
class CudaIpcBuffers {
 public:
  CudaIpcBuffers() = default;
  ~CudaIpcBuffers();
  CudaIpcBuffers(const CudaIpcBuffers&) = delete;
  CudaIpcBuffers& operator=(const CudaIpcBuffers&) = delete;

  // The device address of ref's range (validated by the caller). INTERNAL
  // with CUDA's error name when the handle cannot be opened.
  absl::StatusOr<uint8_t*> Open(const v1::CudaIpcRef& ref);
  // ref's range -> host, host -> ref's range.
  absl::Status Download(const v1::CudaIpcRef& ref, void* host);
  absl::Status Upload(const v1::CudaIpcRef& ref, const void* host);
  // Waits until ref's device has finished every write of this process (a
  // trainer that wrote the buffer with its own kernels), so that the
  // daemon, in another process, reads complete data.
  absl::Status Synchronize(const v1::CudaIpcRef& ref);
  // Closes every open handle. An open handle keeps the exporter's
  // allocation alive in the driver, so a trainer that outlives its daemon
  // (a recovery) would otherwise pin the dead daemon's buffers; and the
  // daemon frees what a trainer may still have mapped only when the model
  // is registered again. Device addresses handed out before are invalid
  // afterwards. Each handle is closed with its own device current; every
  // handle is dropped, and the first error is returned.
  absl::Status CloseAll();

 private:
  std::mutex mu_;
  struct Opened {
    uint8_t* base = nullptr;
    int device = -1;  // in this process's numbering
  };
  std::map<std::string, Opened> opened_;  // mem_handle -> mapping
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_CUDA_IPC_BUFFERS_H_
