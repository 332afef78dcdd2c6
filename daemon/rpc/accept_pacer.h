#ifndef SHARDD_DAEMON_RPC_ACCEPT_PACER_H_
#define SHARDD_DAEMON_RPC_ACCEPT_PACER_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::rpc {

// Keeps a server that polls a listener and accepts when it is readable from
// spinning while the process is out of file descriptors.
//
// Why: civetweb (the /metrics endpoint) poll()s its blocking listener and
// calls accept when it is readable. Out of descriptors, accept fails with
// EMFILE and leaves the connection queued, so poll says readable again at
// once: civetweb's master thread spins a core for as long as the shortage
// lasts (2.75 CPU-s in 3 s, measured on a coordinator), on a machine whose
// other processes need the CPU. The process's accept and accept4
// (accept4_interposer.cc) tell Failed() of every failed accept; on a
// registered listener a shortage (EMFILE, ENFILE, ENOBUFS, ENOMEM) then
// pauses the calling thread for `pause` before the error is returned, so
// the server retries a few times a second instead, and accepts what waited
// at most `pause` after descriptors are free again. Only registered
// listeners are paced: Gloo's pairs accept on blocking listeners too, from
// their device's event loop, which must never sleep.
//
// A listener's shortage is one episode, from its first paced failure to its
// next successful accept; its start and its end each write one line on
// stderr (never a line per failed accept).
//
// Thread-safe. Failed and Accepted cost one atomic load while nothing is
// registered (or no episode is open). Process() is created on first use and
// never destroyed.
class AcceptPacer {
 public:
  struct Options {
    // How long a failed accept on a registered listener waits.
    absl::Duration pause = absl::Milliseconds(100);
  };

  struct Counts {
    int64_t paced = 0;      // Failed accepts followed by a pause.
    int64_t episodes = 0;   // Shortages begun (first pause per listener).
    int64_t recovered = 0;  // Episodes ended by a successful accept.
  };

  explicit AcceptPacer(Options options) : options_(options) {}
  AcceptPacer(const AcceptPacer&) = delete;
  AcceptPacer& operator=(const AcceptPacer&) = delete;

  // The process's instance (default options), as the interposer uses it.
  static AcceptPacer& Process();

  // Whether an accept that failed with `error` is a shortage: EMFILE,
  // ENFILE (descriptors), ENOBUFS, ENOMEM (kernel memory).
  static bool IsShortage(int error);

  // The listening TCP sockets of this process bound to `address` (an IPv4
  // or IPv6 literal, as given to bind: "0.0.0.0" matches only a wildcard
  // socket) and `port`, found among /proc/self/fd. NOT_FOUND when there is
  // none; INVALID_ARGUMENT when `address` is not an IP literal.
  static absl::StatusOr<std::vector<int>> FindListeners(
      const std::string& address, int port);

  // Paces accepts on `listen_fd` from now on; `name` names it in messages
  // ("metrics endpoint 127.0.0.1:9464"). The owner unregisters it before it
  // closes the descriptor (whose number may then be reused by a listener
  // that must not be paced).
  void Register(int listen_fd, std::string name);
  void Unregister(int listen_fd);

  // accept on `listen_fd` failed with `error`. On a registered listener and
  // a shortage: counts it, pauses the calling thread for `pause` and returns
  // true; otherwise returns false at once. errno is left as it was.
  bool Failed(int listen_fd, int error);

  // accept on `listen_fd` succeeded: ends its episode if one is open.
  void Accepted(int listen_fd);

  Counts counts() const;

 private:
  struct Listener {
    std::string name;
    bool short_now = false;  // An episode is open.
    MonoTime began;
    int64_t paced = 0;  // In the open episode.
  };

  const Options options_;
  std::atomic<int> registered_{0};
  std::atomic<int> open_episodes_{0};
  mutable absl::Mutex mu_;
  std::map<int, Listener> listeners_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_ACCEPT_PACER_H_
