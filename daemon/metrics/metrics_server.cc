#include "daemon/metrics/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/metrics/process_collector.h"
#include "daemon/rpc/accept_pacer.h"

namespace shardd::metrics {
namespace {

// host:port as civetweb and people write it ([v6]:port).
std::string Endpoint(const std::string& address, int port) {
  return address.find(':') != std::string::npos
             ? absl::StrCat("[", address, "]:", port)
             : absl::StrCat(address, ":", port);
}

// Binds a socket to address:port the way civetweb does (SO_REUSEADDR) to
// tell why civetweb could not: its exception says only "possible problem
// binding to port".
absl::Status DiagnoseBind(const std::string& address, int port,
                          const std::string& what) {
  const std::string endpoint = Endpoint(address, port);
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family = AF_INET;
  if (address.find(':') != std::string::npos) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&storage);
    in6->sin6_family = family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET6, address.c_str(), &in6->sin6_addr);
    length = sizeof(*in6);
  } else {
    auto* in4 = reinterpret_cast<sockaddr_in*>(&storage);
    in4->sin_family = AF_INET;
    in4->sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, address.c_str(), &in4->sin_addr);
    length = sizeof(*in4);
  }
  const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int bind_errno = 0;
  if (fd >= 0) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
      bind_errno = errno;
    }
    close(fd);
  } else {
    bind_errno = errno;
  }
  if (bind_errno == EADDRINUSE) {
    return absl::AlreadyExistsError(absl::StrCat(
        "cannot serve metrics on ", endpoint, ": the address is in use"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot serve metrics on ", endpoint, ": ",
                   bind_errno != 0 ? std::strerror(bind_errno) : what));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, int port,
    std::shared_ptr<prometheus::Collectable> registry) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics port ", port, " must be in [0, 65535] (0: any free port)"));
  }
  unsigned char scratch[sizeof(in6_addr)];
  if (inet_pton(AF_INET, address.c_str(), scratch) != 1 &&
      inet_pton(AF_INET6, address.c_str(), scratch) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics address '", address, "' is not an IPv4 or IPv6 address"));
  }
  if (registry == nullptr) {
    return absl::InvalidArgumentError("metrics registry is null");
  }
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<prometheus::Collectable> process =
      std::make_shared<ProcessCollector>();
  int bound = 0;
  try {
    // civetweb gives each connection a thread of num_threads until its
    // request is read: with its defaults (2 threads, 30 s) two idle
    // connections (a stalled client, a port scan's half-open socket) left
    // /metrics unanswered for 30 s and every scrape failed meanwhile.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", Endpoint(address, port), "num_threads",
        absl::StrCat(kServerThreads), "request_timeout_ms",
        absl::StrCat(absl::ToInt64Milliseconds(kRequestTimeout))});
    const std::vector<int> ports = exposer->GetListeningPorts();
    if (ports.empty() || ports[0] <= 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", Endpoint(address, port),
                       ": the HTTP server reports no listening port"));
    }
    bound = ports[0];
    exposer->RegisterCollectable(registry);
    exposer->RegisterCollectable(process);
  } catch (const std::exception& e) {
    return DiagnoseBind(address, port, e.what());
  } catch (...) {
    return DiagnoseBind(address, port, "unknown error");
  }
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(address, bound, std::move(registry), std::move(process),
                        std::move(exposer)));
}

MetricsServer::MetricsServer(std::string address, int port,
                             std::shared_ptr<prometheus::Collectable> registry,
                             std::shared_ptr<prometheus::Collectable> process,
                             std::unique_ptr<prometheus::Exposer> exposer)
    : address_(std::move(address)),
      port_(port),
      registry_(std::move(registry)),
      exposer_(std::move(exposer)) {
  {
    absl::MutexLock lock(&mu_);
    collectables_.push_back(std::move(process));
  }
  // Found by address and port: civetweb does not tell its sockets.
  absl::StatusOr<std::vector<int>> listeners =
      rpc::AcceptPacer::FindListeners(address_, port_);
  if (listeners.ok()) {
    paced_listeners_ = *std::move(listeners);
    for (int fd : paced_listeners_) {
      rpc::AcceptPacer::Process().Register(
          fd, absl::StrCat("metrics endpoint ", Endpoint(address_, port_)));
    }
  }
}

MetricsServer::~MetricsServer() {
  for (int fd : paced_listeners_) rpc::AcceptPacer::Process().Unregister(fd);
}

void MetricsServer::AddCollectable(
    std::shared_ptr<prometheus::Collectable> collectable) {
  if (collectable == nullptr) return;
  absl::MutexLock lock(&mu_);
  for (const auto& c : collectables_) {
    if (c == collectable) return;
  }
  try {
    exposer_->RegisterCollectable(collectable);
  } catch (const std::exception&) {
    // Registration only appends to a list; nothing to report to a caller
    // that could react.
    return;
  }
  collectables_.push_back(std::move(collectable));
}

}  // namespace shardd::metrics
