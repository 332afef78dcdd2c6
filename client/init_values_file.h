#ifndef SHARDD_CLIENT_INIT_VALUES_FILE_H_
#define SHARDD_CLIENT_INIT_VALUES_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "shardd/v1/common.pb.h"

namespace shardd::client {

// A trainer's initial values in a file for TensorInit.shared_memory
// (normally under /dev/shm): the tensors' fp32 values one after another,
// each named by a SharedMemoryRef, so that a model of any size registers
// without its values travelling through gRPC; each daemon reads only its
// shard's slice (issue #18).
//
// The file is created new (O_EXCL) and removed when the object is destroyed
// (so it must outlive the RegisterModel calls that name it; a re-attaching
// registration no longer reads it). Movable, not copyable; not thread-safe.
class InitValuesFile {
 public:
  // Writes `tensors` to a new file `directory`/shardd-init-<pid>-<n>.
  // Errors: the directory's (ErrnoToStatus), disk full.
  static absl::StatusOr<InitValuesFile> Write(
      absl::string_view directory,
      const std::vector<absl::Span<const float>>& tensors);

  InitValuesFile(InitValuesFile&& other) noexcept;
  InitValuesFile& operator=(InitValuesFile&& other) noexcept;
  InitValuesFile(const InitValuesFile&) = delete;
  InitValuesFile& operator=(const InitValuesFile&) = delete;
  ~InitValuesFile();

  // Tensor i's reference (i < the number of tensors written).
  v1::SharedMemoryRef Ref(int i) const;
  const std::string& path() const { return path_; }
  int64_t bytes() const { return bytes_; }

 private:
  InitValuesFile() = default;

  std::string path_;  // Empty once moved from.
  int64_t bytes_ = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // (offset, length).
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_INIT_VALUES_FILE_H_
