#include "tests/collectives/worker_driver.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace shardd::testing {

std::string WorkerPath() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    const std::string path = absl::StrCat(
        srcdir, "/", workspace, "/tests/collectives/collective_worker");
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  // `bazel run` or a direct run from the runfiles or workspace root.
  return "tests/collectives/collective_worker";
}

std::string MakeTempDir(const std::string& label) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ =
      absl::StrCat(base != nullptr ? base : "/tmp", "/", label, ".XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

std::string Worker::Logs() const {
  return absl::StrCat("--- rank ", rank, " (pid ", pid, ") stdout:\n", Stdout(),
                      "--- rank ", rank, " stderr:\n", Stderr());
}

absl::StatusOr<Worker> SpawnWorker(ProcessGroup& group, const std::string& dir,
                                   const std::string& name, int rank,
                                   const std::vector<std::string>& args) {
  Worker worker;
  worker.rank = rank;
  worker.out_path = absl::StrCat(dir, "/", name, ".out");
  worker.err_path = absl::StrCat(dir, "/", name, ".err");
  std::vector<std::string> argv = {WorkerPath(), absl::StrCat("--rank=", rank)};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<pid_t> pid =
      group.Spawn(argv, worker.out_path, worker.err_path);
  if (!pid.ok()) return pid.status();
  worker.pid = *pid;
  return worker;
}

}  // namespace shardd::testing
