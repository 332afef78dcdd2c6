#ifndef SHARDD_TESTS_COLLECTIVES_PROCESS_GROUP_H_
#define SHARDD_TESTS_COLLECTIVES_PROCESS_GROUP_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardd::testing {

// How a child ended (or did not).
struct ChildExit {
  bool exited = false;    // WIFEXITED
  int exit_code = -1;     // WEXITSTATUS when exited
  bool signaled = false;  // WIFSIGNALED
  int signal = 0;         // WTERMSIG when signaled
  std::string ToString() const;
};

// Real child processes for multi-process tests and benchmarks, owned as one
// POSIX process group.
//
// Responsible for: spawning (posix_spawn, stdout/stderr to files, all in one
// process group), waiting for exits with a deadline (pidfd_open + poll: no
// sleeping), telling a stopped child from a running one, and killing and
// reaping every child when the owner is done or an assertion returns early
// (RAII: the destructor SIGKILLs the whole group and reaps it, so no test
// leaks a process). Not thread-safe.
class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv[0] (a path) with argv, stdout and stderr appended to the
  // given files (created). Returns the pid.
  absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv,
                              const std::string& stdout_path,
                              const std::string& stderr_path);

  // Waits until every pid in `pids` has exited (and reaps it) or `deadline`
  // passes: DEADLINE_EXCEEDED naming the pids still running. With
  // `stop_on_failure`, returns ABORTED as soon as one of them has ended
  // other than by exit 0 (its peers may be waiting for it forever).
  absl::Status WaitForExit(const std::vector<pid_t>& pids, absl::Time deadline,
                           bool stop_on_failure = false);

  // The exit of a reaped child; NOT_FOUND while it runs.
  absl::StatusOr<ChildExit> ExitOf(pid_t pid) const;

  // True when the (unreaped) child is stopped by a signal right now.
  bool IsStopped(pid_t pid) const;

  // SIGKILLs every child still alive (stopped ones included) and reaps
  // them all. Idempotent.
  void KillAll();

 private:
  struct Child {
    int pidfd = -1;
    bool reaped = false;
    ChildExit exit;
  };
  void Reap(pid_t pid, Child& child, bool block);

  pid_t pgid_ = 0;
  std::map<pid_t, Child> children_;
};

// Reads a whole (small) file; empty when missing.
std::string ReadFileOrEmpty(const std::string& path);

// The key=value pairs of the last line of `text` that starts with `prefix`
// followed by a space ("RESULT k=v k=v"). Empty when there is none.
std::map<std::string, std::string> ParseResultLine(const std::string& text,
                                                   const std::string& prefix);

// Threads of the calling process (entries of /proc/self/task).
int CountThreads();

}  // namespace shardd::testing

#endif  // SHARDD_TESTS_COLLECTIVES_PROCESS_GROUP_H_
