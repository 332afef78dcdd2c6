#include "daemon/core/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::core {
namespace {

std::string Limit(uint64_t v) {
  return v == static_cast<uint64_t>(RLIM_INFINITY) ? std::string("unlimited")
                                                   : absl::StrCat(v);
}

}  // namespace

uint64_t FdLimit::RaisedSoft(uint64_t soft, uint64_t hard) {
  return hard > soft ? hard : soft;
}

absl::StatusOr<FdLimit::Result> FdLimit::RaiseSoftToHard() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return absl::ErrnoToStatus(errno, "getrlimit(RLIMIT_NOFILE)");
  }
  Result result;
  result.soft_before = limit.rlim_cur;
  result.hard = limit.rlim_max;
  result.soft_after = RaisedSoft(limit.rlim_cur, limit.rlim_max);
  if (result.soft_after != result.soft_before) {
    limit.rlim_cur = result.soft_after;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return absl::ErrnoToStatus(errno,
                                 absl::StrCat("setrlimit(RLIMIT_NOFILE, soft ",
                                              Limit(result.soft_after), ")"));
    }
  }
  return result;
}

std::string FdLimit::Describe(const Result& result) {
  return absl::StrCat("open-file limit ", Limit(result.soft_before), " -> ",
                      Limit(result.soft_after), " (hard ", Limit(result.hard),
                      ")");
}

std::string FdLimit::StartupMessage(absl::string_view program,
                                    const absl::StatusOr<Result>& outcome) {
  if (!outcome.ok()) {
    return absl::StrCat(program, ": ", outcome.status().ToString(),
                        "; going on with the limit as it is");
  }
  if (outcome->soft_after == outcome->soft_before) return "";
  return absl::StrCat(program, ": ", Describe(*outcome));
}

void FdLimit::RaiseAtStartup(absl::string_view program) {
  const std::string message = StartupMessage(program, RaiseSoftToHard());
  if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
}

}  // namespace shardd::core
