#ifndef SHARDD_DAEMON_CORE_FD_LIMIT_H_
#define SHARDD_DAEMON_CORE_FD_LIMIT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::core {

// The process's open-file limit (RLIMIT_NOFILE), raised at start-up.
//
// Why: the coordinator keeps a connection (heartbeats and a watch stream)
// per member, and a daemon a Gloo pair per peer of each group plus its
// shared-memory segments, so both need far more descriptors than the
// soft limit many hosts hand a process: 1024 under systemd's default and
// in containerd 2's containers, with a hard limit of 524288 or more. At
// 1024 a coordinator of ~1,000 members would fail to accept the next one
// (EMFILE). The soft limit is raised to the hard one, which needs no
// privilege (Go's runtime does the same at start-up); the hard limit is
// never touched.
//
// Stateless; thread-safe (setrlimit is per process: call it before the
// servers start).
class FdLimit {
 public:
  struct Result {
    uint64_t soft_before = 0;
    uint64_t soft_after = 0;
    uint64_t hard = 0;
  };

  // The soft limit to ask for, given the current ones: the hard limit
  // (never lower than `soft`). RLIM_INFINITY stands for "unlimited".
  static uint64_t RaisedSoft(uint64_t soft, uint64_t hard);

  // Raises this process's soft RLIMIT_NOFILE to its hard limit. On failure
  // (getrlimit/setrlimit) the limits are unchanged and the error names the
  // call.
  static absl::StatusOr<Result> RaiseSoftToHard();

  // "open-file limit 1024 -> 524288 (hard 524288)", for the start-up log.
  static std::string Describe(const Result& result);

  // The start-up line of `program` for a RaiseSoftToHard outcome: the
  // raise, or the error and that the program goes on; empty when the limit
  // was already the hard one.
  static std::string StartupMessage(absl::string_view program,
                                    const absl::StatusOr<Result>& outcome);

  // RaiseSoftToHard, and its StartupMessage on stderr. For main().
  static void RaiseAtStartup(absl::string_view program);
};

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_FD_LIMIT_H_
