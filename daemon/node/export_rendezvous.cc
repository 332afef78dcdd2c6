#include "daemon/node/export_rendezvous.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/rendezvous_key.h"
#include "daemon/recovery/failpoint.h"

namespace shardd::node {
namespace {

uint64_t RandomAttempt() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

// The value of `key`, or "" when it is not set.
absl::StatusOr<std::string> GetOrEmpty(comm::Store& store,
                                       const std::string& key) {
  absl::StatusOr<std::string> value = store.Get(key);
  if (absl::IsNotFound(value.status())) return std::string();
  return value;
}

struct Offer {
  int64_t step = -1;
  std::string attempt;
  bool open = false;
};

Offer ParseOffer(const std::string& value) {
  Offer offer;
  std::vector<std::string> parts = absl::StrSplit(value, ':');
  if (parts.size() == 3 && absl::SimpleAtoi(parts[0], &offer.step)) {
    offer.attempt = parts[1];
    offer.open = parts[2] == "open";
  }
  return offer;
}

// Rank 0's outcome of one attempt (export/0/outcome).
struct Outcome {
  int64_t step = -1;
  std::string attempt;
  absl::Status status;
};

// How much of rank 0's error message the outcome carries.
constexpr size_t kMaxOutcomeMessage = 1024;
// A follower waits for the outcome in the store (the coordinator answers
// when the key is set), one call per slice: rank 0 may write for minutes,
// and W - 1 ranks polling it would load the coordinator.
constexpr absl::Duration kOutcomeWaitSlice = absl::Seconds(1);

// The outcome's key names its attempt: set once per attempt, so that the
// store's Wait (which says only that a key exists) is the whole wait.
std::string OutcomeKey(const std::string& attempt) {
  return core::ExportKey(0, absl::StrCat("outcome.", attempt));
}

std::string FormatOutcome(int64_t step, const std::string& attempt,
                          const absl::Status& status) {
  if (status.ok()) return absl::StrCat(step, ":", attempt, ":ok");
  return absl::StrCat(step, ":", attempt,
                      ":failed:", static_cast<int>(status.code()), ":",
                      status.message().substr(0, kMaxOutcomeMessage));
}

std::optional<Outcome> ParseOutcome(const std::string& value) {
  std::vector<std::string> parts =
      absl::StrSplit(value, absl::MaxSplits(':', 4));
  Outcome outcome;
  if (parts.size() < 3 || !absl::SimpleAtoi(parts[0], &outcome.step)) {
    return std::nullopt;
  }
  outcome.attempt = parts[1];
  if (parts.size() == 3 && parts[2] == "ok") return outcome;
  int code = 0;
  if (parts.size() == 5 && parts[2] == "failed" &&
      absl::SimpleAtoi(parts[3], &code) && code > 0 && code <= 16) {
    outcome.status =
        absl::Status(static_cast<absl::StatusCode>(code), parts[4]);
    return outcome;
  }
  return std::nullopt;
}

}  // namespace

ExportRendezvous::ExportRendezvous(comm::Store& store, Options options)
    : store_(store), options_(std::move(options)) {}

absl::StatusOr<ExportRendezvous::Agreement> ExportRendezvous::Agree(
    int64_t step) {
  if (options_.world_size <= 1) return Agreement::kGo;
  return options_.rank == 0 ? Lead(step) : Follow(step);
}

absl::StatusOr<std::string> ExportRendezvous::WrittenBefore(int64_t step) {
  if (!options_.written) return std::string();
  std::vector<std::string> learned = {options_.record->learned()};
  for (int r = 1; r < options_.world_size; ++r) {
    absl::StatusOr<std::string> value =
        GetOrEmpty(store_, core::ExportKey(r, "learned"));
    if (!value.ok()) return value.status();
    learned.push_back(*std::move(value));
  }
  for (const std::string& value : learned) {
    const std::optional<Outcome> outcome = ParseOutcome(value);
    if (outcome.has_value() && outcome->step == step && outcome->status.ok() &&
        options_.written(step)) {
      return outcome->attempt;
    }
  }
  return std::string();
}

absl::StatusOr<ExportRendezvous::Agreement> ExportRendezvous::Lead(
    int64_t step) {
  absl::StatusOr<std::string> before = WrittenBefore(step);
  if (!before.ok()) return before.status();
  if (!before->empty()) {
    attempt_ = *before;
    return Agreement::kWrittenBefore;
  }
  const std::string attempt = absl::StrCat(
      absl::Hex(options_.attempt_id ? options_.attempt_id() : RandomAttempt()));
  attempt_ = attempt;
  const std::string offer_key = core::ExportKey(0, "offer");
  if (absl::Status s =
          store_.Set(offer_key, absl::StrCat(step, ":", attempt, ":open"));
      !s.ok()) {
    return s;
  }
  const MonoTime until = MonoNow() + options_.window;
  std::vector<int> missing;
  while (true) {
    missing.clear();
    for (int r = 1; r < options_.world_size; ++r) {
      absl::StatusOr<std::string> joined =
          GetOrEmpty(store_, core::ExportKey(r, "join"));
      if (!joined.ok()) return joined.status();
      if (*joined != attempt) missing.push_back(r);
    }
    if (missing.empty() || MonoNow() >= until) break;
    SleepUntil(MonoNow() + kPollInterval);
  }
  const std::string decision =
      missing.empty()
          ? absl::StrCat(attempt, ":go")
          : absl::StrCat(attempt, ":abort:", absl::StrJoin(missing, ","));
  if (absl::Status s = store_.Set(core::ExportKey(0, "decision"), decision);
      !s.ok()) {
    return s;
  }
  // Late comers must not join a decided attempt.
  if (absl::Status s =
          store_.Set(offer_key, absl::StrCat(step, ":", attempt, ":closed"));
      !s.ok()) {
    return s;
  }
  if (missing.empty()) return Agreement::kGo;
  return absl::FailedPreconditionError(absl::StrCat(
      "a FULL export is collective: rank", missing.size() == 1 ? " " : "s ",
      absl::StrJoin(missing, ", "), " did not call ExportState at step ", step,
      " within ", absl::FormatDuration(options_.window),
      "; nothing was gathered or written (run the export on every rank's "
      "daemon at once: shardctl export --sockets=..., or --other_ranks_join "
      "on every node)"));
}

absl::StatusOr<ExportRendezvous::Agreement> ExportRendezvous::Follow(
    int64_t step) {
  const MonoTime offer_until = MonoNow() + options_.window;
  const MonoTime decision_until = offer_until + kDecisionGrace;
  const std::string join_key = core::ExportKey(options_.rank, "join");
  std::string joined;  // The attempt this rank joined.
  Offer last;
  // An earlier attempt at this step whose outcome this rank did not learn.
  std::optional<ExportRecord::Attempt> unresolved =
      options_.record->Unresolved(step);
  while (true) {
    absl::StatusOr<std::string> offer_value =
        GetOrEmpty(store_, core::ExportKey(0, "offer"));
    if (!offer_value.ok()) return offer_value.status();
    last = ParseOffer(*offer_value);
    if (last.open && last.step == step && last.attempt != joined) {
      if (absl::Status s = store_.Set(join_key, last.attempt); !s.ok()) {
        return s;
      }
      joined = last.attempt;
      attempt_ = joined;
      // Rank 0 exports again: whatever the earlier attempt did, this one
      // decides.
      if (unresolved.has_value()) options_.record->ClearUnresolved();
      unresolved.reset();
    }
    if (joined.empty() && unresolved.has_value()) {
      absl::StatusOr<std::string> value =
          GetOrEmpty(store_, OutcomeKey(unresolved->attempt));
      if (!value.ok()) return value.status();
      const std::optional<Outcome> outcome = ParseOutcome(*value);
      if (outcome.has_value() && outcome->attempt == unresolved->attempt) {
        options_.record->ClearUnresolved();
        if (outcome->status.ok()) {
          attempt_ = outcome->attempt;
          return Agreement::kWrittenBefore;
        }
        // Rank 0 did not write it, and its trainer exports again: wait for
        // its offer.
        unresolved.reset();
      }
    }
    if (!joined.empty()) {
      absl::StatusOr<std::string> decision =
          GetOrEmpty(store_, core::ExportKey(0, "decision"));
      if (!decision.ok()) return decision.status();
      std::vector<std::string> parts = absl::StrSplit(*decision, ':');
      if (parts.size() >= 2 && parts[0] == joined) {
        if (parts[1] == "go") return Agreement::kGo;
        return absl::FailedPreconditionError(absl::StrCat(
            "a FULL export is collective: rank 0 gave up waiting for rank",
            parts.size() > 2 && parts[2].find(',') != std::string::npos ? "s "
                                                                        : " ",
            parts.size() > 2 ? parts[2] : "?", " to call ExportState at step ",
            step, "; nothing was gathered or written"));
      }
    }
    const MonoTime now = MonoNow();
    if (joined.empty() && now >= offer_until) {
      return absl::DeadlineExceededError(absl::StrCat(
          "a FULL export is collective: rank 0 did not start one at step ",
          step, " within ", absl::FormatDuration(options_.window),
          last.step >= 0 && last.step != step
              ? absl::StrCat(" (its last offer was for step ", last.step, ")")
              : std::string(),
          "; nothing was gathered or written (run the export on every "
          "rank's daemon at once)"));
    }
    if (!joined.empty() && now >= decision_until) {
      // Withdrawn, so that a rank 0 deciding after all does not count this
      // rank in (best effort: the wait already ran far past rank 0's own).
      (void)store_.Set(join_key, "withdrawn");
      return absl::DeadlineExceededError(absl::StrCat(
          "a FULL export: rank 0 made no decision on attempt ", joined,
          " within ", absl::FormatDuration(options_.window + kDecisionGrace)));
    }
    SleepUntil(now + kPollInterval);
  }
}

absl::Status ExportRendezvous::Conclude(int64_t step, const absl::Status& mine,
                                        MonoTime deadline) {
  if (options_.world_size <= 1) return mine;
  if (options_.rank == 0) {
    const std::string outcome = FormatOutcome(step, attempt_, mine);
    options_.record->NoteOutcome(outcome);
    if (mine.ok()) options_.record->NoteLearned(outcome);
    // Not published (the epoch ended): published again in the next one.
    (void)store_.Set(OutcomeKey(attempt_), outcome);
    // Published; this rank's trainer not yet answered.
    SHARDD_FAILPOINT("export.concluded");
    return mine;
  }
  if (!mine.ok()) return mine;
  return AwaitOutcome(step, deadline);
}

absl::Status ExportRendezvous::AwaitOutcome(int64_t step, MonoTime deadline) {
  const std::string key = OutcomeKey(attempt_);
  while (true) {
    const MonoTime slice = std::min(deadline, MonoNow() + kOutcomeWaitSlice);
    absl::Status waited =
        store_.Wait({key}, std::max(slice - MonoNow(), absl::Milliseconds(1)));
    absl::StatusOr<std::string> value =
        absl::IsDeadlineExceeded(waited) ? std::string()
        : waited.ok()                    ? GetOrEmpty(store_, key)
                                         : absl::StatusOr<std::string>(waited);
    if (!value.ok()) {
      options_.record->NoteUnresolved({step, attempt_});
      return absl::Status(
          value.status().code(),
          absl::StrCat("a FULL export of step ", step, " (attempt ", attempt_,
                       "): this rank's part is done but it could not learn "
                       "whether rank 0 wrote the file (",
                       value.status().message(),
                       "); after recovery export again: if rank 0 wrote it, "
                       "this rank is told so without a new export"));
    }
    const std::optional<Outcome> outcome = ParseOutcome(*value);
    if (outcome.has_value() && outcome->attempt == attempt_) {
      if (outcome->status.ok()) {
        options_.record->NoteLearned(*value);
        return absl::OkStatus();
      }
      // Rank 0's caller gave up (CANCELLED): not this rank's cancellation,
      // and not to be retried (rank 0's trainer will not offer again).
      const absl::StatusCode code =
          outcome->status.code() == absl::StatusCode::kCancelled
              ? absl::StatusCode::kFailedPrecondition
              : outcome->status.code();
      return absl::Status(code,
                          absl::StrCat("a FULL export of step ", step,
                                       ": rank 0 did not write the file: ",
                                       outcome->status.message()));
    }
    const MonoTime now = MonoNow();
    if (now >= deadline) {
      options_.record->NoteUnresolved({step, attempt_});
      return absl::DeadlineExceededError(absl::StrCat(
          "a FULL export of step ", step, " (attempt ", attempt_,
          "): this rank's part is done; rank 0 had not said whether it wrote "
          "the file by the deadline"));
    }
  }
}

void ExportRendezvous::PublishOutcome(comm::Store& store,
                                      const ExportRecord& record, int rank) {
  const std::string outcome = record.outcome();
  if (const std::optional<Outcome> parsed = ParseOutcome(outcome)) {
    (void)store.Set(OutcomeKey(parsed->attempt), outcome);
  }
  const std::string learned = record.learned();
  if (rank > 0 && !learned.empty()) {
    (void)store.Set(core::ExportKey(rank, "learned"), learned);
  }
}

}  // namespace shardd::node
