#include "daemon/rpc/tls_flags.h"

#include <cstdio>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this process; with --tls_key turns TLS "
          "on for the TCP gRPC APIs (empty: TLS off, plaintext)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(bool, insecure, false,
          "allow plaintext gRPC (no TLS) on addresses beyond this machine: "
          "anyone who reaches such a port can call it, so only on a network "
          "you trust; without TLS and without this flag only loopback "
          "addresses and Unix sockets are allowed");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) that sign the other side's certificates: "
          "servers then require and verify client certificates (mutual "
          "TLS), clients verify the server against it");

ABSL_FLAG(absl::Duration, tls_refresh_interval, absl::Seconds(60),
          "how often --tls_cert, --tls_key and --tls_ca are read again: a "
          "rotated certificate (cert-manager, kubelet) is used for new "
          "connections without a restart; a set that does not parse or "
          "whose key is not the certificate's is skipped and the last good "
          "one kept (at least 1s)");

namespace shardd::rpc {

TlsPaths TlsPathsFromFlags() {
  TlsPaths paths;
  paths.cert = absl::GetFlag(FLAGS_tls_cert);
  paths.key = absl::GetFlag(FLAGS_tls_key);
  paths.ca = absl::GetFlag(FLAGS_tls_ca);
  return paths;
}

absl::StatusOr<TlsConfig> TlsConfigFromFlags(TlsRole role,
                                             const std::string& who) {
  TlsReloadOptions reload;
  reload.interval = absl::GetFlag(FLAGS_tls_refresh_interval);
  reload.who = who;
  return TlsConfig::Load(TlsPathsFromFlags(), role, reload);
}

absl::StatusOr<int> CheckPlaintextFromFlags(
    const char* who, const TlsConfig& tls,
    const std::vector<Endpoint>& endpoints) {
  std::vector<Endpoint> exposed;
  absl::Status s = CheckPlaintextEndpoints(
      endpoints, tls.enabled(), absl::GetFlag(FLAGS_insecure), &exposed);
  if (!s.ok()) return s;
  for (const Endpoint& e : exposed) {
    std::fprintf(stderr,
                 "%s: WARNING: --insecure: plaintext gRPC on %s=%s, beyond "
                 "this machine; anyone who reaches it can call it\n",
                 who, e.flag.c_str(), e.address.c_str());
  }
  return static_cast<int>(exposed.size());
}

absl::StatusOr<ServerTls> ServerTlsFromFlags(
    const char* who, const std::vector<Endpoint>& endpoints,
    const std::string& health_listen) {
  absl::StatusOr<TlsConfig> tls = TlsConfigFromFlags(TlsRole::kServer, who);
  if (!tls.ok()) {
    return absl::Status(tls.status().code(), tls.status().ToString());
  }
  ServerTls out;
  out.enabled = tls->enabled();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
      tls->ServerCredentials();
  if (!server.ok()) {
    return absl::Status(server.status().code(), server.status().ToString());
  }
  out.server_credentials = *std::move(server);
  out.channel_credentials = tls->ChannelCredentials();
  std::fprintf(stderr, "%s: %s\n", who, tls->Describe().c_str());
  const absl::StatusOr<int> insecure =
      CheckPlaintextFromFlags(who, *tls, endpoints);
  if (!insecure.ok()) return insecure.status();
  out.insecure_endpoints = *insecure;
  out.config = *std::move(tls);
  if (out.enabled && health_listen.empty()) {
    std::fprintf(stderr,
                 "%s: no --health_listen: grpc.health.v1 is only served over "
                 "TLS, which probes cannot use\n",
                 who);
  }
  return out;
}

}  // namespace shardd::rpc
