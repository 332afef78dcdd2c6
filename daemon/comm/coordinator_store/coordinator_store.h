#ifndef SHARDD_DAEMON_COMM_COORDINATOR_STORE_COORDINATOR_STORE_H_
#define SHARDD_DAEMON_COMM_COORDINATOR_STORE_COORDINATOR_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/comm/store.h"
#include "grpcpp/grpcpp.h"
#include "shardd/v1/coordinator.grpc.pb.h"

namespace shardd::comm {

struct CoordinatorStoreOptions {
  // The caller's rank, for the coordinator's log (-1: unknown).
  int rank = -1;
  // The member's lease token (MemberClient::lease_token()): the coordinator
  // serves the rendezvous store to live members only, and lets each write
  // only its own rank's keys (core/rendezvous_key.h). Empty: every call is
  // UNAUTHENTICATED.
  std::string lease_token;
  // Deadline of Set and Get.
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Longest client deadline of one Wait; an infinite (or longer) timeout is
  // cut to this, so that no call waits forever.
  absl::Duration max_wait = absl::Minutes(5);
  // Credentials of the channel Connect creates (rpc::TlsConfig for TLS to
  // the coordinator). Null: insecure.
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
};

// The rendezvous Store of one membership epoch, backed by the coordinator's
// epoch-scoped key-value store (Coordinator.RendezvousSet/Get/Wait).
//
// Every call carries the epoch given at construction, so a communicator of
// an old epoch can never read a newer epoch's keys: once the coordinator
// has moved on, every call fails with ABORTED (a Wait in progress too).
// Every call carries the member's lease token: the coordinator refuses a
// key the member's rank does not own (PERMISSION_DENIED), a key outside
// the grammar (INVALID_ARGUMENT) and a second value for a Gloo or NCCL
// key (ALREADY_EXISTS: they are write-once per epoch).
// Statuses keep the coordinator's code (FromGrpc); messages name the key
// and the epoch. Wait's client deadline is its timeout (capped at
// max_wait); on expiry it returns DEADLINE_EXCEEDED naming the keys.
//
// Thread-safe (gRPC stubs are). Shares ownership of the channel.
class CoordinatorStore : public Store {
 public:
  CoordinatorStore(std::shared_ptr<grpc::Channel> channel, int64_t epoch,
                   CoordinatorStoreOptions options = {});

  // A store on a new channel to `address` (host:port), with
  // options.credentials.
  static std::unique_ptr<CoordinatorStore> Connect(
      const std::string& address, int64_t epoch,
      CoordinatorStoreOptions options = {});

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

  int64_t epoch() const { return epoch_; }

 private:
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<shardd::v1::Coordinator::Stub> stub_;
  const int64_t epoch_;
  const CoordinatorStoreOptions options_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_COORDINATOR_STORE_COORDINATOR_STORE_H_
