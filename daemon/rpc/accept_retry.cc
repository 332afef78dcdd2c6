#include "daemon/rpc/accept_retry.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"

namespace shardd::rpc {

std::string AcceptRetry::OpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return "unknown";
  return limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                         : absl::StrCat(limit.rlim_cur);
}

AcceptRetry::AcceptRetry(Options options) : options_(options) {
  thread_ = std::thread([this] { Run(); });
}

AcceptRetry::~AcceptRetry() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

AcceptRetry& AcceptRetry::Process() {
  static AcceptRetry* const process = new AcceptRetry(Options{});
  return *process;
}

bool AcceptRetry::ShouldDefer(int error, bool nonblocking) {
  if (!nonblocking) return false;
  return error == EMFILE || error == ENFILE || error == ENOBUFS ||
         error == ENOMEM;
}

absl::StatusOr<SocketAddress> AcceptRetry::KickTarget(
    const SocketAddress& local) {
  SocketAddress target = local;
  switch (local.storage.ss_family) {
    case AF_INET: {
      if (local.length < static_cast<socklen_t>(sizeof(sockaddr_in))) break;
      auto* in4 = reinterpret_cast<sockaddr_in*>(&target.storage);
      if (in4->sin_addr.s_addr == htonl(INADDR_ANY)) {
        in4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      }
      return target;
    }
    case AF_INET6: {
      if (local.length < static_cast<socklen_t>(sizeof(sockaddr_in6))) break;
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&target.storage);
      if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) {
        in6->sin6_addr = in6addr_loopback;
      }
      return target;
    }
    case AF_UNIX:
      // An unnamed socket has no path a kick could reach.
      if (local.length <=
          static_cast<socklen_t>(offsetof(sockaddr_un, sun_path))) {
        return absl::InvalidArgumentError(
            "the listener is an unnamed Unix socket");
      }
      return target;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "the listener's address family ", local.storage.ss_family,
          " is not AF_INET, AF_INET6 or AF_UNIX"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the listener's address is too short (", local.length,
                   " bytes) for its family"));
}

std::string AcceptRetry::Describe(const SocketAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  switch (address.storage.ss_family) {
    case AF_INET: {
      const auto* in4 = reinterpret_cast<const sockaddr_in*>(&address.storage);
      inet_ntop(AF_INET, &in4->sin_addr, text, sizeof(text));
      return absl::StrCat(text, ":", ntohs(in4->sin_port));
    }
    case AF_INET6: {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address.storage);
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
      return absl::StrCat("[", text, "]:", ntohs(in6->sin6_port));
    }
    case AF_UNIX: {
      const auto* un = reinterpret_cast<const sockaddr_un*>(&address.storage);
      const size_t offset = offsetof(sockaddr_un, sun_path);
      if (address.length <= static_cast<socklen_t>(offset)) {
        return "unix:(unnamed)";
      }
      const size_t size = address.length - offset;
      if (un->sun_path[0] == '\0') {  // Abstract: no terminator, leading NUL.
        return absl::StrCat("unix-abstract:",
                            std::string(un->sun_path + 1, size - 1));
      }
      return absl::StrCat(
          "unix:", std::string(un->sun_path, strnlen(un->sun_path, size)));
    }
    default:
      return absl::StrCat("family ", address.storage.ss_family);
  }
}

void AcceptRetry::Deferred(int listen_fd, int error) {
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    ++counts_.deferred;
    const MonoTime now = MonoNow();
    auto it = episodes_.find(listen_fd);
    if (it != episodes_.end()) {
      Episode& episode = it->second;
      ++episode.deferred;
      if (episode.target.length > 0) {
        if (!episode.kick_due) {
          episode.kick_due = true;
          episode.next_kick = NextKick(episode, now);
        } else {
          episode.next_kick =
              std::min(episode.next_kick, NextKick(episode, now));
        }
      }
      return;
    }
    Episode episode;
    episode.id = next_episode_id_++;
    episode.began = now;
    episode.deferred = 1;
    SocketAddress local;
    local.length = sizeof(local.storage);
    std::string no_kick;
    if (getsockname(listen_fd, reinterpret_cast<sockaddr*>(&local.storage),
                    &local.length) != 0) {
      episode.name = absl::StrCat("listener fd ", listen_fd);
      no_kick = std::strerror(errno);
    } else {
      episode.name = Describe(local);
      absl::StatusOr<SocketAddress> target = KickTarget(local);
      if (target.ok()) {
        episode.target = *target;
        episode.kick_due = true;
        episode.next_kick = now + options_.period;
      } else {
        no_kick = std::string(target.status().message());
      }
    }
    line = absl::StrCat(
        "accept on ", episode.name, " failed: ", std::strerror(error),
        " (open-file limit ", OpenFileLimit(),
        "); connections wait in its queue and are accepted once the "
        "shortage ends",
        no_kick.empty()
            ? absl::StrCat(" (checked every ",
                           absl::FormatDuration(options_.period), ")")
            : absl::StrCat(" (on the next connection: cannot connect to it, ",
                           no_kick, ")"));
    episodes_.emplace(listen_fd, std::move(episode));
    ++counts_.episodes;
    open_episodes_.fetch_add(1, std::memory_order_relaxed);
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

MonoTime AcceptRetry::NextKick(const Episode& episode, MonoTime now) const {
  return now + (episode.accepted > episode.accepted_at_kick
                    ? options_.progress_period
                    : options_.period);
}

void AcceptRetry::Accepted(int listen_fd) {
  if (open_episodes_.load(std::memory_order_relaxed) == 0) return;
  absl::MutexLock lock(&mu_);
  auto it = episodes_.find(listen_fd);
  if (it == episodes_.end()) return;
  ++it->second.accepted;
  ++counts_.accepted;
}

void AcceptRetry::Drained(int listen_fd) {
  if (open_episodes_.load(std::memory_order_relaxed) == 0) return;
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    auto it = episodes_.find(listen_fd);
    if (it == episodes_.end()) return;
    const Episode& episode = it->second;
    line = absl::StrCat("accept on ", episode.name,
                        " works again: ", episode.accepted,
                        " queued connection(s) accepted, after ",
                        episode.deferred, " deferred accept(s) over ",
                        absl::FormatDuration(absl::Trunc(
                            MonoNow() - episode.began, absl::Milliseconds(1))));
    episodes_.erase(it);
    ++counts_.recovered;
    open_episodes_.fetch_sub(1, std::memory_order_relaxed);
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

AcceptRetry::Counts AcceptRetry::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

absl::Status AcceptRetry::Kick(const SocketAddress& target) const {
  const int fd = socket(target.storage.ss_family,
                        SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, "socket for a kick");
  }
  // Closed as soon as the connection is made: gRPC accepts it after this
  // close, so the kick never holds the descriptor that accept needs.
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (connect(fd, reinterpret_cast<const sockaddr*>(&target.storage),
              target.length) == 0) {
    return absl::OkStatus();
  }
  const int error = errno;
  if (error == ECONNREFUSED || error == ENOENT) {
    return absl::NotFoundError(
        absl::StrCat("nothing listens on ", Describe(target)));
  }
  if (error != EINPROGRESS) {
    return absl::ErrnoToStatus(error,
                               absl::StrCat("connect to ", Describe(target)));
  }
  pollfd p{fd, POLLOUT, 0};
  const int ready =
      poll(&p, 1,
           static_cast<int>(absl::ToInt64Milliseconds(options_.connect_wait)));
  if (ready <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "connect to ", Describe(target), " still in progress after ",
        absl::FormatDuration(options_.connect_wait)));
  }
  int so_error = 0;
  socklen_t length = sizeof(so_error);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length);
  if (so_error == ECONNREFUSED) {
    return absl::NotFoundError(
        absl::StrCat("nothing listens on ", Describe(target)));
  }
  if (so_error != 0) {
    return absl::ErrnoToStatus(so_error,
                               absl::StrCat("connect to ", Describe(target)));
  }
  return absl::OkStatus();
}

void AcceptRetry::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    MonoTime next = MonoTime::InfiniteFuture();
    for (const auto& [fd, episode] : episodes_) {
      if (episode.kick_due) next = std::min(next, episode.next_kick);
    }
    // Wakes for stop, for the first due kick, and whenever the schedule
    // changed (a new or re-armed episode may be due before `next`).
    const size_t episodes_before = episodes_.size();
    const int64_t deferred_before = counts_.deferred;
    auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || episodes_.size() != episodes_before ||
             counts_.deferred != deferred_before;
    };
    AwaitUntil(&mu_, absl::Condition(&wake), next);
    if (stop_) return;
    const MonoTime now = MonoNow();
    struct Due {
      int fd;
      SocketAddress target;
      uint64_t episode;  // Which episode (the fd's may end and begin again).
      int64_t deferred;  // The episode's deferrals when the kick started.
    };
    std::vector<Due> due;
    for (auto& [fd, episode] : episodes_) {
      if (episode.kick_due && episode.next_kick <= now) {
        due.push_back({fd, episode.target, episode.id, episode.deferred});
        episode.next_kick = now + options_.period;  // If another is needed.
        episode.accepted_at_kick = episode.accepted;
      }
    }
    if (due.empty()) continue;
    std::vector<absl::Status> results;
    results.reserve(due.size());
    mu_.Unlock();
    for (const Due& d : due) results.push_back(Kick(d.target));
    mu_.Lock();
    for (size_t i = 0; i < due.size(); ++i) {
      if (results[i].ok()) ++counts_.kicks;
      auto it = episodes_.find(due[i].fd);
      // Gone: the queue was drained meanwhile. A new episode of the same fd
      // has its own kick scheduled.
      if (it == episodes_.end() || it->second.id != due[i].episode) continue;
      if (results[i].ok()) {
        // Done, unless the accepts the kick woke failed again before this
        // thread got here (their Deferred found the kick still due and
        // scheduled nothing): then the next kick stays due at next_kick.
        if (it->second.deferred == due[i].deferred) {
          it->second.kick_due = false;  // Re-armed by the next deferral.
        }
      } else if (absl::IsNotFound(results[i])) {
        std::fprintf(stderr,
                     "accept on %s: giving up the retry, nothing listens "
                     "there any more\n",
                     it->second.name.c_str());
        episodes_.erase(it);
        ++counts_.abandoned;
        open_episodes_.fetch_sub(1, std::memory_order_relaxed);
      } else {
        ++counts_.kick_failures;
      }
    }
  }
}

}  // namespace shardd::rpc
