#ifndef SHARDD_DAEMON_COMM_STATUS_EXCEPTION_H_
#define SHARDD_DAEMON_COMM_STATUS_EXCEPTION_H_

#include <exception>
#include <stdexcept>

#include "absl/status/status.h"

namespace shardd::comm {

// An exception that carries an absl::Status through code that reports
// errors by throwing (Gloo calls back into our store adapter and our
// buffers, and unwinds through its own frames). It never leaves the Gloo
// backend: the code that calls into Gloo catches it and returns the status.
class StatusException : public std::runtime_error {
 public:
  explicit StatusException(absl::Status status);

  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

// The status that ends an operation which threw `error`:
// - a StatusException: its status;
// - a Gloo exception (gloo::IoException, gloo::EnforceNotMet ...) or any
//   std::exception whose message says it timed out ("Timed out waiting
//   ...", "Connect timeout", "Read timeout"): DEADLINE_EXCEEDED;
// - any other exception (connection closed or reset by the peer, socket
//   errors, failed invariants): UNAVAILABLE.
// `what` names the operation ("all-gather", "connect") in the message.
absl::Status StatusFromException(std::exception_ptr error,
                                 absl::string_view what);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_STATUS_EXCEPTION_H_
