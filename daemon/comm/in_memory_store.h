#ifndef SHARDD_DAEMON_COMM_IN_MEMORY_STORE_H_
#define SHARDD_DAEMON_COMM_IN_MEMORY_STORE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "daemon/comm/store.h"

namespace shardd::comm {

// A Store in one process's memory, for tests whose ranks are threads.
// Thread-safe.
class InMemoryStore : public Store {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_IN_MEMORY_STORE_H_
