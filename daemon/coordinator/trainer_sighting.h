#ifndef SHARDD_DAEMON_COORDINATOR_TRAINER_SIGHTING_H_
#define SHARDD_DAEMON_COORDINATOR_TRAINER_SIGHTING_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

// A member's report of its trainer (TrainerPresence in the protocol).
struct TrainerReport {
  bool attached = false;
  // Since the trainer's last call (or registration), on the member's clock.
  absl::Duration quiet = absl::ZeroDuration();
};

// What the coordinator last heard of one member's trainer. Plain data.
struct TrainerSighting {
  // A heartbeat of this member reported its trainer, and when.
  bool reported = false;
  MonoTime reported_at = MonoTime::InfinitePast();
  bool attached = false;
  // The report's time minus the quiet time it gave.
  MonoTime last_call = MonoTime::InfinitePast();

  // Takes in `report`, received at `now`.
  void Note(const TrainerReport& report, MonoTime now);
};

// A live member's rank and what was heard of its trainer.
struct RankSighting {
  int rank = 0;
  TrainerSighting trainer;
};

// "rank R's trainer has not called its daemon for D" (or "rank R has no
// trainer attached") for each of `live` whose trainer did not call since
// `since`, as of a report made since (a call after the last report is not
// known yet). Pure.
std::vector<std::string> QuietTrainers(const std::vector<RankSighting>& live,
                                       MonoTime since, MonoTime now);

// The sentence of an EPOCH_STALLED diagnosis (epochs without a commit since
// `since`) about the trainers: the quiet ones, else that every trainer
// called, else that none was reported. Pure.
std::string TrainersDuringStall(const std::vector<RankSighting>& live,
                                MonoTime since, MonoTime now);

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_TRAINER_SIGHTING_H_
