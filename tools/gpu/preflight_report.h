#ifndef SHARDD_TOOLS_GPU_PREFLIGHT_REPORT_H_
#define SHARDD_TOOLS_GPU_PREFLIGHT_REPORT_H_

#include <cstdio>
#include <string>

#include "absl/strings/string_view.h"

namespace shardd::tools {

// The verdicts of gpu_preflight's checks, each printed as one line the
// moment it is known ("preflight NAME: ok DETAIL" or "preflight NAME: FAIL
// REASON"), so that a run killed at a time limit still shows how far it
// got, and scripts/gpu-check can copy the lines into its summary. A check
// that could not run (an earlier one failed) is a FAIL too: a preflight
// passes only when every check ran and passed, and at least one did.
//
// Not thread-safe. Writes to `out` (borrowed; flushed after every line).
class PreflightReport {
 public:
  explicit PreflightReport(std::FILE* out) : out_(out) {}

  void Ok(absl::string_view name, absl::string_view detail);
  void Fail(absl::string_view name, absl::string_view reason);
  // Fail(name, "not run: " + because).
  void NotRun(absl::string_view name, absl::string_view because);

  int passes() const { return passes_; }
  int failures() const { return failures_; }
  bool all_passed() const { return passes_ > 0 && failures_ == 0; }
  // 0 when all_passed(), else 1.
  int exit_code() const { return all_passed() ? 0 : 1; }

  // The line for one verdict: newlines and other control characters in
  // `name` or `text` become spaces, so that a verdict is always one line.
  static std::string Line(absl::string_view name, bool ok,
                          absl::string_view text);

 private:
  void Print(absl::string_view name, bool ok, absl::string_view text);

  std::FILE* const out_;
  int passes_ = 0;
  int failures_ = 0;
};

}  // namespace shardd::tools

#endif  // SHARDD_TOOLS_GPU_PREFLIGHT_REPORT_H_
