#include "daemon/testing/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::tests {
namespace {

int PollTimeoutMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000 * 60 * 60));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Spawn(
    std::vector<std::string> argv, std::string name) {
  if (argv.empty()) return absl::InvalidArgumentError("argv is empty");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  // Everything the child needs is prepared before fork: after it, only
  // async-signal-safe calls.
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC on the copy.
    // The test may block signals in its threads; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->name_ = std::move(name);
  p->pid_ = pid;
  p->stdout_fd_ = fds[0];
  p->pid_fd_ = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  return p;
}

Subprocess::~Subprocess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  if (pid_fd_ >= 0) close(pid_fd_);
}

absl::StatusOr<std::string> Subprocess::ReadLine(absl::Time deadline) {
  while (true) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      lines_.push_back(line);
      return line;
    }
    if (eof_) {
      return absl::OutOfRangeError(
          absl::StrCat(name_, ": end of output (the process exited)"));
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    const int n = poll(&p, 1, PollTimeoutMs(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(name_, ": no complete line by the deadline"));
      }
      continue;
    }
    char chunk[4096];
    const ssize_t got = read(stdout_fd_, chunk, sizeof(chunk));
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      eof_ = true;
      continue;
    }
    buffer_.append(chunk, static_cast<size_t>(got));
  }
}

absl::StatusOr<std::string> Subprocess::WaitForLine(absl::string_view text,
                                                    absl::Time deadline) {
  while (true) {
    absl::StatusOr<std::string> line = ReadLine(deadline);
    if (!line.ok()) {
      const size_t n = std::min<size_t>(lines_.size(), 8);
      return absl::Status(
          line.status().code(),
          absl::StrCat(line.status().message(), " waiting for '", text,
                       "'; last lines: [",
                       absl::StrJoin(lines_.end() - n, lines_.end(), " | "),
                       "]"));
    }
    if (absl::StrContains(*line, text)) return line;
  }
}

void Subprocess::Signal(int signal) {
  if (!reaped_ && pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Time deadline) {
  while (!reaped_) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ =
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, ": still running at the deadline"));
    }
    if (pid_fd_ >= 0) {
      // Readable once the process exits.
      pollfd p{pid_fd_, POLLIN, 0};
      poll(&p, 1, PollTimeoutMs(deadline));
    } else {
      // No pidfd (old kernel): wait on the pipe's end of output instead,
      // bounded by the deadline.
      pollfd p{stdout_fd_, POLLIN, 0};
      poll(&p, 1, std::min(PollTimeoutMs(deadline), 50));
    }
  }
  return exit_code_;
}

bool Subprocess::Running() {
  if (reaped_) return false;
  return absl::IsDeadlineExceeded(Wait(absl::Now()).status());
}

}  // namespace shardd::tests
