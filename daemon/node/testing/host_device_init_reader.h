#ifndef SHARDD_DAEMON_NODE_TESTING_HOST_DEVICE_INIT_READER_H_
#define SHARDD_DAEMON_NODE_TESTING_HOST_DEVICE_INIT_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/core/dtype.h"
#include "daemon/core/tensor_init.h"
#include "daemon/node/device_init_reader.h"

namespace shardd::node::testing {

// A DeviceInitReader over host memory, for tests on a machine without a
// GPU: "allocations" are byte strings registered under a 64-byte handle,
// read a window of at most kWindowBytes at a time like the CUDA reader
// does. It records every byte range it reads, so that tests can check that
// a rank read only its slice.
//
// Thread-safe. Keeps copies of the allocations it is given.
class HostDeviceInitReader final : public DeviceInitReader {
 public:
  // A new allocation holding `bytes`; returns its handle (64 bytes).
  std::string Add(std::string bytes);
  // Forgets an allocation (as if the trainer freed it).
  void Remove(const std::string& handle);

  // NOT_FOUND for an unknown handle (the CUDA reader's open fails).
  absl::StatusOr<uint32_t> Checksum(const core::CudaIpcSource& source,
                                    absl::string_view field) override;
  absl::Status Read(const core::CudaIpcSource& source, core::DType dtype,
                    int64_t first_element, int64_t n, float* out,
                    absl::string_view field) override;

  // [begin, end) byte ranges of allocations read so far, in order, one per
  // window.
  std::vector<std::pair<int64_t, int64_t>> reads() const;

 private:
  absl::StatusOr<const std::string*> Find(const core::CudaIpcSource& source,
                                          absl::string_view field) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, std::string> allocations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<int64_t, int64_t>> reads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::node::testing

#endif  // SHARDD_DAEMON_NODE_TESTING_HOST_DEVICE_INIT_READER_H_
