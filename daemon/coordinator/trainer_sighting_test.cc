#include "daemon/coordinator/trainer_sighting.h"

#include <string>
#include <vector>

#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

const MonoTime kT0 = MonoTime::FromOrigin(absl::Seconds(1'000'000));

RankSighting Reported(int rank, bool attached, absl::Duration quiet,
                      MonoTime at) {
  RankSighting s;
  s.rank = rank;
  s.trainer.Note({.attached = attached, .quiet = quiet}, at);
  return s;
}

TEST(TrainerSightingTest, NoteTakesTheLastCallFromTheQuietTime) {
  TrainerSighting t;
  t.Note({.attached = true, .quiet = absl::Seconds(4)}, kT0);
  EXPECT_TRUE(t.reported);
  EXPECT_EQ(t.reported_at, kT0);
  EXPECT_EQ(t.last_call, kT0 - absl::Seconds(4));
  t.Note({.attached = false, .quiet = absl::ZeroDuration()}, kT0);
  EXPECT_FALSE(t.attached);
  EXPECT_EQ(t.last_call, MonoTime::InfinitePast());
}

TEST(TrainerSightingTest, NamesTrainersQuietSinceAndOnlyWhatAReportShows) {
  const MonoTime since = kT0 + absl::Seconds(10);
  const MonoTime now = kT0 + absl::Seconds(20);
  const std::vector<RankSighting> live = {
      // Called after `since`.
      Reported(0, true, absl::Seconds(1), now),
      // Quiet since kT0, reported after `since`: named.
      Reported(1, true, absl::Seconds(15), kT0 + absl::Seconds(15)),
      // No trainer attached: named.
      Reported(2, false, absl::ZeroDuration(), now),
      // Its last report is older than `since`: a later call is unknown.
      Reported(3, true, absl::Seconds(5), kT0 + absl::Seconds(5)),
      // Never reported.
      RankSighting{.rank = 4, .trainer = {}}};
  EXPECT_EQ(QuietTrainers(live, since, now),
            (std::vector<std::string>{
                "rank 1's trainer has not called its daemon for 20s",
                "rank 2 has no trainer attached"}));
  EXPECT_NE(TrainersDuringStall(live, since, now)
                .find("rank 1's trainer has not called its daemon for 20s, "
                      "rank 2 has no trainer attached (since before"),
            std::string::npos);
}

TEST(TrainerSightingTest, SaysWhenEveryTrainerCalledOrNoneWasReported) {
  const MonoTime now = kT0 + absl::Seconds(20);
  EXPECT_EQ(
      TrainersDuringStall({Reported(0, true, absl::Seconds(1), now)}, kT0, now),
      "every trainer called its daemon during these epochs (a step slower "
      "than the collective timeout?)");
  EXPECT_EQ(
      TrainersDuringStall({RankSighting{.rank = 0, .trainer = {}}}, kT0, now),
      "the members did not report their trainers");
}

}  // namespace
}  // namespace shardd::coordinator
