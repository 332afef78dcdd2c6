#ifndef SHARDD_CLIENT_CUDA_IPC_INIT_H_
#define SHARDD_CLIENT_CUDA_IPC_INIT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "shardd/v1/common.pb.h"

namespace shardd::client {

// Turns a GPU trainer's own device buffer into a TensorInit (cuda_ipc) for
// RegisterModel, so that its initial weights reach the daemons without a
// copy to host memory on its side: each daemon (on a GPU) opens the handle
// and copies only its shard's elements.
//
// `base` must be the start of a cudaMalloc allocation (cudaIpcGetMemHandle
// exports whole allocations, and the daemon adds byte_offset to the start
// of the allocation it opens): a pointer into the middle of one or managed
// memory is INVALID_ARGUMENT; memory cudaIpcGetMemHandle cannot export
// (cudaMallocAsync pools) is INTERNAL. PyTorch's caching allocator hands
// out blocks inside larger cudaMalloc segments: export the segment's start
// and give the tensor's place in it as byte_offset.
// The allocation's size comes from the driver (cuMemGetAddressRange).
//
// The caller must have finished writing the values (e.g.
// cudaDeviceSynchronize) before RegisterModel, and must keep the allocation
// unchanged until RegisterModel returns. The calling thread's current
// context is left as it was. Stateless; thread-safe. --config=cuda only.
class CudaIpcInit {
 public:
  // INVALID_ARGUMENT naming the argument for a null or non-base `base`, a
  // negative range or one outside the allocation; INTERNAL with CUDA's
  // error when the handle cannot be made.
  static absl::StatusOr<v1::TensorInit> Export(const void* base,
                                               int64_t byte_offset,
                                               int64_t byte_length);
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_CUDA_IPC_INIT_H_
