#ifndef SHARDD_DAEMON_METRICS_METRICS_SERVER_H_
#define SHARDD_DAEMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace shardd::metrics {

// Serves /metrics (Prometheus text format) over HTTP: a registry (or any
// collectable, e.g. a registry behind a ScrapeRecorder), the process_*
// metrics (ProcessCollector) and any collectable added later.
//
// A thin wrapper over prometheus::Exposer (civetweb) whose errors come back
// as absl::Status: no exception leaves this class.
//
// Thread-safe. Owns the HTTP server (stopped on destruction) and shares
// ownership of the registry and the added collectables.
class MetricsServer {
 public:
  // HTTP connections served at once, and how long one may take to send its
  // request (or to read the reply) before the server drops it: a scrape
  // queued behind idle connections waits at most this long.
  static constexpr int kServerThreads = 4;
  static constexpr absl::Duration kRequestTimeout = absl::Seconds(2);

  // Listens on `address` (an IPv4 or IPv6 literal, e.g. "0.0.0.0") and
  // `port` (0: a free port the kernel picks; see port()).
  //   INVALID_ARGUMENT  port outside [0, 65535], address not an IP literal,
  //                     registry null (a prometheus::Registry converts)
  //   ALREADY_EXISTS    address:port is in use
  //   UNAVAILABLE       anything else that kept the server from listening
  // Every message names the address.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, int port,
      std::shared_ptr<prometheus::Collectable> registry);
  ~MetricsServer();

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The port it listens on.
  int port() const { return port_; }
  // The address as given to Start.
  const std::string& address() const { return address_; }

  // Serves `collectable` on /metrics too, from the next scrape on (for
  // values computed at scrape time, which a registry cannot hold). Keeps
  // it alive while serving.
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

 private:
  MetricsServer(std::string address, int port,
                std::shared_ptr<prometheus::Collectable> registry,
                std::shared_ptr<prometheus::Collectable> process,
                std::unique_ptr<prometheus::Exposer> exposer);

  const std::string address_;
  const int port_;
  // The HTTP server's listening sockets, registered with
  // rpc::AcceptPacer::Process() (unregistered before the server closes
  // them): out of file descriptors, civetweb would retry accept in a busy
  // loop.
  std::vector<int> paced_listeners_;
  const std::shared_ptr<prometheus::Collectable> registry_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_
      ABSL_GUARDED_BY(mu_);
  // Declared last: stops serving before anything it serves is released.
  const std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace shardd::metrics

#endif  // SHARDD_DAEMON_METRICS_METRICS_SERVER_H_
