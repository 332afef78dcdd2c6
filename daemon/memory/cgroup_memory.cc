#include "daemon/memory/cgroup_memory.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardd::memory {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' &&
        s[i + 1] <= '3' && s[i + 2] >= '0' && s[i + 2] <= '7' &&
        s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 +
                                      (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool ParseCount(absl::string_view text, int64_t* out) {
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(text), out) && *out >= 0;
}

}  // namespace

ProcCgroup ParseProcSelfCgroup(absl::string_view content) {
  ProcCgroup out;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    // hierarchy-ID:controller-list:path (the path may contain ':').
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3 || fields[2].empty()) continue;
    if (fields[0] == "0" && fields[1].empty()) {
      out.v2_path = std::string(fields[2]);
      continue;
    }
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "memory") out.v1_memory_path = std::string(fields[2]);
    }
  }
  return out;
}

std::vector<CgroupMount> ParseCgroupMounts(absl::string_view mountinfo) {
  std::vector<CgroupMount> out;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n')) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE
    // SOURCE SUPER_OPTIONS
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    size_t dash = 0;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash < 6 || dash + 2 >= fields.size()) continue;
    const absl::string_view fstype = fields[dash + 1];
    CgroupMount mount;
    mount.root = Unescape(fields[3]);
    mount.mount_point = Unescape(fields[4]);
    if (fstype == "cgroup2") {
      mount.v2 = true;
      out.push_back(std::move(mount));
    } else if (fstype == "cgroup" && dash + 3 < fields.size()) {
      for (absl::string_view option : absl::StrSplit(fields[dash + 3], ',')) {
        if (option == "memory") {
          out.push_back(mount);
          break;
        }
      }
    }
  }
  return out;
}

std::optional<std::string> CgroupDirectory(const CgroupMount& mount,
                                           absl::string_view cgroup_path) {
  absl::string_view root = mount.root;
  absl::string_view below = cgroup_path;
  if (root != "/") {
    if (!absl::ConsumePrefix(&below, root)) return std::nullopt;
    if (!below.empty() && below.front() != '/') return std::nullopt;
  }
  below = absl::StripSuffix(below, "/");
  if (below == "/") below = "";
  std::string dir = mount.mount_point;
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!below.empty() && below.front() != '/') dir.push_back('/');
  absl::StrAppend(&dir, below);
  return dir;
}

absl::StatusOr<std::optional<int64_t>> ParseCgroupLimit(
    absl::string_view content) {
  const absl::string_view text = absl::StripAsciiWhitespace(content);
  if (text == "max") return std::optional<int64_t>();
  int64_t bytes = 0;
  if (!ParseCount(text, &bytes)) {
    // v1 reports "unlimited" as a figure that may not fit int64 on some
    // kernels (an unsigned value): anything that is all digits is huge.
    if (!text.empty() && text.size() >= 19 &&
        text.find_first_not_of("0123456789") == absl::string_view::npos) {
      return std::optional<int64_t>();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("not a memory limit: '", text, "'"));
  }
  if (bytes >= kUnlimitedCgroupBytes) return std::optional<int64_t>();
  return std::optional<int64_t>(bytes);
}

absl::StatusOr<int64_t> ParseCgroupBytes(absl::string_view content) {
  int64_t bytes = 0;
  if (!ParseCount(content, &bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "not a byte count: '", absl::StripAsciiWhitespace(content), "'"));
  }
  return bytes;
}

std::optional<int64_t> ParseKeyedValue(absl::string_view content,
                                       absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t value = 0;
    if (fields.size() == 2 && fields[0] == key &&
        ParseCount(fields[1], &value)) {
      return value;
    }
  }
  return std::nullopt;
}

absl::StatusOr<int64_t> ParseMemAvailable(absl::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(meminfo, '\n')) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "MemAvailable:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    int64_t kib = 0;
    if (!absl::ConsumeSuffix(&rest, "kB") || !ParseCount(rest, &kib) ||
        kib > (int64_t{1} << 52)) {
      return absl::InvalidArgumentError(
          absl::StrCat("/proc/meminfo: unreadable line '", line, "'"));
    }
    return kib * 1024;
  }
  return absl::NotFoundError("/proc/meminfo has no MemAvailable line");
}

}  // namespace shardd::memory
