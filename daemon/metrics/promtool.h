#ifndef SHARDD_DAEMON_METRICS_PROMTOOL_H_
#define SHARDD_DAEMON_METRICS_PROMTOOL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::metrics {

// For tests: the promtool binary (Debian package `prometheus`), from PATH
// or /usr/bin/promtool. NOT_FOUND, saying how to install it, when absent.
absl::StatusOr<std::string> FindPromtool();

// For tests: `promtool check metrics` on an exposition text (format and
// the Prometheus naming lint). OK when promtool accepts it;
// FAILED_PRECONDITION with promtool's output when it does not; NOT_FOUND
// when promtool is missing (a test must fail then, not skip).
absl::Status PromtoolCheckMetrics(absl::string_view exposition);

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_PROMTOOL_H_
