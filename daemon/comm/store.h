#ifndef SHARDD_DAEMON_COMM_STORE_H_
#define SHARDD_DAEMON_COMM_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardd::comm {

// The rendezvous key-value store that communicators of one membership epoch
// exchange addresses (Gloo) or unique ids (NCCL) through.
//
// Keys are scoped by the caller (the communicator prefixes them with its
// epoch and group). Values are opaque bytes. Implementations are
// thread-safe; every blocking call has a deadline.
class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value (overwriting). UNAVAILABLE when the store cannot be
  // reached.
  virtual absl::Status Set(absl::string_view key, absl::string_view value) = 0;

  // The value of key; NOT_FOUND when it is not set.
  virtual absl::StatusOr<std::string> Get(absl::string_view key) = 0;

  // Blocks until every key is set or the timeout passes
  // (DEADLINE_EXCEEDED naming the first missing key).
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_STORE_H_
