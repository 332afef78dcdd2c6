#ifndef SHARDD_DAEMON_COMM_FILE_STORE_H_
#define SHARDD_DAEMON_COMM_FILE_STORE_H_

#include <string>
#include <vector>

#include "daemon/comm/store.h"

namespace shardd::comm {

// A Store over a directory shared by the processes of one machine: one file
// per key, written to a temporary name and renamed into place so readers
// never see a partial value. For local clusters and multi-process tests;
// the coordinator-backed store serves real deployments.
//
// Thread-safe (the file system serialises); owns nothing but its path.
class FileStore : public Store {
 public:
  // `directory` must exist and be writable.
  explicit FileStore(std::string directory);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  std::string directory_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_FILE_STORE_H_
