#include "daemon/recovery/commit_log.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/core/write_all.h"

namespace shardd::recovery {
namespace {

using Kind = CommitRecord::Kind;

absl::Status ErrnoError(absl::string_view path, absl::string_view what,
                        int error) {
  return absl::ErrnoToStatus(error, absl::StrCat(path, ": ", what));
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Cuts a torn last line (bytes after the last newline) off the file.
absl::Status TruncateTornTail(const std::string& path, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(path, "fstat", errno);
  off_t end = st.st_size;
  off_t keep = 0;
  char buffer[4096];
  bool found = false;
  bool torn = false;
  while (end > 0 && !found) {
    const off_t start = std::max<off_t>(0, end - sizeof(buffer));
    const size_t want = static_cast<size_t>(end - start);
    const ssize_t n = ::pread(fd, buffer, want, start);
    if (n < 0) return ErrnoError(path, "pread", errno);
    if (static_cast<size_t>(n) != want) {
      return absl::DataLossError(
          absl::StrCat(path, ": short read while checking the last line"));
    }
    for (size_t i = want; i > 0; --i) {
      if (buffer[i - 1] == '\n') {
        keep = start + static_cast<off_t>(i);
        found = true;
        break;
      }
      torn = true;
    }
    end = start;
  }
  if (!torn) return absl::OkStatus();
  if (::ftruncate(fd, keep) != 0) return ErrnoError(path, "ftruncate", errno);
  if (::fdatasync(fd) != 0) return ErrnoError(path, "fdatasync", errno);
  return absl::OkStatus();
}

std::string LogName(int log) { return absl::StrCat("log #", log); }

}  // namespace

absl::string_view CommitRecordKindName(Kind kind) {
  switch (kind) {
    case Kind::kInit:
      return "init";
    case Kind::kCommit:
      return "commit";
    case Kind::kRecovered:
      return "recovered";
    case Kind::kCheckpointRestored:
      return "checkpoint_restored";
    case Kind::kFinal:
      return "final";
  }
  return "unknown";
}

std::string FormatCommitRecord(const CommitRecord& record) {
  return absl::StrFormat("%s step=%d epoch=%d rank=%d shard=%d crc32c=0x%08x",
                         CommitRecordKindName(record.kind), record.step,
                         record.epoch, record.rank, record.shard_index,
                         record.shard_crc32c);
}

absl::StatusOr<CommitRecord> ParseCommitRecord(absl::string_view line) {
  std::vector<absl::string_view> fields =
      absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (fields.size() != 6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected 6 space-separated fields, found ", fields.size()));
  }
  CommitRecord record;
  if (fields[0] == "init") {
    record.kind = Kind::kInit;
  } else if (fields[0] == "commit") {
    record.kind = Kind::kCommit;
  } else if (fields[0] == "recovered") {
    record.kind = Kind::kRecovered;
  } else if (fields[0] == "checkpoint_restored") {
    record.kind = Kind::kCheckpointRestored;
  } else if (fields[0] == "final") {
    record.kind = Kind::kFinal;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown record kind '", fields[0], "'"));
  }
  auto value = [&](int i, absl::string_view key) -> absl::StatusOr<int64_t> {
    absl::string_view field = fields[i];
    if (!absl::ConsumePrefix(&field, key) ||
        !absl::ConsumePrefix(&field, "=")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field ", i + 1, " should be ", key, "=..., got '", fields[i], "'"));
    }
    int64_t v = 0;
    if (!absl::SimpleAtoi(field, &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, " must be an integer >= 0, got '", field, "'"));
    }
    return v;
  };
  absl::StatusOr<int64_t> step = value(1, "step");
  if (!step.ok()) return step.status();
  absl::StatusOr<int64_t> epoch = value(2, "epoch");
  if (!epoch.ok()) return epoch.status();
  absl::StatusOr<int64_t> rank = value(3, "rank");
  if (!rank.ok()) return rank.status();
  absl::StatusOr<int64_t> shard = value(4, "shard");
  if (!shard.ok()) return shard.status();
  if (*rank > INT32_MAX || *shard > INT32_MAX) {
    return absl::InvalidArgumentError("rank or shard out of range");
  }
  absl::string_view crc = fields[5];
  uint32_t crc_value = 0;
  if (!absl::ConsumePrefix(&crc, "crc32c=0x") || crc.empty() ||
      crc.size() > 8 || !absl::SimpleHexAtoi(crc, &crc_value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field 6 should be crc32c=0x<8 hex digits>, got '", fields[5], "'"));
  }
  record.step = *step;
  record.epoch = *epoch;
  record.rank = static_cast<int>(*rank);
  record.shard_index = static_cast<int>(*shard);
  record.shard_crc32c = crc_value;
  return record;
}

absl::StatusOr<std::unique_ptr<CommitLog>> CommitLog::Open(
    const std::string& path) {
  struct stat st;
  const bool existed = ::stat(path.c_str(), &st) == 0;
  const int fd =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(path, "open for appending", errno);
  std::unique_ptr<CommitLog> log(new CommitLog(path, fd));
  absl::Status repaired = TruncateTornTail(path, fd);
  if (!repaired.ok()) return repaired;
  if (!existed) {
    // Make the new directory entry durable too.
    const std::string dir = Dirname(path);
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return ErrnoError(dir, "open directory", errno);
    const int rc = ::fsync(dir_fd);
    const int error = errno;
    ::close(dir_fd);
    if (rc != 0) return ErrnoError(dir, "fsync directory", error);
  }
  return log;
}

CommitLog::~CommitLog() {
  absl::MutexLock lock(&mu_);
  if (fd_ >= 0) ::close(fd_);
}

absl::Status CommitLog::Append(const CommitRecord& record) {
  if (record.step < 0 || record.epoch < 0 || record.rank < 0 ||
      record.shard_index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": record with a negative field: ", FormatCommitRecord(record)));
  }
  const std::string line = absl::StrCat(FormatCommitRecord(record), "\n");
  absl::MutexLock lock(&mu_);
  if (absl::Status s = core::WriteAll(fd_, line, path_); !s.ok()) return s;
  if (::fdatasync(fd_) != 0) return ErrnoError(path_, "fdatasync", errno);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<CommitRecord>> CommitLog::Read(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(path, "open", errno);
  std::string content;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      return ErrnoError(path, "read", error);
    }
    if (n == 0) break;
    content.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  std::vector<CommitRecord> records;
  size_t start = 0;
  int line_number = 0;
  while (start < content.size()) {
    const size_t newline = content.find('\n', start);
    if (newline == std::string::npos) break;  // Torn last line: ignored.
    ++line_number;
    absl::string_view line(content.data() + start, newline - start);
    absl::StatusOr<CommitRecord> record = ParseCommitRecord(line);
    if (!record.ok()) {
      return absl::DataLossError(
          absl::StrCat(path, ":", line_number, ": malformed commit record '",
                       line, "': ", record.status().message()));
    }
    records.push_back(*record);
    start = newline + 1;
  }
  return records;
}

namespace {

struct Located {
  CommitRecord record;
  int log = 0;
};

// Everything CheckCommitLogs and SummarizeCommitLogs derive per rank.
struct RankView {
  std::vector<Located> records;  // All records of the rank, log order.
  std::vector<bool> superseded;  // Parallel to records.
  int64_t last_step = -1;        // Highest step of a live record.
};

std::map<int, RankView> ViewByRank(
    const std::vector<std::vector<CommitRecord>>& logs) {
  std::map<int, RankView> ranks;
  for (int i = 0; i < static_cast<int>(logs.size()); ++i) {
    for (const CommitRecord& record : logs[i]) {
      ranks[record.rank].records.push_back({record, i});
    }
  }
  for (auto& [rank, view] : ranks) {
    std::vector<std::pair<int64_t, int64_t>> restores;  // (step, epoch)
    for (const Located& r : view.records) {
      if (r.record.kind == Kind::kCheckpointRestored) {
        restores.emplace_back(r.record.step, r.record.epoch);
      }
    }
    view.superseded.assign(view.records.size(), false);
    for (size_t k = 0; k < view.records.size(); ++k) {
      const CommitRecord& r = view.records[k].record;
      for (const auto& [step, epoch] : restores) {
        if (r.step > step && r.epoch < epoch) view.superseded[k] = true;
      }
      if (!view.superseded[k])
        view.last_step = std::max(view.last_step, r.step);
    }
  }
  return ranks;
}

std::string Logs(const std::set<int>& logs) {
  std::vector<std::string> names;
  for (int log : logs) names.push_back(LogName(log));
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status CheckCommitLogs(
    const std::vector<std::vector<CommitRecord>>& per_process_logs,
    int world_size, int sharding_factor, int64_t expected_final_step,
    int64_t first_step) {
  if (world_size < 1 || sharding_factor < 1 ||
      world_size % sharding_factor != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_size (", world_size, ") and sharding_factor (",
                     sharding_factor, ") must be >= 1 with F dividing W"));
  }
  if (first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_step (", first_step, ") must be >= 0"));
  }
  std::vector<std::string> violations;

  // Rule 1 and the per-record fields, log by log.
  for (int i = 0; i < static_cast<int>(per_process_logs.size()); ++i) {
    const std::vector<CommitRecord>& log = per_process_logs[i];
    if (log.empty()) continue;
    const int rank = log.front().rank;
    int64_t next = -1;  // Expected next commit; -1 before a start record.
    int64_t epoch = -1;
    for (const CommitRecord& r : log) {
      const std::string where =
          absl::StrCat("rank ", r.rank, " step ", r.step, " (", LogName(i),
                       ", ", CommitRecordKindName(r.kind), ")");
      if (r.rank != rank) {
        violations.push_back(
            absl::StrCat(where, ": ", LogName(i), " also holds rank ", rank));
        continue;
      }
      if (r.rank < 0 || r.rank >= world_size) {
        violations.push_back(
            absl::StrCat(where, ": rank outside [0, ", world_size, ")"));
        break;
      }
      if (r.shard_index != r.rank % sharding_factor) {
        violations.push_back(absl::StrCat(where, ": shard index ",
                                          r.shard_index, ", expected ",
                                          r.rank % sharding_factor));
      }
      if (r.epoch < epoch) {
        violations.push_back(
            absl::StrCat(where, ": epoch ", r.epoch, " after epoch ", epoch));
      }
      epoch = std::max(epoch, r.epoch);
      switch (r.kind) {
        case Kind::kInit:
          if (r.step != 0) {
            violations.push_back(
                absl::StrCat(where, ": init must be at step 0"));
          }
          next = r.step + 1;
          break;
        case Kind::kRecovered:
        case Kind::kCheckpointRestored:
          next = r.step + 1;
          break;
        case Kind::kFinal:
          // The state at the last step, repeated: no step of its own.
          if (next >= 0 && r.step != next - 1) {
            violations.push_back(absl::StrCat(where, ": final at step ", r.step,
                                              " but the last step is ",
                                              next - 1));
          }
          break;
        case Kind::kCommit:
          if (next < 0) {
            violations.push_back(absl::StrCat(
                where,
                ": commit before any init, recovered or checkpoint_restored"));
          } else if (r.step != next) {
            violations.push_back(
                absl::StrCat(where, ": expected step ", next,
                             " (commits must be consecutive)"));
          }
          next = r.step + 1;
          break;
      }
    }
  }

  std::map<int, RankView> ranks = ViewByRank(per_process_logs);

  // Rule 2: per rank, no step twice and no gap.
  for (int rank = 0; rank < world_size; ++rank) {
    auto it = ranks.find(rank);
    if (it == ranks.end()) {
      violations.push_back(absl::StrCat("rank ", rank, ": no records"));
      continue;
    }
    const RankView& view = it->second;
    std::map<int64_t, std::vector<int>> commits;  // step -> logs
    std::set<int64_t> covered;
    for (size_t k = 0; k < view.records.size(); ++k) {
      if (view.superseded[k]) continue;
      const Located& r = view.records[k];
      covered.insert(r.record.step);
      if (r.record.kind == Kind::kCommit) {
        commits[r.record.step].push_back(r.log);
      }
    }
    for (const auto& [step, logs] : commits) {
      if (logs.size() > 1) {
        violations.push_back(absl::StrCat(
            "rank ", rank, " step ", step, ": committed ", logs.size(),
            " times (", Logs(std::set<int>(logs.begin(), logs.end())), ")"));
      }
    }
    std::set<int> rank_logs;
    for (const Located& r : view.records) rank_logs.insert(r.log);
    int64_t expected = first_step;
    for (int64_t step : covered) {
      if (step > expected + 1) {
        violations.push_back(absl::StrCat(
            "rank ", rank, " step ", expected + 1,
            step - 1 > expected + 1 ? absl::StrCat("..", step - 1) : "",
            ": never committed, recovered or restored (", Logs(rank_logs),
            ")"));
      }
      expected = std::max(expected, step);
    }
    // Rule 5.
    if (expected_final_step >= 0 && view.last_step != expected_final_step) {
      violations.push_back(absl::StrCat(
          "rank ", rank, ": last step ", view.last_step, ", expected ",
          expected_final_step, " (", Logs(rank_logs), ")"));
    }
  }

  // Rules 3 and 4: replicas.
  struct Seen {
    uint32_t crc;
    Located where;
  };
  std::map<std::pair<int, int64_t>, Seen> first_by_shard_step;
  std::set<std::pair<int, int64_t>> reported;
  // (shard, step) -> ranks that committed or restored it.
  std::map<std::pair<int, int64_t>, std::set<int>> sources;
  for (const auto& [rank, view] : ranks) {
    for (size_t k = 0; k < view.records.size(); ++k) {
      if (view.superseded[k]) continue;
      const CommitRecord& r = view.records[k].record;
      if (r.kind == Kind::kCommit || r.kind == Kind::kCheckpointRestored) {
        sources[{r.shard_index, r.step}].insert(rank);
      }
    }
  }
  for (const auto& [rank, view] : ranks) {
    if (rank < 0 || rank >= world_size) continue;
    for (size_t k = 0; k < view.records.size(); ++k) {
      if (view.superseded[k]) continue;
      const Located& located = view.records[k];
      const CommitRecord& r = located.record;
      const int shard = rank % sharding_factor;
      if (r.kind == Kind::kRecovered && r.step > 0) {
        bool found = false;
        auto src = sources.find({shard, r.step});
        if (src != sources.end()) {
          for (int other : src->second) found |= other != rank;
        }
        if (!found) {
          violations.push_back(absl::StrCat(
              "rank ", rank, " step ", r.step, " (", LogName(located.log),
              "): recovered, but no other rank of shard ", shard,
              " committed or restored step ", r.step));
        }
      }
      auto [it, inserted] = first_by_shard_step.try_emplace(
          {shard, r.step}, Seen{r.shard_crc32c, located});
      if (inserted || it->second.crc == r.shard_crc32c) continue;
      if (!reported.insert({shard, r.step}).second) continue;
      const Located& first = it->second.where;
      violations.push_back(absl::StrFormat(
          "shard %d step %d: crc32c 0x%08x (rank %d, %s, %s) differs from "
          "0x%08x (rank %d, %s, %s)",
          shard, r.step, r.shard_crc32c, rank, LogName(located.log),
          CommitRecordKindName(r.kind), first.record.shard_crc32c,
          first.record.rank, LogName(first.log),
          CommitRecordKindName(first.record.kind)));
    }
  }

  if (violations.empty()) return absl::OkStatus();
  constexpr size_t kMaxShown = 20;
  const size_t total = violations.size();
  if (total > kMaxShown) {
    violations.resize(kMaxShown);
    violations.push_back(absl::StrCat("... and ", total - kMaxShown, " more"));
  }
  return absl::DataLossError(absl::StrCat(
      total, " commit log violation(s): ", absl::StrJoin(violations, "; ")));
}

CommitLogSummary SummarizeCommitLogs(
    const std::vector<std::vector<CommitRecord>>& per_process_logs) {
  CommitLogSummary summary;
  for (const auto& log : per_process_logs) summary.records += log.size();
  bool first = true;
  for (const auto& [rank, view] : ViewByRank(per_process_logs)) {
    summary.ranks.push_back(rank);
    if (first || view.last_step < summary.min_final_step) {
      summary.min_final_step = view.last_step;
    }
    if (first || view.last_step > summary.max_final_step) {
      summary.max_final_step = view.last_step;
    }
    first = false;
  }
  return summary;
}

}  // namespace shardd::recovery
