#include "daemon/metrics/promtool.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace shardd::metrics {

absl::StatusOr<std::string> FindPromtool() {
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view dir : absl::StrSplit(path, ':')) {
      if (dir.empty()) continue;
      std::string candidate = absl::StrCat(dir, "/promtool");
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  if (access("/usr/bin/promtool", X_OK) == 0) return "/usr/bin/promtool";
  return absl::NotFoundError(
      "promtool not found on PATH or at /usr/bin/promtool; install the "
      "Debian package 'prometheus' (scripts/install-deps does)");
}

absl::Status PromtoolCheckMetrics(absl::string_view exposition) {
  absl::StatusOr<std::string> promtool = FindPromtool();
  if (!promtool.ok()) return promtool.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  if (tmp == nullptr) tmp = std::getenv("TMPDIR");
  std::string path =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/promtool-metrics-XXXXXX");
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("mkstemp ", path, ": ", std::strerror(errno)));
  }
  path = name.data();
  size_t written = 0;
  while (written < exposition.size()) {
    const ssize_t n =
        write(fd, exposition.data() + written, exposition.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      unlink(path.c_str());
      return absl::UnavailableError(
          absl::StrCat("write ", path, ": ", std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  close(fd);
  const std::string command =
      absl::StrCat("'", *promtool, "' check metrics < '", path, "' 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    unlink(path.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot run ", command, ": ", std::strerror(errno)));
  }
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output.append(buffer, n);
  }
  const int status = pclose(pipe);
  unlink(path.c_str());
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "promtool check metrics rejected the exposition (exit ",
        WIFEXITED(status) ? WEXITSTATUS(status) : -1, "):\n", output));
  }
  return absl::OkStatus();
}

}  // namespace shardd::metrics
