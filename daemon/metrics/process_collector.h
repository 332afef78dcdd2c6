#ifndef SHARDD_DAEMON_METRICS_PROCESS_COLLECTOR_H_
#define SHARDD_DAEMON_METRICS_PROCESS_COLLECTOR_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace shardd::metrics {

// One reading of this process's resources; a value whose file could not be
// read or parsed is unset.
struct ProcessSample {
  std::optional<double> cpu_seconds;         // user + system
  std::optional<double> resident_bytes;      // RSS
  std::optional<double> virtual_bytes;       // VSZ
  std::optional<double> start_time_seconds;  // since the Unix epoch
  std::optional<double> open_fds;
  std::optional<double> max_fds;  // soft limit; +Inf when unlimited
};

struct ProcessCollectorOptions {
  // Where /proc is (tests point it at a folder of fixed files).
  std::string proc_root = "/proc";
  // sysconf(_SC_CLK_TCK) and sysconf(_SC_PAGESIZE) when 0.
  long clock_ticks_per_second = 0;
  long page_size = 0;
};

// The standard process_* metrics of the Prometheus client libraries, which
// prometheus-cpp does not provide: process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_start_time_seconds, process_open_fds and process_max_fds, read
// from /proc at each scrape (self/stat, stat's btime, self/fd,
// self/limits). A metric whose file cannot be read is left out of that
// scrape; Collect never throws.
//
// Thread-safe (holds no mutable state). Linux only.
class ProcessCollector : public prometheus::Collectable {
 public:
  explicit ProcessCollector(ProcessCollectorOptions options = {});

  std::vector<prometheus::MetricFamily> Collect() const override;

  // What Collect exports, as numbers.
  ProcessSample Sample() const;

 private:
  std::string proc_root_;
  long clock_ticks_;
  long page_size_;
};

// Parsers of the /proc files, pure (exposed for tests). INVALID_ARGUMENT
// naming the file and field when the text does not have the expected shape.

// /proc/self/stat: fills cpu_seconds, virtual_bytes, resident_bytes and the
// start time in seconds since boot (returned).
absl::StatusOr<double> ParseProcSelfStat(absl::string_view text,
                                         long clock_ticks_per_second,
                                         long page_size, ProcessSample* out);
// /proc/stat: the boot time (btime) in seconds since the Unix epoch.
absl::StatusOr<double> ParseBootTime(absl::string_view text);
// /proc/self/limits: the soft limit of "Max open files" (+Inf when
// unlimited).
absl::StatusOr<double> ParseMaxOpenFiles(absl::string_view text);

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_PROCESS_COLLECTOR_H_
