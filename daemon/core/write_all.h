#ifndef SHARDD_DAEMON_CORE_WRITE_ALL_H_
#define SHARDD_DAEMON_CORE_WRITE_ALL_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shardd::core {

// Writes all of `data` to `fd`, retrying short writes and EINTR. On an
// error, the errno's status (absl::ErrnoToStatus) with the message
// "PATH: write"; what was written before it stays written. For the small
// appends of the logs (commit log, decision log); bulk writers bound their
// pieces themselves.
absl::Status WriteAll(int fd, absl::string_view data, absl::string_view path);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_WRITE_ALL_H_
