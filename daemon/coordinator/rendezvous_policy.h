#ifndef SHARDD_DAEMON_COORDINATOR_RENDEZVOUS_POLICY_H_
#define SHARDD_DAEMON_COORDINATOR_RENDEZVOUS_POLICY_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace shardd::coordinator {

enum class RendezvousAccess { kSet, kGet, kWait };

// Who is calling, as the coordinator resolved it from the request's
// lease_token.
struct RendezvousCaller {
  // The request carried a lease_token at all.
  bool token_given = false;
  // The rank of the live member holding that token; nullopt when none does
  // (never joined, lease expired, replaced, a forged token).
  std::optional<int> rank;
};

// Decides whether `caller` may `access` `keys` of the rendezvous store of a
// job of `world_size` ranks (the key grammar: core/rendezvous_key.h). The
// rules, in the order they are checked, each refusal naming its rule:
//   1. Only live members use the store: no token, or a token no live member
//      holds, is UNAUTHENTICATED.
//   2. Every key follows the grammar and names a rank of the job as its
//      owner; no rank owns anything else: INVALID_ARGUMENT.
//   3. A member writes only keys its own rank owns: PERMISSION_DENIED.
//      Reads (Get, Wait) of any rank's key are allowed.
// The epoch (stale, not begun) and write-once rules are the store's, which
// checks them after this decision. Pure: no state, no I/O.
absl::Status AuthorizeRendezvous(RendezvousAccess access,
                                 const RendezvousCaller& caller,
                                 absl::Span<const std::string> keys,
                                 int world_size);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_RENDEZVOUS_POLICY_H_
