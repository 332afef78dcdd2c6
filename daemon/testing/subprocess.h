#ifndef SHARDD_DAEMON_TESTING_SUBPROCESS_H_
#define SHARDD_DAEMON_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardd::tests {

// A child process for integration tests, whose stdout is read line by line
// with deadlines.
//
// The child gets SIGKILL when the test process dies (PR_SET_PDEATHSIG) and
// when this object is destroyed while it still runs, so no child outlives a
// failed assertion. Its stderr goes to the test's stderr (the test log).
//
// Not thread-safe: one thread drives it. Owns the child and the pipe.
class Subprocess {
 public:
  // Starts argv[0] with argv; `name` labels its lines in messages.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Spawn(
      std::vector<std::string> argv, std::string name);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

  // The next complete line of stdout (without the newline).
  // DEADLINE_EXCEEDED at the deadline; OUT_OF_RANGE at end of output.
  absl::StatusOr<std::string> ReadLine(absl::Time deadline);
  // Reads lines until one contains `text`, returning it; earlier lines are
  // kept in lines(). The error names the text and the last lines seen.
  absl::StatusOr<std::string> WaitForLine(absl::string_view text,
                                          absl::Time deadline);
  // Every line read so far.
  const std::vector<std::string>& lines() const { return lines_; }

  // Sends a signal (no-op once reaped).
  void Signal(int signal);
  // Waits for the child to exit and reaps it: its exit code, or 128 + the
  // signal that killed it. DEADLINE_EXCEEDED if it still runs.
  absl::StatusOr<int> Wait(absl::Time deadline);
  // True while the child has not exited (reaps it if it has).
  bool Running();

 private:
  Subprocess() = default;

  std::string name_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int pid_fd_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  bool eof_ = false;
  std::string buffer_;
  std::vector<std::string> lines_;
};

}  // namespace shardd::tests

#endif  // SHARDD_DAEMON_TESTING_SUBPROCESS_H_
