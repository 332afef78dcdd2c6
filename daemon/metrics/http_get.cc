#include "daemon/metrics/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardd::metrics {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
absl::Status WaitFor(int fd, short events, absl::Time deadline,
                     const std::string& url) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("GET ", url, ": no complete reply by the deadline"));
    }
    pollfd p{fd, events, 0};
    const int n =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::UnavailableError(
          absl::StrCat("GET ", url, ": poll: ", std::strerror(errno)));
    }
  }
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& host, int port,
                                    const std::string& path,
                                    absl::Time deadline) {
  const std::string url = absl::StrCat("http://", host, ":", port, path);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GET ", url, ": host is not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": socket: ", std::strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": connect: ", std::strerror(errno)));
  }
  if (absl::Status s = WaitFor(fd, POLLOUT, deadline, url); !s.ok()) return s;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": connect: ", std::strerror(err)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, ":", port,
                   "\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    if (absl::Status s = WaitFor(fd, POLLOUT, deadline, url); !s.ok()) {
      return s;
    }
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat("GET ", url, ": send: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buffer[16384];
  while (true) {
    if (absl::Status s = WaitFor(fd, POLLIN, deadline, url); !s.ok()) return s;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat("GET ", url, ": recv: ", std::strerror(errno)));
    }
    if (n == 0) break;  // HTTP/1.0: the server closes after the body.
    reply.append(buffer, static_cast<size_t>(n));
  }
  const size_t header_end = reply.find("\r\n\r\n");
  if (header_end == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, ": reply ends inside the headers"));
  }
  const std::string status_line = reply.substr(0, reply.find("\r\n"));
  if (!absl::StartsWith(status_line, "HTTP/1.") ||
      status_line.find(" 200") == std::string::npos) {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", url, ": ", status_line));
  }
  return reply.substr(header_end + 4);
}

}  // namespace shardd::metrics
