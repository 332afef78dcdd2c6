#ifndef SHARDD_BENCH_COORDINATOR_PROCESS_H_
#define SHARDD_BENCH_COORDINATOR_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/testing/subprocess.h"

namespace shardd::bench {

struct CoordinatorProcessOptions {
  // bazel-bin/daemon/coordinator/coordinator, or a test's $(location).
  std::string binary;
  int world_size = 0;
  int sharding_factor = 0;
  int64_t lease_ms = 1500;
  int64_t heartbeat_interval_ms = 500;
  // Its stderr (one decision per line, thousands at large W) is appended
  // here; empty: /dev/null.
  std::string log_path;
};

// A real coordinator process on 127.0.0.1 (any free port), whose own cost
// the harness measures.
//
// Responsible for starting it (waiting for its "listening on" line),
// reading its CPU time, threads and resident memory from /proc, and
// stopping it. The child is SIGKILLed when this object is destroyed while it
// still runs, and when the harness dies. Not thread-safe; owns the child.
class CoordinatorProcess {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const CoordinatorProcessOptions& options);

  const std::string& address() const { return address_; }
  pid_t pid() const { return process_->pid(); }

  // utime + stime of the process, all threads, in seconds (clock ticks:
  // 10 ms resolution). FAILED_PRECONDITION once it has exited.
  absl::StatusOr<double> CpuSeconds() const;
  // From /proc/PID/status; -1 when unreadable.
  int64_t Threads() const;
  int64_t ResidentBytes() const;

  // SIGTERM, then waits up to 10 s for a clean exit (SIGKILL after that).
  // Returns its exit status (128 + signal when killed).
  absl::StatusOr<int> Stop();

 private:
  explicit CoordinatorProcess(std::unique_ptr<tests::Subprocess> process)
      : process_(std::move(process)) {}
  int64_t StatusField(const char* name) const;

  std::unique_ptr<tests::Subprocess> process_;
  std::string address_;
};

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_COORDINATOR_PROCESS_H_
