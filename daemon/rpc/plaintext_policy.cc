#include "daemon/rpc/plaintext_policy.h"

#include <arpa/inet.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace shardd::rpc {
namespace {

// The host of "host:port" / "[v6]:port", without brackets.
std::string HostOf(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos) return std::string(address);
    return std::string(address.substr(1, close - 1));
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return std::string(address);
  // More than one colon without brackets: a bare IPv6 literal.
  if (address.find(':') != colon) return std::string(address);
  return std::string(address.substr(0, colon));
}

}  // namespace

bool StaysOnThisMachine(absl::string_view address) {
  if (absl::StartsWith(address, "unix:") ||
      absl::StartsWith(address, "unix-abstract:") ||
      absl::StartsWith(address, "/")) {
    return true;
  }
  absl::string_view rest = address;
  for (absl::string_view scheme : {"dns:///", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(rest, scheme)) rest.remove_prefix(scheme.size());
  }
  const std::string host = absl::AsciiStrToLower(HostOf(rest));
  if (host == "localhost" || absl::EndsWith(host, ".localhost")) return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

absl::Status CheckPlaintextEndpoints(const std::vector<Endpoint>& endpoints,
                                     bool tls_enabled, bool insecure,
                                     std::vector<Endpoint>* exposed) {
  exposed->clear();
  if (tls_enabled) return absl::OkStatus();
  for (const Endpoint& e : endpoints) {
    if (e.address.empty() || StaysOnThisMachine(e.address)) continue;
    if (!insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          e.flag, "=", e.address,
          ": plaintext gRPC beyond this machine is refused (anyone who "
          "reaches the port could call it): give --tls_cert and --tls_key "
          "(mutual with --tls_ca), use a loopback address or a Unix "
          "socket, or pass --insecure to accept plaintext on a network you "
          "trust"));
    }
    exposed->push_back(e);
  }
  return absl::OkStatus();
}

}  // namespace shardd::rpc
