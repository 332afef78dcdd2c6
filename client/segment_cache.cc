#include "client/segment_cache.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::client {
namespace {

constexpr int64_t kFloatBytes = 4;

// Checks everything about `ref` that does not need the file, and returns
// the number of elements of each view (product of its shape).
absl::Status CheckRef(const v1::DataRef& ref, absl::string_view what) {
  if (ref.location_case() == v1::DataRef::kCudaIpc) {
    return absl::UnimplementedError(
        absl::StrCat(what,
                     ": CUDA IPC buffers are not supported by this "
                     "client (CPU trainer)"));
  }
  if (ref.location_case() == v1::DataRef::kInlineData) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": inline buffers have no mapping; ask for shared memory"));
  }
  if (ref.location_case() != v1::DataRef::kSharedMemory) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no location (shared_memory unset)"));
  }
  if (ref.dtype() != v1::DTYPE_FP32) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".dtype: only DTYPE_FP32 is supported, got ",
                     v1::DType_Name(ref.dtype())));
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
  if (shm.byte_offset() < 0 || shm.byte_length() < 0 ||
      shm.byte_offset() > shm.segment_bytes() ||
      shm.byte_length() > shm.segment_bytes() - shm.byte_offset()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".shared_memory: range [", shm.byte_offset(), ", +",
                     shm.byte_length(), ") does not fit the segment of ",
                     shm.segment_bytes(), " bytes"));
  }
  if (ref.byte_length() != shm.byte_length()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ".byte_length: ", ref.byte_length(),
        " differs from shared_memory.byte_length ", shm.byte_length()));
  }
  if (shm.byte_offset() % kFloatBytes != 0 ||
      shm.byte_length() % kFloatBytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ".shared_memory: range [", shm.byte_offset(), ", +",
                     shm.byte_length(), ") is not 4-byte aligned for fp32"));
  }
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
        v.byte_offset() > shm.byte_length() ||
        v.numel() > (shm.byte_length() - v.byte_offset()) / kFloatBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".byte_offset: tensor '", v.name(), "' at ", v.byte_offset(),
          " with ", v.numel(), " fp32 elements does not fit the range of ",
          shm.byte_length(), " bytes"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
BufferView<T> MakeView(const v1::DataRef& ref, T* base,
                       std::shared_ptr<const memory::SharedMemorySegment> seg) {
  BufferView<T> view;
  const v1::SharedMemoryRef& shm = ref.shared_memory();
  view.flat = absl::Span<T>(base + shm.byte_offset() / kFloatBytes,
                            shm.byte_length() / kFloatBytes);
  for (const v1::TensorView& v : ref.views()) {
    NamedTensor<T> t;
    t.name = v.name();
    t.shape.assign(v.shape().begin(), v.shape().end());
    t.values = view.flat.subspan(v.byte_offset() / kFloatBytes, v.numel());
    view.tensors.push_back(std::move(t));
  }
  view.keep_alive = std::move(seg);
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
  if (absl::Status s = CheckRef(ref, what); !s.ok()) return s;
  auto segment = Map(ref.shared_memory(), /*writable=*/false, what);
  if (!segment.ok()) return segment.status();
  const float* base = static_cast<const float*>((*segment)->data());
  return MakeView<const float>(ref, base, *segment);
}

absl::StatusOr<GradView> SegmentCache::WriteView(const v1::DataRef& ref,
                                                 absl::string_view what) {
  if (absl::Status s = CheckRef(ref, what); !s.ok()) return s;
  auto segment = Map(ref.shared_memory(), /*writable=*/true, what);
  if (!segment.ok()) return segment.status();
  float* base = static_cast<float*>((*segment)->mutable_data());
  return MakeView<float>(ref, base, *segment);
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

}  // namespace shardd::client
