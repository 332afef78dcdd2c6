#ifndef SHARDD_DAEMON_RPC_ACCEPT4_INTERPOSER_H_
#define SHARDD_DAEMON_RPC_ACCEPT4_INTERPOSER_H_

#include "absl/strings/string_view.h"

namespace shardd::rpc {

// Whether this process's accept4 and accept are the ones in
// accept4_interposer.cc (what keeps gRPC's listeners through a descriptor
// shortage, see AcceptRetry, and keeps the metrics endpoint from spinning
// meanwhile, see AcceptPacer), rather than libc's. False when the binary was
// linked without it, or statically against a library that calls them inside
// itself. For a start-up check in main(). Thread-safe.
bool AcceptInterposerInstalled();

// For main(), before the servers start: starts the process's AcceptRetry,
// and when the interposer is not the accept4 and accept in use, says on
// stderr that `program`'s listeners would stop for good at the first
// descriptor shortage.
void PrepareAcceptRetry(absl::string_view program);

}  // namespace shardd::rpc

#endif  // SHARDD_DAEMON_RPC_ACCEPT4_INTERPOSER_H_
