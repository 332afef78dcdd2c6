#include "daemon/node/export_rendezvous.h"

#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/rendezvous_key.h"

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

}  // namespace

ExportRendezvous::ExportRendezvous(comm::Store& store, Options options)
    : store_(store), options_(std::move(options)) {}

absl::Status ExportRendezvous::Agree(int64_t step) {
  if (options_.world_size <= 1) return absl::OkStatus();
  return options_.rank == 0 ? Lead(step) : Follow(step);
}

absl::Status ExportRendezvous::Lead(int64_t step) {
  const std::string attempt = absl::StrCat(
      absl::Hex(options_.attempt_id ? options_.attempt_id() : RandomAttempt()));
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
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "a FULL export is collective: rank", missing.size() == 1 ? " " : "s ",
      absl::StrJoin(missing, ", "), " did not call ExportState at step ", step,
      " within ", absl::FormatDuration(options_.window),
      "; nothing was gathered or written (run the export on every rank's "
      "daemon at once: shardctl export --sockets=..., or --other_ranks_join "
      "on every node)"));
}

absl::Status ExportRendezvous::Follow(int64_t step) {
  const MonoTime offer_until = MonoNow() + options_.window;
  const MonoTime decision_until = offer_until + kDecisionGrace;
  const std::string join_key = core::ExportKey(options_.rank, "join");
  std::string joined;  // The attempt this rank joined.
  Offer last;
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
    }
    if (!joined.empty()) {
      absl::StatusOr<std::string> decision =
          GetOrEmpty(store_, core::ExportKey(0, "decision"));
      if (!decision.ok()) return decision.status();
      std::vector<std::string> parts = absl::StrSplit(*decision, ':');
      if (parts.size() >= 2 && parts[0] == joined) {
        if (parts[1] == "go") return absl::OkStatus();
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

}  // namespace shardd::node
