#ifndef SHARDD_DAEMON_COMM_HOST_IDENTITY_H_
#define SHARDD_DAEMON_COMM_HOST_IDENTITY_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::comm {

// What two processes must share to run a collective through one POSIX
// shared-memory segment and watch each other's pids: the same kernel boot,
// IPC and pid namespaces, and the same /dev/shm file system. And the same
// network namespace: processes that were given network namespaces of
// their own are deployed as separate hosts (containers, the fault tests'
// partitions), and their collectives must travel, and fail, as the
// network between them says.
struct HostIdentity {
  std::string boot_id;   // /proc/sys/kernel/random/boot_id
  uint64_t ipc_ns = 0;   // inode of /proc/self/ns/ipc
  uint64_t pid_ns = 0;   // inode of /proc/self/ns/pid
  uint64_t net_ns = 0;   // inode of /proc/self/ns/net
  uint64_t shm_dev = 0;  // st_dev of the shared-memory directory

  // "boot=<id> ipc=<inode> pid=<inode> net=<inode> shm=<dev>": what ranks
  // publish and compare (equal strings, equal identities).
  std::string ToString() const;
};

// This process's identity; `shm_dir` is where POSIX shared memory lives
// (/dev/shm on Linux). An error (UNAVAILABLE, naming the file) when one of
// the files cannot be read: the caller then does not use shared memory.
absl::StatusOr<HostIdentity> ReadHostIdentity(
    absl::string_view shm_dir = "/dev/shm");

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_HOST_IDENTITY_H_
