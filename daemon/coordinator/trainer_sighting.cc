#include "daemon/coordinator/trainer_sighting.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardd::coordinator {

void TrainerSighting::Note(const TrainerReport& report, MonoTime now) {
  reported = true;
  reported_at = now;
  attached = report.attached;
  last_call = report.attached ? now - report.quiet : MonoTime::InfinitePast();
}

std::vector<std::string> QuietTrainers(const std::vector<RankSighting>& live,
                                       MonoTime since, MonoTime now) {
  std::vector<std::string> quiet;
  for (const RankSighting& s : live) {
    const TrainerSighting& t = s.trainer;
    if (!t.reported || t.reported_at < since) continue;
    if (!t.attached) {
      quiet.push_back(
          absl::StrCat("rank ", s.rank, " has no trainer attached"));
    } else if (t.last_call < since) {
      quiet.push_back(absl::StrCat(
          "rank ", s.rank, "'s trainer has not called its daemon for ",
          absl::FormatDuration(
              absl::Trunc(now - t.last_call, absl::Milliseconds(100)))));
    }
  }
  return quiet;
}

std::string TrainersDuringStall(const std::vector<RankSighting>& live,
                                MonoTime since, MonoTime now) {
  // Whose trainer did not call its daemon since the first of these epochs
  // ended: its peers wait for it in every epoch.
  const std::vector<std::string> quiet = QuietTrainers(live, since, now);
  if (!quiet.empty()) {
    return absl::StrCat(absl::StrJoin(quiet, ", "),
                        " (since before the first of these epochs ended: a "
                        "trainer that exited for good, or stopped?)");
  }
  for (const RankSighting& s : live) {
    if (s.trainer.reported) {
      return "every trainer called its daemon during these epochs (a step "
             "slower than the collective timeout?)";
    }
  }
  return "the members did not report their trainers";
}

}  // namespace shardd::coordinator
