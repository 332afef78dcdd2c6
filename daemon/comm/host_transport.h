#ifndef SHARDD_DAEMON_COMM_HOST_TRANSPORT_H_
#define SHARDD_DAEMON_COMM_HOST_TRANSPORT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::comm {

// What shardd's --collective_transport asks for: kAuto uses shared memory
// when every member of a group is on this host, kTcp never, kShm always
// (and refuses to form a group that cannot).
enum class TransportMode { kAuto, kTcp, kShm };

// What a CPU communicator runs on.
enum class HostTransport { kTcp, kShm };

// "auto", "tcp", "shm"; INVALID_ARGUMENT naming the text otherwise.
absl::StatusOr<TransportMode> ParseTransportMode(absl::string_view text);
absl::string_view TransportModeName(TransportMode mode);
absl::string_view HostTransportName(HostTransport transport);

// The transport a group forms on, from what every rank published: its host
// identity (HostIdentity::ToString, or "" when it could not read one).
// Every rank calls it with the same vector and gets the same answer: kShm
// when the mode allows it and all identities are equal and non-empty, else
// kTcp; FAILED_PRECONDITION (naming the first rank that differs from rank
// 0) when the mode is kShm and shared memory is not possible. A group of
// one rank has no peer to share anything with: kTcp in every mode (Gloo
// opens no connection for it).
absl::StatusOr<HostTransport> ChooseHostTransport(
    TransportMode mode, const std::vector<std::string>& identities);

// The second agreement, once rank 0 created the segment and every rank
// tried to map it: `mapped[r]` is "ok" or why rank r could not. kShm when
// all are "ok"; otherwise kTcp, or FAILED_PRECONDITION naming the first
// rank that failed (and why) when the mode is kShm. The same vector gives
// the same answer on every rank.
absl::StatusOr<HostTransport> ChooseAfterMapping(
    TransportMode mode, const std::vector<std::string>& mapped);

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_HOST_TRANSPORT_H_
