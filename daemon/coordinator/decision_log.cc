#include "daemon/coordinator/decision_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "daemon/core/write_all.h"

namespace shardd::coordinator {
namespace {

absl::Status ErrnoError(const std::string& path, const char* what, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(path, ": ", what));
}

std::string FormatCommit(const DecisionLog::Commit& c) {
  return absl::StrCat("commit step=", c.step, " epoch=", c.epoch,
                      " fingerprint=0x", absl::Hex(c.fingerprint), "\n");
}

std::optional<DecisionLog::Commit> ParseCommit(absl::string_view line) {
  std::vector<absl::string_view> words = absl::StrSplit(line, ' ');
  if (words.size() != 4 || words[0] != "commit") return std::nullopt;
  DecisionLog::Commit c;
  absl::string_view fp = words[3];
  if (!absl::ConsumePrefix(&words[1], "step=") ||
      !absl::ConsumePrefix(&words[2], "epoch=") ||
      !absl::ConsumePrefix(&fp, "fingerprint=0x") ||
      !absl::SimpleAtoi(words[1], &c.step) ||
      !absl::SimpleAtoi(words[2], &c.epoch) ||
      !absl::SimpleHexAtoi(fp, &c.fingerprint) || c.step < 1) {
    return std::nullopt;
  }
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecisionLog>> DecisionLog::Open(
    const std::string& path, int compact_lines) {
  std::optional<Commit> last;
  int lines = 0;
  {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    std::vector<absl::string_view> parts = absl::StrSplit(all, '\n');
    // The part after the last newline is a line cut short (or empty).
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      std::optional<Commit> c = ParseCommit(parts[i]);
      if (!c.has_value()) {
        return absl::DataLossError(absl::StrCat(path, ":", i + 1,
                                                ": not a decision: '",
                                                parts[i].substr(0, 120), "'"));
      }
      last = c;
      ++lines;
    }
  }
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(path, "open", errno);
  return std::unique_ptr<DecisionLog>(
      new DecisionLog(path, fd, last, lines, compact_lines));
}

DecisionLog::DecisionLog(std::string path, int fd, std::optional<Commit> last,
                         int lines, int compact_lines)
    : path_(std::move(path)),
      fd_(fd),
      last_(last),
      lines_(lines),
      compact_lines_(compact_lines) {}

DecisionLog::~DecisionLog() { ::close(fd_); }

absl::Status DecisionLog::Record(const Commit& commit) {
  if (lines_ >= compact_lines_) {
    if (absl::Status s = Compact(); !s.ok()) return s;
  }
  if (absl::Status s = core::WriteAll(fd_, FormatCommit(commit), path_);
      !s.ok()) {
    return s;
  }
  if (::fdatasync(fd_) != 0) return ErrnoError(path_, "fdatasync", errno);
  last_ = commit;
  ++lines_;
  return absl::OkStatus();
}

absl::Status DecisionLog::Compact() {
  const std::string temp = absl::StrCat(path_, ".tmp");
  const int fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError(temp, "open", errno);
  const std::string kept = last_.has_value() ? FormatCommit(*last_) : "";
  absl::Status s = core::WriteAll(fd, kept, temp);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoError(temp, "fsync", errno);
  ::close(fd);
  if (s.ok() && ::rename(temp.c_str(), path_.c_str()) != 0) {
    s = ErrnoError(path_, "rename", errno);
  }
  if (!s.ok()) {
    ::unlink(temp.c_str());
    return s;
  }
  const int appended =
      ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC, 0644);
  if (appended < 0) return ErrnoError(path_, "open", errno);
  ::close(fd_);
  fd_ = appended;
  lines_ = last_.has_value() ? 1 : 0;
  return absl::OkStatus();
}

bool RecordedCommitSettles(const DecisionLog::Commit& recorded,
                           int64_t committed_step, int64_t pending_step,
                           uint64_t pending_fingerprint) {
  return pending_step == recorded.step && committed_step == recorded.step - 1 &&
         pending_fingerprint == recorded.fingerprint;
}

}  // namespace shardd::coordinator
