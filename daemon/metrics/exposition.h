#ifndef SHARDD_DAEMON_METRICS_EXPOSITION_H_
#define SHARDD_DAEMON_METRICS_EXPOSITION_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::metrics {

// For tests: the samples of a Prometheus text exposition, keyed by series:
// the metric name, then its labels sorted by name in braces
// (`shardd_collective_bytes_total{group="shard",op="all_gather"}`), or the
// name alone without labels. Comment lines are skipped. INVALID_ARGUMENT
// naming the line for a sample that does not parse, or a series that
// appears twice.
absl::StatusOr<std::map<std::string, double>> ParseExposition(
    absl::string_view text);

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_EXPOSITION_H_
