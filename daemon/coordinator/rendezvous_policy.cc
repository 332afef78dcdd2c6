#include "daemon/coordinator/rendezvous_policy.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/rendezvous_key.h"

namespace shardd::coordinator {
namespace {

const char* Verb(RendezvousAccess access) {
  switch (access) {
    case RendezvousAccess::kSet:
      return "RendezvousSet";
    case RendezvousAccess::kGet:
      return "RendezvousGet";
    case RendezvousAccess::kWait:
      return "RendezvousWait";
  }
  return "Rendezvous";
}

}  // namespace

absl::Status AuthorizeRendezvous(RendezvousAccess access,
                                 const RendezvousCaller& caller,
                                 absl::Span<const std::string> keys,
                                 int world_size) {
  const char* verb = Verb(access);
  if (!caller.token_given) {
    return absl::UnauthenticatedError(absl::StrCat(
        verb,
        ": lease_token is required (rule: only live members of the epoch use "
        "the rendezvous store; Join first)"));
  }
  if (!caller.rank.has_value()) {
    return absl::UnauthenticatedError(absl::StrCat(
        verb,
        ": no live member holds this lease_token (rule: only live members of "
        "the epoch use the rendezvous store; a member whose lease expired or "
        "was replaced must Join again)"));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(verb, ": no keys"));
  }
  for (const std::string& key : keys) {
    absl::StatusOr<core::RendezvousKey> parsed = core::ParseRendezvousKey(key);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(verb, ": ", parsed.status().message()));
    }
    if (parsed->owner >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          verb, ": key '", key, "' is owned by rank ", parsed->owner,
          ", which the job does not have (W = ", world_size,
          "; rule: every key belongs to a rank of the job)"));
    }
    if (access == RendezvousAccess::kSet && parsed->owner != *caller.rank) {
      return absl::PermissionDeniedError(
          absl::StrCat(verb, ": rank ", *caller.rank, " may not write key '",
                       key, "', which belongs to rank ", parsed->owner,
                       " (rule: a member writes only its own rank's keys)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace shardd::coordinator
