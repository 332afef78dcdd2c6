#ifndef SHARDD_DAEMON_RPC_ACCEPT_RETRY_H_
#define SHARDD_DAEMON_RPC_ACCEPT_RETRY_H_

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::rpc {

// A socket address with its length, as getsockname and connect use them.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
};

// Keeps a process's gRPC listeners accepting through a shortage of file
// descriptors (or of socket memory).
//
// Why: the gRPC we build against (Debian 12's 1.51) ends a listener for good
// when accept4 fails with anything but EAGAIN, ECONNABORTED or EINTR. After
// one EMFILE ("tcp_server_posix.cc: Failed accept4: Too many open files") the
// port stays in LISTEN, the kernel goes on queueing connections, and nothing
// accepts them again, even once descriptors are free: a coordinator or
// daemon no client can reach until it is restarted. Later gRPC releases keep
// the listener and retry a second later. This class gives 1.51 that
// behaviour from outside. The process's accept4 (accept4_interposer.cc,
// linked into the coordinator and shardd) reports such a failure on a
// non-blocking listener as EAGAIN, which makes gRPC wait for the listener's
// next readiness, and calls Deferred(fd). A thread of this class then
// connects to that listener once per `period` until a connection has been
// made: its arrival is the readiness that wakes gRPC's edge-triggered poller,
// which accepts what queued meanwhile. Connecting takes a descriptor too, so
// the kick gets through only once descriptors are free again, which is when
// accepting can succeed; the kick's own socket is closed at once, before
// gRPC accepts, so it does not take the descriptor accepting needs.
//
// Each listener's shortage is one episode, from its first deferral to the
// first time its queue is found empty (accept4 says EAGAIN for real: all
// that waited has been accepted). Its start and its end each write one line
// on stderr, saying what happened, how many connections waited it out and
// for how long; never a line per failed accept.
//
// Thread-safe. Deferred, Accepted and Drained never wait on the network
// (they run on gRPC's poller threads). Process() is started on first use
// and never destroyed.
class AcceptRetry {
 public:
  struct Options {
    // Time from a deferral to the kick, and between kicks while they fail.
    absl::Duration period = absl::Seconds(1);
    // Time from a deferral to the next kick when the kick before it got
    // connections accepted: descriptors are coming free (the queue may
    // hold many stale connections, each accepted and closed in turn, a
    // round of as many as there are free descriptors), so the next round
    // need not wait a whole period.
    absl::Duration progress_period = absl::Milliseconds(10);
    // How long a kick waits for a TCP connect still in progress.
    absl::Duration connect_wait = absl::Milliseconds(200);
  };

  struct Counts {
    int64_t deferred = 0;  // Failed accepts reported as EAGAIN.
    int64_t episodes = 0;  // Shortages begun (first deferral per listener).
    int64_t kicks = 0;     // Connections made to wake a listener.
    int64_t kick_failures = 0;  // Kicks that could not connect (retried).
    int64_t accepted = 0;       // Connections accepted during episodes.
    int64_t recovered = 0;      // Episodes ended with the queue drained.
    int64_t abandoned = 0;      // Episodes ended because nothing listens.
  };

  explicit AcceptRetry(Options options);
  ~AcceptRetry();
  AcceptRetry(const AcceptRetry&) = delete;
  AcceptRetry& operator=(const AcceptRetry&) = delete;

  // The process's instance (default options), as the interposer uses it.
  static AcceptRetry& Process();

  // Whether accept4 failing with `error` on a listener is a shortage to
  // wait out rather than an error to report: EMFILE, ENFILE (descriptors),
  // ENOBUFS, ENOMEM (kernel memory), and only on a non-blocking listener (a
  // blocking caller never expects EAGAIN).
  static bool ShouldDefer(int error, bool nonblocking);

  // Where a kick for a listener bound to `local` connects: the loopback
  // address of its family for a wildcard address (0.0.0.0, ::), the address
  // itself otherwise, the same path for a Unix socket. INVALID_ARGUMENT for
  // a family other than AF_INET, AF_INET6, AF_UNIX, or an unnamed socket.
  static absl::StatusOr<SocketAddress> KickTarget(const SocketAddress& local);

  // "127.0.0.1:7070", "[::1]:7070", "unix:/run/shardd.sock", for messages.
  static std::string Describe(const SocketAddress& address);

  // This process's soft open-file limit ("1024", "unlimited"), for messages.
  static std::string OpenFileLimit();

  // accept4 on listener `listen_fd` failed with `error` and was reported as
  // EAGAIN: starts (or continues) the listener's episode and schedules a
  // kick `period` from now unless one is scheduled.
  void Deferred(int listen_fd, int error);

  // accept4 on `listen_fd` succeeded: counted in its episode, if one is
  // open. Cheap when none is (one atomic load), as it runs on every accept.
  void Accepted(int listen_fd);

  // accept4 on `listen_fd` found nothing to accept (EAGAIN): ends its
  // episode, if one is open. As cheap as Accepted when none is.
  void Drained(int listen_fd);

  Counts counts() const;

 private:
  struct Episode {
    uint64_t id = 0;
    SocketAddress target;
    std::string name;
    MonoTime began;
    MonoTime next_kick;
    bool kick_due = false;  // A kick is scheduled (cleared once one landed).
    int64_t deferred = 0;
    int64_t accepted = 0;
    int64_t accepted_at_kick = 0;  // `accepted` when the last kick started.
  };

  // When the next kick of `episode`, after a deferral at `now`, is due.
  MonoTime NextKick(const Episode& episode, MonoTime now) const;

  void Run();
  // One connection to `target`, closed at once. OK once it connected (or
  // the connect is under way after connect_wait); NOT_FOUND when nothing
  // listens there; UNAVAILABLE otherwise (no descriptor, full backlog).
  absl::Status Kick(const SocketAddress& target) const;

  const Options options_;
  std::atomic<int> open_episodes_{0};
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, Episode> episodes_ ABSL_GUARDED_BY(mu_);  // By listener fd.
  uint64_t next_episode_id_ ABSL_GUARDED_BY(mu_) = 1;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_ACCEPT_RETRY_H_
