#include "daemon/comm/host_identity.h"

#include <errno.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace shardd::comm {
namespace {

absl::StatusOr<uint64_t> Inode(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  return static_cast<uint64_t>(st.st_ino);
}

}  // namespace

std::string HostIdentity::ToString() const {
  return absl::StrCat("boot=", boot_id, " ipc=", ipc_ns, " pid=", pid_ns,
                      " net=", net_ns, " shm=", shm_dev);
}

absl::StatusOr<HostIdentity> ReadHostIdentity(absl::string_view shm_dir) {
  HostIdentity identity;
  constexpr char kBootId[] = "/proc/sys/kernel/random/boot_id";
  std::ifstream boot(kBootId);
  std::string line;
  if (!boot || !std::getline(boot, line)) {
    return absl::UnavailableError(absl::StrCat("cannot read ", kBootId));
  }
  identity.boot_id = std::string(absl::StripAsciiWhitespace(line));
  if (identity.boot_id.empty()) {
    return absl::UnavailableError(absl::StrCat(kBootId, " is empty"));
  }
  absl::StatusOr<uint64_t> ipc = Inode("/proc/self/ns/ipc");
  if (!ipc.ok()) return ipc.status();
  absl::StatusOr<uint64_t> pid = Inode("/proc/self/ns/pid");
  if (!pid.ok()) return pid.status();
  absl::StatusOr<uint64_t> net = Inode("/proc/self/ns/net");
  if (!net.ok()) return net.status();
  identity.ipc_ns = *ipc;
  identity.pid_ns = *pid;
  identity.net_ns = *net;
  struct stat st;
  const std::string dir(shm_dir);
  if (::stat(dir.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", dir));
  }
  identity.shm_dev = static_cast<uint64_t>(st.st_dev);
  return identity;
}

}  // namespace shardd::comm
