#include "daemon/coordinator/progress_watch.h"

#include "absl/strings/str_cat.h"

namespace shardd::coordinator {
namespace {

// A long spell's causes: the first few and the last few are kept (the
// first say how it began, the last what it looks like now).
constexpr size_t kFirstCauses = 2;
constexpr size_t kLastCauses = 3;

}  // namespace

void ProgressWatch::Spell::Add(const EpochEnd& end) {
  if (epochs == 0) since = end.time;
  ++epochs;
  causes.push_back(absl::StrCat("epoch ", end.epoch, ": ", end.cause));
  if (causes.size() > kFirstCauses + kLastCauses) {
    causes.erase(causes.begin() + kFirstCauses);
  }
}

Stall ProgressWatch::Spell::Verdict(bool without_commit) const {
  Stall stall;
  stall.without_commit = without_commit;
  stall.epochs = epochs;
  stall.since = since;
  stall.causes = causes;
  const int left_out = epochs - static_cast<int>(causes.size());
  if (left_out > 0) {
    stall.causes.insert(stall.causes.begin() + kFirstCauses,
                        absl::StrCat("(", left_out, " more)"));
  }
  return stall;
}

std::optional<Stall> ProgressWatch::EpochEnded(const EpochEnd& end) {
  if (!end.planned) return std::nullopt;
  if (end.membership != end.planned_membership) {
    // A member came or went during the epoch.
    failed_.Reset();
    uncommitted_.Reset();
    return std::nullopt;
  }
  if (end.partitioned) return std::nullopt;
  for (Spell* spell : {&failed_, &uncommitted_}) {
    if (spell == &failed_ && end.ready) continue;  // Ready() reset it.
    if (spell->membership != end.membership) {
      spell->Reset();
      spell->membership = end.membership;
    }
    spell->Add(end);
  }
  if (failed_.epochs >= options_.max_failed_epochs) {
    return failed_.Verdict(/*without_commit=*/false);
  }
  if (uncommitted_.epochs >= options_.max_epochs_without_commit) {
    return uncommitted_.Verdict(/*without_commit=*/true);
  }
  return std::nullopt;
}

void ProgressWatch::Ready() { failed_.Reset(); }

void ProgressWatch::Committed() {
  failed_.Reset();
  uncommitted_.Reset();
}

}  // namespace shardd::coordinator
