#ifndef SHARDD_DAEMON_RPC_UNIX_SOCKET_PROBE_H_
#define SHARDD_DAEMON_RPC_UNIX_SOCKET_PROBE_H_

#include <string>

#include "absl/status/status.h"

namespace shardd::rpc {

// Decides whether a Unix socket path may be taken for a new server.
//
// A daemon that finds its --listen_unix path already there must tell a
// stale socket (its previous process died without unlinking it: remove it
// and listen) from one a running process serves (another daemon started
// with the same path by mistake). Unlinking the latter would not stop that
// process: its connected trainers would stay with it while every new one
// came to us, two daemons each believing it serves the node.
//
// OK: nothing is at `path`, or a socket nobody accepts on (connect is
// refused). UNAVAILABLE naming the path: a process accepts connections
// there (it may be one that is exiting: SIGKILLed, its listening socket
// closes only after the kernel has torn down its memory, so a caller may
// retry for a moment). FAILED_PRECONDITION: `path` is not a socket, or
// cannot be probed; PERMISSION_DENIED: this process may not look at it;
// INVALID_ARGUMENT: too long for a socket address. Messages name the path and
// errno's text. Probes with a non-blocking connect, so it never waits on the
// other process. Thread-safe.
absl::Status CheckUnixSocketIsFree(const std::string& path);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_UNIX_SOCKET_PROBE_H_
