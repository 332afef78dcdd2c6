#include "daemon/metrics/process_collector.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_type.h"

namespace shardd::metrics {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  std::string text;
  char buffer[4096];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::UnavailableError(
          absl::StrCat("cannot read ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

absl::StatusOr<double> CountEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot list ", dir, ": ", std::strerror(errno)));
  }
  double n = 0;
  while (const dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      ++n;
    }
  }
  closedir(d);
  return n;
}

void Add(std::vector<prometheus::MetricFamily>& out, const char* name,
         const char* help, prometheus::MetricType type,
         const std::optional<double>& value) {
  if (!value.has_value()) return;
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = *value;
  } else {
    metric.gauge.value = *value;
  }
  family.metric.push_back(std::move(metric));
  out.push_back(std::move(family));
}

}  // namespace

absl::StatusOr<double> ParseProcSelfStat(absl::string_view text,
                                         long clock_ticks_per_second,
                                         long page_size, ProcessSample* out) {
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'.
  const size_t paren = text.rfind(')');
  if (paren == absl::string_view::npos) {
    return absl::InvalidArgumentError("/proc/self/stat: no ')' after comm");
  }
  const std::vector<absl::string_view> fields =
      absl::StrSplit(text.substr(paren + 1), ' ', absl::SkipWhitespace());
  // fields[0] is field 3 (state); field n of proc(5) is fields[n - 3].
  auto field = [&](int n, const char* name) -> absl::StatusOr<double> {
    uint64_t v = 0;
    if (static_cast<int>(fields.size()) <= n - 3 ||
        !absl::SimpleAtoi(fields[n - 3], &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/self/stat: field ", n, " (", name,
                       ") missing or not a number"));
    }
    return static_cast<double>(v);
  };
  absl::StatusOr<double> utime = field(14, "utime");
  absl::StatusOr<double> stime = field(15, "stime");
  absl::StatusOr<double> starttime = field(22, "starttime");
  absl::StatusOr<double> vsize = field(23, "vsize");
  absl::StatusOr<double> rss = field(24, "rss");
  for (const auto* s : {&utime, &stime, &starttime, &vsize, &rss}) {
    if (!s->ok()) return s->status();
  }
  if (clock_ticks_per_second <= 0 || page_size <= 0) {
    return absl::InvalidArgumentError(
        "clock_ticks_per_second and page_size must be positive");
  }
  const double ticks = static_cast<double>(clock_ticks_per_second);
  out->cpu_seconds = (*utime + *stime) / ticks;
  out->virtual_bytes = *vsize;
  out->resident_bytes = *rss * static_cast<double>(page_size);
  return *starttime / ticks;
}

absl::StatusOr<double> ParseBootTime(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "btime ")) continue;
    int64_t btime = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &btime)) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/stat: btime is not a number: '", line, "'"));
    }
    return static_cast<double>(btime);
  }
  return absl::InvalidArgumentError("/proc/stat: no btime line");
}

absl::StatusOr<double> ParseMaxOpenFiles(absl::string_view text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Max open files")) continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (fields.empty()) break;
    if (fields[0] == "unlimited") {
      return std::numeric_limits<double>::infinity();
    }
    uint64_t soft = 0;
    if (!absl::SimpleAtoi(fields[0], &soft)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "/proc/self/limits: Max open files soft limit is not a number: '",
          fields[0], "'"));
    }
    return static_cast<double>(soft);
  }
  return absl::InvalidArgumentError(
      "/proc/self/limits: no 'Max open files' line");
}

ProcessCollector::ProcessCollector(ProcessCollectorOptions options)
    : proc_root_(std::move(options.proc_root)),
      clock_ticks_(options.clock_ticks_per_second > 0
                       ? options.clock_ticks_per_second
                       : sysconf(_SC_CLK_TCK)),
      page_size_(options.page_size > 0 ? options.page_size
                                       : sysconf(_SC_PAGESIZE)) {}

ProcessSample ProcessCollector::Sample() const {
  ProcessSample sample;
  if (absl::StatusOr<std::string> stat =
          ReadWholeFile(absl::StrCat(proc_root_, "/self/stat"));
      stat.ok()) {
    absl::StatusOr<double> since_boot =
        ParseProcSelfStat(*stat, clock_ticks_, page_size_, &sample);
    absl::StatusOr<std::string> proc_stat =
        ReadWholeFile(absl::StrCat(proc_root_, "/stat"));
    if (since_boot.ok() && proc_stat.ok()) {
      if (absl::StatusOr<double> boot = ParseBootTime(*proc_stat); boot.ok()) {
        sample.start_time_seconds = *boot + *since_boot;
      }
    }
  }
  if (absl::StatusOr<double> fds =
          CountEntries(absl::StrCat(proc_root_, "/self/fd"));
      fds.ok()) {
    sample.open_fds = *fds;
  }
  if (absl::StatusOr<std::string> limits =
          ReadWholeFile(absl::StrCat(proc_root_, "/self/limits"));
      limits.ok()) {
    if (absl::StatusOr<double> max = ParseMaxOpenFiles(*limits); max.ok()) {
      sample.max_fds = *max;
    }
  }
  return sample;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  const ProcessSample s = Sample();
  std::vector<prometheus::MetricFamily> out;
  using prometheus::MetricType;
  Add(out, "process_cpu_seconds_total",
      "Total user and system CPU time spent in seconds.", MetricType::Counter,
      s.cpu_seconds);
  Add(out, "process_open_fds", "Number of open file descriptors.",
      MetricType::Gauge, s.open_fds);
  Add(out, "process_max_fds", "Maximum number of open file descriptors.",
      MetricType::Gauge, s.max_fds);
  Add(out, "process_virtual_memory_bytes", "Virtual memory size in bytes.",
      MetricType::Gauge, s.virtual_bytes);
  Add(out, "process_resident_memory_bytes", "Resident memory size in bytes.",
      MetricType::Gauge, s.resident_bytes);
  Add(out, "process_start_time_seconds",
      "Start time of the process since unix epoch in seconds.",
      MetricType::Gauge, s.start_time_seconds);
  return out;
}

}  // namespace shardd::metrics
