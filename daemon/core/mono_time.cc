#include "daemon/core/mono_time.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace shardd {

MonoTime MonoNow() {
  return MonoTime::FromOrigin(
      absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch()));
}

std::string FormatMonoTime(MonoTime t) {
  if (t == MonoTime::InfiniteFuture()) return "never";
  if (t == MonoTime::InfinitePast()) return "always";
  return absl::StrCat("mono+", absl::FormatDuration(t.SinceOrigin()));
}

}  // namespace shardd
