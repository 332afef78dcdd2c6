#include "client/admission_refusal.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardd::client {
namespace {

constexpr absl::string_view kDoesNotFit = ": the plan does not fit in memory: ";
constexpr absl::string_view kPlan = ". Plan: ";
constexpr absl::string_view kLimits = ". Limits: ";

void AppendList(std::string* out, absl::string_view items,
                absl::string_view separator) {
  for (absl::string_view item : absl::StrSplit(items, separator)) {
    if (!item.empty()) absl::StrAppend(out, "\n    ", item);
  }
}

}  // namespace

std::string FormatAdmissionRefusal(absl::string_view message) {
  const size_t fit = message.find(kDoesNotFit);
  const size_t plan = message.find(kPlan);
  const size_t limits = message.find(kLimits);
  if (fit == absl::string_view::npos || plan == absl::string_view::npos ||
      limits == absl::string_view::npos || !(fit < plan && plan < limits)) {
    return std::string(message);
  }
  const absl::string_view what = message.substr(0, fit);
  const absl::string_view needs =
      message.substr(fit + kDoesNotFit.size(), plan - fit - kDoesNotFit.size());
  // "CATEGORY BYTES, ...; host H, shm S, device D"
  const absl::string_view plan_text =
      message.substr(plan + kPlan.size(), limits - plan - kPlan.size());
  const absl::string_view limits_text =
      absl::StripSuffix(message.substr(limits + kLimits.size()), ".");
  std::string out = absl::StrCat(what, ": the plan does not fit in memory:");
  AppendList(&out, needs, "; ");
  const std::vector<absl::string_view> plan_parts =
      absl::StrSplit(plan_text, absl::MaxSplits("; ", 1));
  absl::StrAppend(&out, "\n  plan",
                  plan_parts.size() == 2
                      ? absl::StrCat(" (", plan_parts[1], ")")
                      : std::string(),
                  ":");
  AppendList(&out, plan_parts[0], ", ");
  absl::StrAppend(&out, "\n  limits:");
  AppendList(&out, limits_text, "; ");
  return out;
}

}  // namespace shardd::client
