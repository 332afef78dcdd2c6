#include "daemon/node/testing/host_device_init_reader.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"

namespace shardd::node::testing {

std::string HostDeviceInitReader::Add(std::string bytes) {
  absl::MutexLock lock(&mu_);
  std::string handle(core::CudaIpcSource::kCudaIpcHandleBytes, '\0');
  const std::string id = absl::StrCat("host-allocation-", allocations_.size());
  std::memcpy(handle.data(), id.data(), id.size());
  allocations_[handle] = std::move(bytes);
  return handle;
}

void HostDeviceInitReader::Remove(const std::string& handle) {
  absl::MutexLock lock(&mu_);
  allocations_.erase(handle);
}

absl::StatusOr<const std::string*> HostDeviceInitReader::Find(
    const core::CudaIpcSource& source, absl::string_view field) const {
  auto it = allocations_.find(source.mem_handle);
  if (it == allocations_.end()) {
    return absl::NotFoundError(
        absl::StrCat(field, ".mem_handle: no such allocation"));
  }
  const int64_t size = static_cast<int64_t>(it->second.size());
  if (source.byte_offset < 0 || source.byte_length < 0 ||
      source.byte_offset > size - source.byte_length) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": range outside the allocation"));
  }
  return &it->second;
}

absl::StatusOr<uint32_t> HostDeviceInitReader::Checksum(
    const core::CudaIpcSource& source, absl::string_view field) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const std::string*> bytes = Find(source, field);
  if (!bytes.ok()) return bytes.status();
  uint32_t crc = 0;
  for (int64_t at = 0; at < source.byte_length; at += kWindowBytes) {
    const int64_t length = std::min(kWindowBytes, source.byte_length - at);
    const int64_t begin = source.byte_offset + at;
    reads_.emplace_back(begin, begin + length);
    crc = core::Crc32cExtend(crc, (*bytes)->data() + begin,
                             static_cast<size_t>(length));
  }
  return crc;
}

absl::Status HostDeviceInitReader::Read(const core::CudaIpcSource& source,
                                        core::DType dtype,
                                        int64_t first_element, int64_t n,
                                        float* out, absl::string_view field) {
  if (absl::Status s = CheckElements(source, dtype, first_element, n, field);
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  absl::StatusOr<const std::string*> bytes = Find(source, field);
  if (!bytes.ok()) return bytes.status();
  const int64_t size = core::DTypeSize(dtype);
  const int64_t window_elements = kWindowBytes / size;
  for (int64_t done = 0; done < n; done += window_elements) {
    const int64_t count = std::min(window_elements, n - done);
    const int64_t begin = source.byte_offset + (first_element + done) * size;
    reads_.emplace_back(begin, begin + count * size);
    Widen((*bytes)->data() + begin, dtype, count, out + done);
  }
  return absl::OkStatus();
}

std::vector<std::pair<int64_t, int64_t>> HostDeviceInitReader::reads() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}

}  // namespace shardd::node::testing
