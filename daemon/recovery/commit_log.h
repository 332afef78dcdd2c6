// Commit logs: each daemon process appends one line per state change of its
// shard — registered fresh, step committed, recovered from a replica,
// restored from a checkpoint — so that fault tests can check after every
// run that no step was lost, repeated or half-applied and that replicas
// agree bit for bit:
//
//   init step=0 epoch=1 rank=1 shard=1 crc32c=0x1a2b3c4d
//   commit step=1 epoch=1 rank=1 shard=1 crc32c=0x5e6f7a8b
//   recovered step=7 epoch=4 rank=1 shard=1 crc32c=0x01020304
//   checkpoint_restored step=5 epoch=6 rank=1 shard=1 crc32c=0x...
//   final step=9 epoch=8 rank=1 shard=1 crc32c=0x...  (the job failed)
//
// shard_crc32c is the CRC-32C of the shard's whole state as the FetchShard
// stream sends it (the trailer's CRC: every section in stream order), so
// records of every kind are comparable. One file per daemon process (a
// replacement writes its own file); CheckCommitLogs takes all of them.
//
//   auto log = CommitLog::Open("/run/x/commits-rank1-pid42.log");
//   (*log)->Append({CommitRecord::Kind::kCommit, step, epoch, rank, shard,
//                   crc});
//   ...
//   commit_log_check --world_size=4 --sharding_factor=2 --final_step=20
//       /run/x/commits-*.log     (one command line)

#ifndef SHARDD_DAEMON_RECOVERY_COMMIT_LOG_H_
#define SHARDD_DAEMON_RECOVERY_COMMIT_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace shardd::recovery {

struct CommitRecord {
  enum class Kind {
    // The model was registered fresh; step is 0.
    kInit,
    // The rank committed `step`.
    kCommit,
    // A replacement installed its shard from a replica, at `step`.
    kRecovered,
    // The shard was restored from a checkpoint of `step`; commits of this
    // rank after `step` from earlier epochs are rolled back (superseded).
    kCheckpointRestored,
    // The job failed (terminal) and this rank's shard, intact, stays at
    // `step`, its last committed step: nothing after it is half-written.
    kFinal,
  };
  Kind kind = Kind::kCommit;
  int64_t step = 0;
  int64_t epoch = 0;
  int rank = 0;
  int shard_index = 0;
  uint32_t shard_crc32c = 0;

  friend bool operator==(const CommitRecord&, const CommitRecord&) = default;
};

// "init", "commit", "recovered", "checkpoint_restored".
absl::string_view CommitRecordKindName(CommitRecord::Kind kind);
// One line without the newline, e.g.
// "commit step=5 epoch=3 rank=1 shard=1 crc32c=0x1a2b3c4d".
std::string FormatCommitRecord(const CommitRecord& record);
// The inverse of FormatCommitRecord; INVALID_ARGUMENT saying what is wrong.
absl::StatusOr<CommitRecord> ParseCommitRecord(absl::string_view line);

// An append-only commit log file of one daemon process.
//
// Each Append is one write() of one line to a file opened with O_APPEND,
// then fdatasync, so a record that Append returned for survives a crash and
// a kill mid-write leaves at most a torn last line (without newline), which
// Read ignores and the next Open of the same file cuts off.
//
// Thread-safe (Append is serialised internally). Owns the file descriptor.
class CommitLog {
 public:
  // Opens (creating, mode 0644) `path` for appending; the directory must
  // exist. A torn last line is truncated away. Errors carry the errno's
  // code and name the path.
  static absl::StatusOr<std::unique_ptr<CommitLog>> Open(
      const std::string& path);
  ~CommitLog();
  CommitLog(const CommitLog&) = delete;
  CommitLog& operator=(const CommitLog&) = delete;

  // INVALID_ARGUMENT for a negative step, rank or shard index; the errno's
  // code naming the path when write or fdatasync fails.
  absl::Status Append(const CommitRecord& record);

  const std::string& path() const { return path_; }

  // Every complete line of `path`, in order. NOT_FOUND for a missing file;
  // DATA_LOSS "PATH:LINE: ..." for a malformed line. A last line without a
  // newline (a kill mid-write) is ignored.
  static absl::StatusOr<std::vector<CommitRecord>> Read(
      const std::string& path);

 private:
  CommitLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  absl::Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_);
};

// Checks the commit logs of one run; per_process_logs[i] is the i-th file
// (messages call it "log #i"). Every rank of [0, world_size) must appear;
// several logs may belong to one rank (a killed daemon's and its
// replacement's), and each log must hold one rank only. Shard index =
// rank % sharding_factor. Rules (each violation names rank, step and logs):
//  1. A log starts with init (step 0), recovered or checkpoint_restored;
//     after such a record at step S its commits are S+1, S+2, ... (any of
//     them may appear again later in the log and restarts the sequence);
//     epochs never decrease within a log.
//  2. Per rank, over all its logs, no step is committed twice, and the
//     committed, recovered and restored steps cover first_step+1..max (a
//     resumed job: first_step is the step it resumed from) without a gap (a
//     replacement that recovers at N may follow an old log that stopped at
//     N or N-1). Commits rolled back by a checkpoint_restored (a later epoch,
//     a lower step) do not count.
//  3. A recovered at step N > 0 needs another rank of the same shard index
//     that committed N or was restored from a checkpoint at N.
//  4. For every shard index and step, every record (all kinds, all ranks
//     with that shard index) carries the same shard_crc32c.
//  5. With expected_final_step >= 0, every rank's last step equals it.
// INVALID_ARGUMENT for world_size < 1, sharding_factor < 1 or not dividing
// world_size; DATA_LOSS listing the violations otherwise.
absl::Status CheckCommitLogs(
    const std::vector<std::vector<CommitRecord>>& per_process_logs,
    int world_size, int sharding_factor,
    int64_t expected_final_step /* -1: don't check */, int64_t first_step = 0);

// What commit_log_check prints on success.
struct CommitLogSummary {
  int64_t records = 0;
  std::vector<int> ranks;  // Sorted, distinct.
  // The lowest and highest last step over the ranks (equal in a good run).
  int64_t min_final_step = 0;
  int64_t max_final_step = 0;
};
CommitLogSummary SummarizeCommitLogs(
    const std::vector<std::vector<CommitRecord>>& per_process_logs);

}  // namespace shardd::recovery

#endif  // SHARDD_DAEMON_RECOVERY_COMMIT_LOG_H_
