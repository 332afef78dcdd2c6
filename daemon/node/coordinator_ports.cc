#include "daemon/node/coordinator_ports.h"

#include <utility>

#include "daemon/comm/coordinator_store/coordinator_store.h"
#include "daemon/coordinator/member_client.h"
#include "daemon/node/member_client_membership.h"

namespace shardd::node {

void UseCoordinator(const std::string& address,
                    std::shared_ptr<grpc::ChannelCredentials> credentials,
                    NodeOptions* options) {
  options->join_membership = [address, credentials](const MembershipJoin& join)
      -> absl::StatusOr<std::unique_ptr<Membership>> {
    coordinator::MemberClientOptions mo;
    mo.coordinator_address = address;
    mo.credentials = credentials;
    mo.rank = join.rank;
    mo.identity = join.identity;
    mo.peer_address = join.peer_address;
    mo.info = join.info;
    mo.initial_join_timeout = join.initial_join_timeout;
    mo.shard_status = join.shard_status;
    mo.checkpoints = join.checkpoints;
    mo.unreachable_peers = join.unreachable_peers;
    mo.trainer = join.trainer;
    absl::StatusOr<std::unique_ptr<MemberClientMembership>> joined =
        MemberClientMembership::Join(mo);
    if (!joined.ok()) return joined.status();
    return std::unique_ptr<Membership>(std::move(*joined));
  };
  options->store_of_epoch =
      [address, credentials](
          int64_t epoch, int rank,
          const std::string& lease_token) -> std::unique_ptr<comm::Store> {
    comm::CoordinatorStoreOptions so;
    so.rank = rank;
    so.lease_token = lease_token;
    so.credentials = credentials;
    return comm::CoordinatorStore::Connect(address, epoch, so);
  };
}

}  // namespace shardd::node
