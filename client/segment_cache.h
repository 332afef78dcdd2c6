#ifndef SHARDD_CLIENT_SEGMENT_CACHE_H_
#define SHARDD_CLIENT_SEGMENT_CACHE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/memory/shared_memory_segment.h"
#ifdef SHARDD_WITH_CUDA
#include "client/cuda_ipc_buffers.h"
#endif
#include "shardd/v1/common.pb.h"

namespace shardd::client {

// One tensor inside a resolved buffer: its name, shape and elements.
template <typename T>
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  absl::Span<T> values;
};

// A buffer named by a DataRef, resolved to fp32 elements in this process.
// `flat` is the DataRef's whole range (padding included); `tensors` are its
// views in the unit's tensor order. The spans point into a mapping the
// SegmentCache keeps alive (`keep_alive`), so a view stays valid after the
// cache is cleared; the bytes themselves belong to the daemon and are only
// meaningful until the matching Release.
template <typename T>
struct BufferView {
  absl::Span<T> flat;
  std::vector<NamedTensor<T>> tensors;
  // The mapping (or, for a GPU buffer, the host copy) the spans point into.
  std::shared_ptr<const void> keep_alive;
  // A GPU buffer (CUDA IPC, CUDA builds only): the range's device address,
  // for a trainer that computes on the GPU; `flat` is then a host copy
  // (parameters: taken at Gather; gradient slot: uploaded by Flush()).
  // Null for shared memory, where `flat` is the daemon's memory itself.
  const void* device_data = nullptr;
  std::function<absl::Status()> flush;

  // Makes what was written into `flat` the daemon's (a no-op for shared
  // memory): call it before ReduceGrad.
  absl::Status Flush() const { return flush ? flush() : absl::OkStatus(); }

  // The tensor called `name`, or an empty span if there is none.
  absl::Span<T> tensor(absl::string_view name) const {
    for (const auto& t : tensors) {
      if (t.name == name) return t.values;
    }
    return {};
  }
};

// Who writes a gradient slot that lives on a GPU (CUDA IPC):
// - kHost: the trainer computes on the host and writes `flat`, a zeroed host
//   copy; Flush() uploads it into the slot.
// - kDevice: the trainer writes `device_data` with its own kernels or
//   copies; there is no host copy (`flat` and the tensors' values are
//   empty) and Flush() waits until the device has finished every write of
//   this process, so that the daemon, reading from another process, sees
//   them. Uploading a host copy here would overwrite the trainer's
//   gradients with zeros (issue #28).
// For shared memory (a daemon on the CPU) `flat` is the slot itself and
// both are the same.
enum class GradWriter { kHost, kDevice };

// What Flush() of a GPU gradient slot does for `writer`. Pure; the logic
// the CUDA build follows, tested on any machine.
struct GradFlushAction {
  bool upload_host_copy = false;
  bool synchronize_device = false;
};
GradFlushAction GradFlushActionFor(GradWriter writer);

// Gathered parameters (read-only) and the gradient slot (written by the
// trainer before ReduceGrad).
using UnitView = BufferView<const float>;
using GradView = BufferView<float>;

// Maps the shared-memory segments that a daemon names in its replies, once
// per (path, generation, access), and turns DataRefs into typed views.
//
// Validation (nothing is mapped when it fails): fp32 DataRefs in shared
// memory, or on a GPU by CUDA IPC (a CUDA build opens the handle and keeps
// a host copy, see BufferView::device_data; a CPU build answers
// UNIMPLEMENTED after checking the ref), are resolved (inline_data:
// UNIMPLEMENTED; another dtype: INVALID_ARGUMENT); the range [byte_offset,
// byte_offset + byte_length) must lie inside segment_bytes (the CUDA
// allocation_bytes), agree with DataRef.byte_length and be 4-byte aligned, and
// every tensor view must be fp32 and lie inside the range with numel equal to
// the product of its shape (INVALID_ARGUMENT naming the field, e.g.
// "params.views[1].byte_offset"). A file shorter than the segment_bytes it was
// announced with is DATA_LOSS; a file that does not exist NOT_FOUND.
//
// A new generation or segment size for a path replaces the cached mapping
// (a re-registration may recreate the file); views handed out before keep
// their old mapping alive.
//
// Thread-safe (one mutex around the cache; mapping happens under it, so two
// threads never map the same segment twice). Owns its mappings, shared with
// the views it returns.
class SegmentCache {
 public:
  SegmentCache() = default;
  SegmentCache(const SegmentCache&) = delete;
  SegmentCache& operator=(const SegmentCache&) = delete;

  // `what` prefixes field names in errors ("params", "grad_buffer").
  absl::StatusOr<UnitView> ReadView(const v1::DataRef& ref,
                                    absl::string_view what);
  absl::StatusOr<GradView> WriteView(const v1::DataRef& ref,
                                     absl::string_view what,
                                     GradWriter writer = GradWriter::kHost);

  // Segments mapped now.
  int mapped_segments() const;
  // Times a segment was mapped (a cache miss).
  int64_t map_count() const;
  // Drops every cached mapping (views handed out keep theirs).
  void Clear();
  // Closes the daemon's GPU buffers opened in this process (CUDA builds;
  // nothing to do otherwise): TrainerClient does it before registering a
  // model again, so that the trainer never keeps a replaced or dead
  // daemon's device memory alive. Views handed out keep their host copies;
  // their device_data is invalid afterwards. Shared-memory mappings stay.
  // The first error closing a handle (the others are still closed).
  absl::Status ForgetDeviceBuffers();

 private:
  struct Entry {
    int64_t generation = 0;
    int64_t segment_bytes = 0;
    std::shared_ptr<memory::SharedMemorySegment> segment;
  };
  using Key = std::tuple<std::string, bool>;  // (path, writable)

  absl::StatusOr<std::shared_ptr<memory::SharedMemorySegment>> Map(
      const v1::SharedMemoryRef& ref, bool writable, absl::string_view what);

  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  int64_t map_count_ = 0;
#ifdef SHARDD_WITH_CUDA
  CudaIpcBuffers cuda_;
#endif
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_SEGMENT_CACHE_H_
