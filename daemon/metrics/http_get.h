#ifndef SHARDD_DAEMON_METRICS_HTTP_GET_H_
#define SHARDD_DAEMON_METRICS_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardd::metrics {

// For tests: one HTTP/1.0 GET of http://host:port/path over a plain TCP
// socket (no client library), returning the body of a 200 reply.
//   UNAVAILABLE        cannot connect, or the connection broke
//   DEADLINE_EXCEEDED  no complete reply by the deadline
//   FAILED_PRECONDITION  a status other than 200 (the status line in the
//                        message)
// `host` is an IPv4 literal.
absl::StatusOr<std::string> HttpGet(const std::string& host, int port,
                                    const std::string& path,
                                    absl::Time deadline);

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_HTTP_GET_H_
