#ifndef SHARDD_DAEMON_COMM_NCCL_NCCL_UNIQUE_ID_H_
#define SHARDD_DAEMON_COMM_NCCL_NCCL_UNIQUE_ID_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/comm/store.h"

// The rendezvous of an NCCL communicator through the Store: rank 0 creates
// the ncclUniqueId and publishes it under a key scoped by epoch and group
// and owned by rank 0's job rank (core/rendezvous_key.h: the coordinator
// lets only that member write it); every other rank waits for it (with the
// connect deadline) and reads it.
//
// Pure logic without CUDA headers: the id is handled as its 128 raw bytes
// (NCCL_UNIQUE_ID_BYTES), and creating one is a callback, so the CPU tests
// run the whole exchange against an in-process Store.
namespace shardd::comm::nccl {

inline constexpr int kNcclUniqueIdBytes = 128;
using NcclUniqueIdBytes = std::array<uint8_t, kNcclUniqueIdBytes>;

// "nccl/<owner>/epoch/<epoch>/<group>/id" (core::NcclIdKey), `owner` the
// job rank of the group's rank 0. A new epoch never reads an old epoch's
// id, so a communicator of a dead epoch cannot be joined by mistake.
std::string NcclUniqueIdKey(int owner, int64_t epoch, absl::string_view group);

// INVALID_ARGUMENT unless the group name is non-empty and made of
// [A-Za-z0-9_.-] (it becomes one component of a store key).
absl::Status ValidateGroupName(absl::string_view group);

// 256 lowercase hex digits. Hex rather than raw bytes because stores may
// carry values through text (logs, etcd-style HTTP APIs), and the id holds
// NUL bytes.
std::string EncodeNcclUniqueId(const NcclUniqueIdBytes& id);

// The inverse of EncodeNcclUniqueId. DATA_LOSS when the value is not exactly
// 256 hex digits: the store does not hold what rank 0 wrote.
absl::StatusOr<NcclUniqueIdBytes> DecodeNcclUniqueId(absl::string_view value);

struct UniqueIdExchange {
  int rank = 0;
  int64_t epoch = 0;
  std::string group;
  // How long ranks other than 0 wait for rank 0's id.
  absl::Duration timeout = absl::Seconds(60);
  // The job rank of the group's rank 0, which writes the id: its key's
  // owner.
  int root_job_rank = 0;
};

// Rank 0: calls `create` (ncclGetUniqueId in the backend), Sets the encoded
// id and returns it. Other ranks: Wait for the key until the timeout
// (DEADLINE_EXCEEDED naming the key), Get and decode it (DATA_LOSS when
// malformed). Store errors are returned with the key added to the message.
absl::StatusOr<NcclUniqueIdBytes> ExchangeNcclUniqueId(
    Store& store, const UniqueIdExchange& exchange,
    const std::function<absl::StatusOr<NcclUniqueIdBytes>()>& create);

}  // namespace shardd::comm::nccl

#endif  // SHARDD_DAEMON_COMM_NCCL_NCCL_UNIQUE_ID_H_
