#ifndef SHARDD_TESTS_COLLECTIVES_WORKER_DRIVER_H_
#define SHARDD_TESTS_COLLECTIVES_WORKER_DRIVER_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/collectives/process_group.h"

namespace shardd::testing {

// The collective_worker binary in the test's runfiles.
std::string WorkerPath();

// A fresh directory under $TEST_TMPDIR (or /tmp) named after `label`.
std::string MakeTempDir(const std::string& label);

// One spawned worker and where its output goes.
struct Worker {
  pid_t pid = 0;
  int rank = 0;
  std::string out_path;
  std::string err_path;
  std::string Stdout() const { return ReadFileOrEmpty(out_path); }
  std::string Stderr() const { return ReadFileOrEmpty(err_path); }
  std::map<std::string, std::string> Result() const {
    return ParseResultLine(Stdout(), "RESULT");
  }
  // Stdout and stderr, for assertion messages.
  std::string Logs() const;
};

// Spawns collective_worker with `args` plus --rank=RANK in `group`, logging
// to DIR/NAME.{out,err}.
absl::StatusOr<Worker> SpawnWorker(ProcessGroup& group, const std::string& dir,
                                   const std::string& name, int rank,
                                   const std::vector<std::string>& args);

}  // namespace shardd::testing

#endif  // SHARDD_TESTS_COLLECTIVES_WORKER_DRIVER_H_
