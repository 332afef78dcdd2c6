#include "daemon/core/admission_decision.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::core {
namespace {

constexpr LimitScope kScopes[] = {LimitScope::kHost, LimitScope::kShm,
                                  LimitScope::kDevice, LimitScope::kTotal};

std::string WithBytes(int64_t bytes) {
  return absl::StrCat(FormatBytes(bytes), " (", bytes, " B)");
}

// "SOURCE leaves AVAILABLE, less a safety margin of M" (or "x FRACTION
// (--memory_limit_fraction)") for measured limits; the source alone for
// explicit ones.
std::string LimitedBy(const MemoryLimit& limit, double fraction) {
  if (!limit.measured) return limit.source;
  const int64_t margin = SafetyMargin(limit.scope, limit.available_bytes);
  const int64_t usable = UsableBytes(limit, fraction);
  const int64_t by_margin = limit.available_bytes - margin;
  const std::string cut =
      usable < by_margin
          ? absl::StrCat("x ", fraction, " (--memory_limit_fraction)")
          : absl::StrCat("less a safety margin of ", FormatBytes(margin));
  return absl::StrCat(limit.source, " leaves ",
                      FormatBytes(limit.available_bytes), ", ", cut);
}

}  // namespace

const char* LimitScopeName(LimitScope scope) {
  switch (scope) {
    case LimitScope::kHost:
      return "host memory";
    case LimitScope::kShm:
      return "shm space";
    case LimitScope::kDevice:
      return "device memory";
    case LimitScope::kTotal:
      return "planned memory";
  }
  return "unknown";
}

int64_t SafetyMargin(LimitScope scope, int64_t available_bytes) {
  if (scope == LimitScope::kShm) return available_bytes / 20;
  return std::max(kMinSafetyMarginBytes, available_bytes / 20);
}

int64_t UsableBytes(const MemoryLimit& limit, double fraction) {
  const int64_t available = std::max<int64_t>(limit.available_bytes, 0);
  if (!limit.measured) return available;
  int64_t usable = available - SafetyMargin(limit.scope, available);
  if (fraction > 0 && fraction < 1) {
    const double share = std::floor(static_cast<double>(available) * fraction);
    usable = std::min(usable, static_cast<int64_t>(share));
  }
  return std::max<int64_t>(usable, 0);
}

int64_t BytesInScope(const AdmissionPlan& plan, LimitScope scope) {
  switch (scope) {
    case LimitScope::kHost: {
      const int64_t host = plan.BytesIn(MemoryPlacement::kHost);
      const int64_t shared = plan.BytesIn(MemoryPlacement::kSharedHost);
      return host > std::numeric_limits<int64_t>::max() - shared
                 ? std::numeric_limits<int64_t>::max()
                 : host + shared;
    }
    case LimitScope::kShm:
      return plan.BytesIn(MemoryPlacement::kSharedHost);
    case LimitScope::kDevice:
      return plan.BytesIn(MemoryPlacement::kDevice);
    case LimitScope::kTotal:
      return plan.total_bytes();
  }
  return 0;
}

std::vector<ScopeCheck> CheckScopes(const AdmissionPlan& plan,
                                    const std::vector<MemoryLimit>& limits,
                                    double fraction) {
  std::vector<ScopeCheck> checks;
  for (LimitScope scope : kScopes) {
    const MemoryLimit* binding = nullptr;
    int64_t usable = 0;
    for (const MemoryLimit& limit : limits) {
      if (limit.scope != scope) continue;
      const int64_t u = UsableBytes(limit, fraction);
      if (binding == nullptr || u < usable) {
        binding = &limit;
        usable = u;
      }
    }
    if (binding == nullptr) continue;
    checks.push_back(ScopeCheck{scope, BytesInScope(plan, scope), usable,
                                LimitedBy(*binding, fraction)});
  }
  return checks;
}

std::string DescribeLimits(const std::vector<MemoryLimit>& limits,
                           double fraction) {
  std::vector<std::string> parts;
  for (LimitScope scope : kScopes) {
    for (const MemoryLimit& limit : limits) {
      if (limit.scope != scope) continue;
      parts.push_back(absl::StrCat(LimitScopeName(scope), " ",
                                   FormatBytes(UsableBytes(limit, fraction)),
                                   " from ", LimitedBy(limit, fraction)));
    }
  }
  if (parts.empty()) return "none could be read";
  return absl::StrJoin(parts, "; ");
}

absl::Status DecideAdmission(absl::string_view what, const AdmissionPlan& plan,
                             const std::vector<MemoryLimit>& limits,
                             double fraction) {
  std::vector<std::string> over;
  for (const ScopeCheck& check : CheckScopes(plan, limits, fraction)) {
    if (check.fits()) continue;
    over.push_back(
        absl::StrCat("it needs ", WithBytes(check.needed_bytes), " of ",
                     LimitScopeName(check.scope), ", which may use ",
                     WithBytes(check.usable_bytes), ": ", check.limited_by));
  }
  if (over.empty()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": the plan does not fit in memory: ", absl::StrJoin(over, "; "),
      ". Plan: ", plan.Describe(), "; host ",
      FormatBytes(BytesInScope(plan, LimitScope::kHost)), " (of it shm ",
      FormatBytes(BytesInScope(plan, LimitScope::kShm)), "), device ",
      FormatBytes(BytesInScope(plan, LimitScope::kDevice)),
      ". Limits: ", DescribeLimits(limits, fraction), "."));
}

}  // namespace shardd::core
