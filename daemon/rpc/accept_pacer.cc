#include "daemon/rpc/accept_pacer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/rpc/accept_retry.h"

namespace shardd::rpc {

AcceptPacer& AcceptPacer::Process() {
  static AcceptPacer* const process = new AcceptPacer(Options{});
  return *process;
}

bool AcceptPacer::IsShortage(int error) {
  return error == EMFILE || error == ENFILE || error == ENOBUFS ||
         error == ENOMEM;
}

absl::StatusOr<std::vector<int>> AcceptPacer::FindListeners(
    const std::string& address, int port) {
  in_addr want4{};
  in6_addr want6{};
  int family = AF_UNSPEC;
  if (inet_pton(AF_INET, address.c_str(), &want4) == 1) {
    family = AF_INET;
  } else if (inet_pton(AF_INET6, address.c_str(), &want6) == 1) {
    family = AF_INET6;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", address, "' is not an IPv4 or IPv6 address"));
  }
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) {
    return absl::ErrnoToStatus(errno, "opendir /proc/self/fd");
  }
  absl::Cleanup close_dir = [dir] { closedir(dir); };
  std::vector<int> found;
  while (const dirent* entry = readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == dirfd(dir)) continue;
    int listening = 0;
    socklen_t length = sizeof(listening);
    // Fails with ENOTSOCK for anything but a socket.
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 ||
        listening == 0) {
      continue;
    }
    sockaddr_storage local{};
    length = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
      continue;
    }
    bool match = false;
    if (local.ss_family == AF_INET && family == AF_INET) {
      const auto* in4 = reinterpret_cast<const sockaddr_in*>(&local);
      match =
          ntohs(in4->sin_port) == port && in4->sin_addr.s_addr == want4.s_addr;
    } else if (local.ss_family == AF_INET6 && family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&local);
      match = ntohs(in6->sin6_port) == port &&
              IN6_ARE_ADDR_EQUAL(&in6->sin6_addr, &want6);
    }
    if (match) found.push_back(fd);
  }
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no listening TCP socket of this process on ", address,
                     " port ", port));
  }
  return found;
}

void AcceptPacer::Register(int listen_fd, std::string name) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = listeners_.try_emplace(listen_fd);
  it->second.name = std::move(name);
  if (inserted) registered_.fetch_add(1, std::memory_order_relaxed);
}

void AcceptPacer::Unregister(int listen_fd) {
  absl::MutexLock lock(&mu_);
  auto it = listeners_.find(listen_fd);
  if (it == listeners_.end()) return;
  if (it->second.short_now) {
    open_episodes_.fetch_sub(1, std::memory_order_relaxed);
  }
  listeners_.erase(it);
  registered_.fetch_sub(1, std::memory_order_relaxed);
}

bool AcceptPacer::Failed(int listen_fd, int error) {
  if (registered_.load(std::memory_order_relaxed) == 0 || !IsShortage(error)) {
    return false;
  }
  const int saved_errno = errno;
  absl::Cleanup restore_errno = [saved_errno] { errno = saved_errno; };
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    auto it = listeners_.find(listen_fd);
    if (it == listeners_.end()) return false;
    Listener& listener = it->second;
    ++counts_.paced;
    ++listener.paced;
    if (!listener.short_now) {
      listener.short_now = true;
      listener.began = MonoNow();
      listener.paced = 1;
      ++counts_.episodes;
      open_episodes_.fetch_add(1, std::memory_order_relaxed);
      line = absl::StrCat(
          "accept on ", listener.name, " failed: ", std::strerror(error),
          " (open-file limit ", AcceptRetry::OpenFileLimit(),
          "); retrying every ", absl::FormatDuration(options_.pause),
          " until descriptors are free");
    }
  }
  if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
  // The server's thread has nothing else to do: what it would accept next
  // waits in the listener's queue either way.
  absl::SleepFor(options_.pause);
  return true;
}

void AcceptPacer::Accepted(int listen_fd) {
  if (open_episodes_.load(std::memory_order_relaxed) == 0) return;
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    auto it = listeners_.find(listen_fd);
    if (it == listeners_.end() || !it->second.short_now) return;
    Listener& listener = it->second;
    line =
        absl::StrCat("accept on ", listener.name, " works again, after ",
                     listener.paced, " paced accept(s) over ",
                     absl::FormatDuration(absl::Trunc(
                         MonoNow() - listener.began, absl::Milliseconds(1))));
    listener.short_now = false;
    ++counts_.recovered;
    open_episodes_.fetch_sub(1, std::memory_order_relaxed);
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

AcceptPacer::Counts AcceptPacer::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace shardd::rpc
