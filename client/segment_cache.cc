#include "client/segment_cache.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::client {
namespace {

constexpr int64_t kFloatBytes = 4;

// The range a DataRef names inside its buffer (a segment or a CUDA
// allocation).
struct Range {
  int64_t offset = 0;
  int64_t length = 0;
};

// Every tensor view inside the range, fp32, numel = the shape's product.
absl::Status CheckViews(const v1::DataRef& ref, int64_t range_bytes,
                        absl::string_view what) {
  for (int i = 0; i < ref.views_size(); ++i) {
    const v1::TensorView& v = ref.views(i);
    const std::string field = absl::StrCat(what, ".views[", i, "]");
    if (v.dtype() != v1::DTYPE_FP32) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".dtype: only DTYPE_FP32 is supported, got ",
                       v1::DType_Name(v.dtype())));
    }
    int64_t product = 1;
    for (int d = 0; d < v.shape_size(); ++d) {
      if (v.shape(d) < 1 ||
          product > std::numeric_limits<int64_t>::max() / v.shape(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".shape[", d, "]: bad dim ", v.shape(d)));
      }
      product *= v.shape(d);
    }
    if (v.numel() != product) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".numel: ", v.numel(), " is not the shape's ", product));
    }
    if (v.byte_offset() < 0 || v.byte_offset() % kFloatBytes != 0 ||
        v.byte_offset() > range_bytes ||
        v.numel() > (range_bytes - v.byte_offset()) / kFloatBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".byte_offset: tensor '", v.name(), "' at ", v.byte_offset(),
          " with ", v.numel(), " fp32 elements does not fit the range of ",
          range_bytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

// [offset, +length) inside a buffer of `capacity` bytes, agreeing with
// ref.byte_length and 4-byte aligned; `field` names the location.
absl::Status CheckRange(const v1::DataRef& ref, int64_t offset, int64_t length,
                        int64_t capacity, absl::string_view field,
                        absl::string_view buffer, absl::string_view what) {
  if (offset < 0 || length < 0 || offset > capacity ||
      length > capacity - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".", field, ": range [", offset, ", +", length,
        ") does not fit the ", buffer, " of ", capacity, " bytes"));
  }
  if (ref.byte_length() != length) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".byte_length: ", ref.byte_length(),
                     " differs from ", field, ".byte_length ", length));
  }
  if (offset % kFloatBytes != 0 || length % kFloatBytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".", field, ": range [", offset, ", +", length,
                     ") is not 4-byte aligned for fp32"));
  }
  return CheckViews(ref, length, what);
}

// Checks everything about `ref` that does not need the buffer itself.
absl::StatusOr<Range> CheckRef(const v1::DataRef& ref, absl::string_view what) {
  if (ref.location_case() == v1::DataRef::kInlineData) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": inline buffers have no mapping; ask for shared memory"));
  }
  if (ref.location_case() != v1::DataRef::kSharedMemory &&
      ref.location_case() != v1::DataRef::kCudaIpc) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no location (shared_memory and cuda_ipc unset)"));
  }
  if (ref.dtype() != v1::DTYPE_FP32) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".dtype: only DTYPE_FP32 is supported, got ",
                     v1::DType_Name(ref.dtype())));
  }
  if (ref.location_case() == v1::DataRef::kCudaIpc) {
    const v1::CudaIpcRef& cuda = ref.cuda_ipc();
    if (cuda.mem_handle().size() != 64) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".cuda_ipc.mem_handle: must be 64 bytes, got ",
                       cuda.mem_handle().size()));
    }
    if (cuda.device_ordinal() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ".cuda_ipc.device_ordinal: must be >= 0, got ",
                       cuda.device_ordinal()));
    }
    if (absl::Status s =
            CheckRange(ref, cuda.byte_offset(), cuda.byte_length(),
                       cuda.allocation_bytes(), "cuda_ipc", "allocation", what);
        !s.ok()) {
      return s;
    }
    return Range{cuda.byte_offset(), cuda.byte_length()};
  }
  const v1::SharedMemoryRef& shm = ref.shared_memory();
  if (shm.path().empty() || shm.path()[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".shared_memory.path: must be absolute, got '", shm.path(), "'"));
  }
  if (shm.segment_bytes() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".shared_memory.segment_bytes: must be >= 1, got ",
                     shm.segment_bytes()));
  }
  if (absl::Status s =
          CheckRange(ref, shm.byte_offset(), shm.byte_length(),
                     shm.segment_bytes(), "shared_memory", "segment", what);
      !s.ok()) {
    return s;
  }
  return Range{shm.byte_offset(), shm.byte_length()};
}

// The view over `range` bytes at `start` (the range's first byte).
template <typename T>
BufferView<T> MakeView(const v1::DataRef& ref, T* start, int64_t range,
                       std::shared_ptr<const void> keep_alive) {
  BufferView<T> view;
  view.flat = absl::Span<T>(start, range / kFloatBytes);
  for (const v1::TensorView& v : ref.views()) {
    NamedTensor<T> t;
    t.name = v.name();
    t.shape.assign(v.shape().begin(), v.shape().end());
    // No host copy (a slot the device writes): names and shapes only.
    if (start != nullptr) {
      t.values = view.flat.subspan(v.byte_offset() / kFloatBytes, v.numel());
    }
    view.tensors.push_back(std::move(t));
  }
  view.keep_alive = std::move(keep_alive);
  return view;
}

}  // namespace

absl::StatusOr<std::shared_ptr<memory::SharedMemorySegment>> SegmentCache::Map(
    const v1::SharedMemoryRef& ref, bool writable, absl::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  Key key{ref.path(), writable};
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.generation == ref.generation() &&
      it->second.segment_bytes == ref.segment_bytes()) {
    return it->second.segment;
  }
  absl::StatusOr<memory::SharedMemorySegment> opened =
      memory::SharedMemorySegment::Open(
          ref.path(), ref.segment_bytes(),
          writable ? memory::SharedMemorySegment::Access::kReadWrite
                   : memory::SharedMemorySegment::Access::kReadOnly);
  if (!opened.ok()) {
    if (absl::IsFailedPrecondition(opened.status())) {
      // The file is shorter than the daemon said: the reply and the file
      // disagree.
      return absl::DataLossError(absl::StrCat(
          what, ".shared_memory: segment '", ref.path(), "' is shorter than ",
          ref.segment_bytes(), " bytes: ", opened.status().message()));
    }
    return absl::Status(
        opened.status().code(),
        absl::StrCat(what, ".shared_memory: ", opened.status().message()));
  }
  auto segment =
      std::make_shared<memory::SharedMemorySegment>(std::move(*opened));
  entries_[key] = Entry{ref.generation(), ref.segment_bytes(), segment};
  ++map_count_;
  return segment;
}

absl::StatusOr<UnitView> SegmentCache::ReadView(const v1::DataRef& ref,
                                                absl::string_view what) {
  absl::StatusOr<Range> range = CheckRef(ref, what);
  if (!range.ok()) return range.status();
  if (ref.has_cuda_ipc()) {
#ifdef SHARDD_WITH_CUDA
    // A host copy of the GPU range (a CPU trainer computes on the host; a
    // GPU trainer uses device_data).
    auto copy =
        std::make_shared<std::vector<float>>(range->length / kFloatBytes);
    if (absl::Status s = cuda_.Download(ref.cuda_ipc(), copy->data());
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat(what, ".cuda_ipc: ", s.message()));
    }
    absl::StatusOr<uint8_t*> device = cuda_.Open(ref.cuda_ipc());
    if (!device.ok()) {
      return absl::Status(
          device.status().code(),
          absl::StrCat(what, ".cuda_ipc: ", device.status().message()));
    }
    UnitView view =
        MakeView<const float>(ref, copy->data(), range->length, copy);
    view.device_data = *device;
    return view;
#else
    return absl::UnimplementedError(absl::StrCat(
        what,
        ": the daemon's buffers are on a GPU (CUDA IPC); this client "
        "was built without CUDA (bazel build --config=cuda)"));
#endif
  }
  auto segment = Map(ref.shared_memory(), /*writable=*/false, what);
  if (!segment.ok()) return segment.status();
  const float* base = static_cast<const float*>((*segment)->data());
  return MakeView<const float>(ref, base + range->offset / kFloatBytes,
                               range->length, *segment);
}

absl::StatusOr<GradView> SegmentCache::WriteView(const v1::DataRef& ref,
                                                 absl::string_view what,
                                                 GradWriter writer) {
  absl::StatusOr<Range> range = CheckRef(ref, what);
  if (!range.ok()) return range.status();
  // Shared memory: the host view is the slot itself, for either writer.
  (void)writer;
  if (ref.has_cuda_ipc()) {
#ifdef SHARDD_WITH_CUDA
    absl::StatusOr<uint8_t*> device = cuda_.Open(ref.cuda_ipc());
    if (!device.ok()) {
      return absl::Status(
          device.status().code(),
          absl::StrCat(what, ".cuda_ipc: ", device.status().message()));
    }
    const GradFlushAction action = GradFlushActionFor(writer);
    GradView view;
    if (action.upload_host_copy) {
      // Written on the host, uploaded into the GPU slot by Flush().
      auto staging = std::make_shared<std::vector<float>>(
          range->length / kFloatBytes, 0.0f);
      view = MakeView<float>(ref, staging->data(), range->length, staging);
      view.flush = [this, cuda = ref.cuda_ipc(), staging] {
        return cuda_.Upload(cuda, staging->data());
      };
    } else {
      // Written on the device: names and shapes only, no host copy.
      view = MakeView<float>(ref, nullptr, 0, nullptr);
      view.flush = [this, cuda = ref.cuda_ipc()] {
        return cuda_.Synchronize(cuda);
      };
    }
    view.device_data = *device;
    return view;
#else
    return absl::UnimplementedError(absl::StrCat(
        what,
        ": the daemon's buffers are on a GPU (CUDA IPC); this client "
        "was built without CUDA (bazel build --config=cuda)"));
#endif
  }
  auto segment = Map(ref.shared_memory(), /*writable=*/true, what);
  if (!segment.ok()) return segment.status();
  float* base = static_cast<float*>((*segment)->mutable_data());
  return MakeView<float>(ref, base + range->offset / kFloatBytes, range->length,
                         *segment);
}

int SegmentCache::mapped_segments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(entries_.size());
}

int64_t SegmentCache::map_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_count_;
}

void SegmentCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

absl::Status SegmentCache::ForgetDeviceBuffers() {
#ifdef SHARDD_WITH_CUDA
  return cuda_.CloseAll();  // Thread-safe on its own.
#else
  return absl::OkStatus();
#endif
}

GradFlushAction GradFlushActionFor(GradWriter writer) {
  GradFlushAction action;
  switch (writer) {
    case GradWriter::kHost:
      action.upload_host_copy = true;
      break;
    case GradWriter::kDevice:
      action.synchronize_device = true;
      break;
  }
  return action;
}

}  // namespace shardd::client
