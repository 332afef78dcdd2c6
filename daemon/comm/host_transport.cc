#include "daemon/comm/host_transport.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::comm {

absl::StatusOr<TransportMode> ParseTransportMode(absl::string_view text) {
  if (text == "auto") return TransportMode::kAuto;
  if (text == "tcp") return TransportMode::kTcp;
  if (text == "shm") return TransportMode::kShm;
  return absl::InvalidArgumentError(absl::StrCat("collective transport '", text,
                                                 "' is not auto, tcp or shm"));
}

absl::string_view TransportModeName(TransportMode mode) {
  switch (mode) {
    case TransportMode::kAuto:
      return "auto";
    case TransportMode::kTcp:
      return "tcp";
    case TransportMode::kShm:
      return "shm";
  }
  return "unknown";
}

absl::string_view HostTransportName(HostTransport transport) {
  return transport == HostTransport::kShm ? "shm" : "tcp";
}

absl::StatusOr<HostTransport> ChooseHostTransport(
    TransportMode mode, const std::vector<std::string>& identities) {
  if (mode == TransportMode::kTcp || identities.size() <= 1) {
    return HostTransport::kTcp;
  }
  for (size_t r = 0; r < identities.size(); ++r) {
    const bool differs =
        identities[r].empty() || identities[r] != identities[0];
    if (!differs) continue;
    if (mode == TransportMode::kAuto) return HostTransport::kTcp;
    return absl::FailedPreconditionError(absl::StrCat(
        "collective transport shm needs every rank of the group on one host "
        "(same boot, IPC, pid and network namespaces, /dev/shm): rank ",
        r,
        identities[r].empty()
            ? " could not read its host identity"
            : absl::StrCat(" has '", identities[r], "', rank 0 '",
                           identities[0], "'")));
  }
  return HostTransport::kShm;
}

absl::StatusOr<HostTransport> ChooseAfterMapping(
    TransportMode mode, const std::vector<std::string>& mapped) {
  for (size_t r = 0; r < mapped.size(); ++r) {
    if (mapped[r] == "ok") continue;
    if (mode != TransportMode::kShm) return HostTransport::kTcp;
    return absl::FailedPreconditionError(
        absl::StrCat("collective transport shm: rank ", r,
                     " could not map the group's segment: ", mapped[r]));
  }
  return HostTransport::kShm;
}

}  // namespace shardd::comm
