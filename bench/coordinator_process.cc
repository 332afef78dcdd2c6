#include "bench/coordinator_process.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace shardd::bench {

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const CoordinatorProcessOptions& options) {
  if (options.world_size < 1 || options.sharding_factor < 1) {
    return absl::InvalidArgumentError(
        "world_size and sharding_factor must be positive");
  }
  // exec keeps the pid: the shell only redirects stderr.
  std::vector<std::string> argv = {
      "/bin/sh",
      "-c",
      absl::StrCat("exec \"$0\" \"$@\" 2>>'",
                   options.log_path.empty() ? "/dev/null" : options.log_path,
                   "'"),
      options.binary,
      "--listen=127.0.0.1:0",
      absl::StrCat("--world_size=", options.world_size),
      absl::StrCat("--sharding_factor=", options.sharding_factor),
      absl::StrCat("--lease_ms=", options.lease_ms),
      absl::StrCat("--heartbeat_interval_ms=", options.heartbeat_interval_ms),
      // No one answers the simulated members' peer addresses.
      "--probe_timeout_ms=100",
  };
  absl::StatusOr<std::unique_ptr<tests::Subprocess>> spawned =
      tests::Subprocess::Spawn(std::move(argv), "coordinator");
  if (!spawned.ok()) return spawned.status();
  std::unique_ptr<CoordinatorProcess> process(
      new CoordinatorProcess(*std::move(spawned)));
  absl::StatusOr<std::string> line = process->process_->WaitForLine(
      "coordinator listening on ", absl::Now() + absl::Seconds(30));
  if (!line.ok()) return line.status();
  // "coordinator listening on 127.0.0.1:PORT (W=...)"
  const size_t at = line->find("on ") + 3;
  const size_t space = line->find(' ', at);
  process->address_ = line->substr(at, space - at);
  return process;
}

absl::StatusOr<double> CoordinatorProcess::CpuSeconds() const {
  std::ifstream in(absl::StrCat("/proc/", pid(), "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read /proc/", pid(), "/stat"));
  }
  // The command name (field 2) is in parentheses and may hold spaces; the
  // fields after it start with field 3 (state).
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    return absl::InternalError(absl::StrCat("unexpected stat line: ", stat));
  }
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ');
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(absl::StrCat("unexpected stat line: ", stat));
  }
  return static_cast<double>(utime + stime) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t CoordinatorProcess::StatusField(const char* name) const {
  std::ifstream in(absl::StrCat("/proc/", pid(), "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    std::istringstream values(line.substr(std::string(name).size()));
    int64_t value = -1;
    values >> value;
    return value;
  }
  return -1;
}

int64_t CoordinatorProcess::Threads() const { return StatusField("Threads:"); }

int64_t CoordinatorProcess::ResidentBytes() const {
  const int64_t kib = StatusField("VmRSS:");
  return kib < 0 ? -1 : kib * 1024;
}

absl::StatusOr<int> CoordinatorProcess::Stop() {
  process_->Signal(SIGTERM);
  absl::StatusOr<int> code = process_->Wait(absl::Now() + absl::Seconds(10));
  if (code.ok()) return code;
  process_->Signal(SIGKILL);
  return process_->Wait(absl::Now() + absl::Seconds(10));
}

}  // namespace shardd::bench
