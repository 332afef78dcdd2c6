#ifndef SHARDD_DAEMON_TESTING_PEER_CERTIFICATE_H_
#define SHARDD_DAEMON_TESTING_PEER_CERTIFICATE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace shardd::tests {

// A channel to `address` that never shares a connection with another
// channel (a subchannel pool of its own): what a test needs to be sure that
// a call makes a new TLS handshake.
std::shared_ptr<grpc::Channel> FreshChannel(
    const std::string& address,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials);

// The leaf certificate (PEM, the auth context's x509_pem_cert) that the
// server presented on `channel`'s connection, read after a
// grpc.health.v1.Health/Check of service "" (any answer of the server
// proves the handshake). The call's status when it fails (UNAVAILABLE for
// a refused handshake); INTERNAL when the connection has no certificate.
absl::StatusOr<std::string> PresentedCertificate(
    const std::shared_ptr<grpc::Channel>& channel,
    absl::Duration timeout = absl::Seconds(5));

// The first CERTIFICATE block of a PEM file, for comparison with
// PresentedCertificate; empty when the file cannot be read or has none.
std::string FirstCertificateOfFile(const std::string& path);

}  // namespace shardd::tests

#endif  // SHARDD_DAEMON_TESTING_PEER_CERTIFICATE_H_
