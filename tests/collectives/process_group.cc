#include "tests/collectives/process_group.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace shardd::testing {
namespace {

int PidfdOpen(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

std::string ChildExit::ToString() const {
  if (exited) return absl::StrCat("exit ", exit_code);
  if (signaled)
    return absl::StrCat("signal ", signal, " (", strsignal(signal), ")");
  return "running";
}

ProcessGroup::~ProcessGroup() { KillAll(); }

absl::StatusOr<pid_t> ProcessGroup::Spawn(const std::vector<std::string>& argv,
                                          const std::string& stdout_path,
                                          const std::string& stderr_path) {
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  // The first child founds the group (pgid 0 = its own pid).
  posix_spawnattr_setpgroup(&attr, pgid_);

  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
  }
  if (pgid_ == 0) pgid_ = pid;
  Child child;
  // The pid cannot be reused before we reap it, so the pidfd names this child.
  child.pidfd = PidfdOpen(pid);
  if (child.pidfd < 0) {
    const absl::Status status = Errno("pidfd_open");
    kill(pid, SIGKILL);
    children_[pid] = child;
    Reap(pid, children_[pid], /*block=*/true);
    return status;
  }
  children_[pid] = child;
  return pid;
}

void ProcessGroup::Reap(pid_t pid, Child& child, bool block) {
  if (child.reaped) return;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid) return;
  child.reaped = true;
  if (WIFEXITED(status)) {
    child.exit.exited = true;
    child.exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    child.exit.signaled = true;
    child.exit.signal = WTERMSIG(status);
  }
  if (child.pidfd >= 0) {
    close(child.pidfd);
    child.pidfd = -1;
  }
}

absl::Status ProcessGroup::WaitForExit(const std::vector<pid_t>& pids,
                                       absl::Time deadline,
                                       bool stop_on_failure) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<pid_t> waiting;
    for (pid_t pid : pids) {
      auto it = children_.find(pid);
      if (it == children_.end()) {
        return absl::NotFoundError(absl::StrCat("pid ", pid, " is not ours"));
      }
      Reap(pid, it->second, /*block=*/false);
      if (it->second.reaped) {
        const ChildExit& e = it->second.exit;
        if (stop_on_failure && !(e.exited && e.exit_code == 0)) {
          return absl::AbortedError(
              absl::StrCat("pid ", pid, " ended with ", e.ToString()));
        }
        continue;
      }
      fds.push_back(pollfd{it->second.pidfd, POLLIN, 0});
      waiting.push_back(pid);
    }
    if (waiting.empty()) return absl::OkStatus();
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("still running: ", absl::StrJoin(waiting, ",")));
    }
    const int timeout_ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1 << 30));
    const int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) return Errno("poll");
    // A readable pidfd means the process exited: reap it on the next pass.
  }
}

absl::StatusOr<ChildExit> ProcessGroup::ExitOf(pid_t pid) const {
  auto it = children_.find(pid);
  if (it == children_.end() || !it->second.reaped) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, " not reaped"));
  }
  return it->second.exit;
}

bool ProcessGroup::IsStopped(pid_t pid) const {
  auto it = children_.find(pid);
  if (it == children_.end() || it->second.reaped) return false;
  // /proc/PID/stat's third field is the state: 'T' when stopped.
  const std::string stat =
      ReadFileOrEmpty(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] == 'T';
}

void ProcessGroup::KillAll() {
  if (pgid_ != 0) kill(-pgid_, SIGKILL);
  for (auto& [pid, child] : children_) {
    if (child.reaped) continue;
    kill(pid, SIGKILL);  // In case it left the group.
    Reap(pid, child, /*block=*/true);
  }
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::map<std::string, std::string> ParseResultLine(const std::string& text,
                                                   const std::string& prefix) {
  std::map<std::string, std::string> result;
  const std::string start = prefix + " ";
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.substr(0, start.size()) != start) continue;
    result.clear();
    for (absl::string_view field :
         absl::StrSplit(line.substr(start.size()), ' ', absl::SkipEmpty())) {
      const size_t eq = field.find('=');
      if (eq == absl::string_view::npos) continue;
      result[std::string(field.substr(0, eq))] =
          std::string(field.substr(eq + 1));
    }
  }
  return result;
}

int CountThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace shardd::testing
