#ifndef SHARDD_DAEMON_COORDINATOR_DECISION_LOG_H_
#define SHARDD_DAEMON_COORDINATOR_DECISION_LOG_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardd::coordinator {

// The coordinator's commit decisions on disk (--decision_log), so that
// one outlives the coordinator: a coordinator that decides to commit a step
// and dies with the only member that applied it (before the others heard)
// leaves the survivors in doubt, and without the record its successor
// would drop the step everyone else was about to apply, and the trainer
// that was told "committed" would see it rolled back.
//
// One line per decision, appended and synced (fdatasync) before any voter
// is answered:
//   commit step=S epoch=E fingerprint=0xF
// (F: the step fingerprint every voter sent, learning rate and model, so
// that a record never settles a step of another job). Open reads the last
// complete line; a line cut short by a crash is ignored. The file is
// rewritten with its last line alone (temporary file, fsync, rename) once
// it holds kCompactLines lines (Open's compact_lines).
//
// Thread-compatible (the coordinator calls it under its lock). Owns its
// file descriptor.
class DecisionLog {
 public:
  struct Commit {
    int64_t step = 0;
    int64_t epoch = 0;
    uint64_t fingerprint = 0;
  };

  // Opens PATH (creating it), reads the last decision. The errno's code
  // naming the path; DATA_LOSS naming the line for a malformed complete
  // line.
  static absl::StatusOr<std::unique_ptr<DecisionLog>> Open(
      const std::string& path, int compact_lines = kCompactLines);
  ~DecisionLog();
  DecisionLog(const DecisionLog&) = delete;
  DecisionLog& operator=(const DecisionLog&) = delete;

  // The last decision recorded (at Open, or since).
  const std::optional<Commit>& last() const { return last_; }

  // Appends `commit` and syncs it. The errno's code naming the path.
  absl::Status Record(const Commit& commit);

  static constexpr int kCompactLines = 10000;

 private:
  DecisionLog(std::string path, int fd, std::optional<Commit> last, int lines,
              int compact_lines);
  absl::Status Compact();

  const std::string path_;
  int fd_;
  std::optional<Commit> last_;
  int lines_;
  const int compact_lines_;
};

// Whether `recorded`, the last decision of this coordinator's predecessor,
// settles the in-doubt step of a member re-joining with
// (committed_step, pending_step, pending_fingerprint): it is that very
// step, voted with the same fingerprint, on top of the member's committed
// state. Pure.
bool RecordedCommitSettles(const DecisionLog::Commit& recorded,
                           int64_t committed_step, int64_t pending_step,
                           uint64_t pending_fingerprint);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_DECISION_LOG_H_
