#include "daemon/recovery/failpoint.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardd::recovery {
namespace {

enum class Action { kKill, kStop, kAbort, kExit, kSleep, kFail };

struct Entry {
  std::string name;
  Action action = Action::kKill;
  int64_t sleep_ms = 0;
  int64_t nth = 1;
};

struct State {
  absl::Mutex mu;
  std::vector<Entry> entries ABSL_GUARDED_BY(mu);
  std::map<std::string, int64_t, std::less<>> counts ABSL_GUARDED_BY(mu);
};

State& GetState() {
  static State* state = new State;
  return *state;
}

std::string ActionText(const Entry& entry) {
  switch (entry.action) {
    case Action::kKill:
      return "kill";
    case Action::kStop:
      return "stop";
    case Action::kAbort:
      return "abort";
    case Action::kExit:
      return "exit";
    case Action::kSleep:
      return absl::StrCat("sleep=", entry.sleep_ms);
    case Action::kFail:
      return "fail";
  }
  return "?";
}

bool IsKnown(absl::string_view name) {
  for (absl::string_view known : Failpoints::KnownNames()) {
    if (known == name) return true;
  }
  return false;
}

absl::StatusOr<Entry> ParseEntry(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("failpoint entry '", text, "': ", why));
  };
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    return bad("expected name:action[@N]");
  }
  Entry entry;
  entry.name = std::string(absl::StripAsciiWhitespace(text.substr(0, colon)));
  if (!IsKnown(entry.name)) {
    return bad(absl::StrCat(
        "unknown name '", entry.name,
        "' (known: ", absl::StrJoin(Failpoints::KnownNames(), ", "), ")"));
  }
  absl::string_view action = text.substr(colon + 1);
  const size_t at = action.find('@');
  if (at != absl::string_view::npos) {
    absl::string_view count = absl::StripAsciiWhitespace(action.substr(at + 1));
    if (!absl::SimpleAtoi(count, &entry.nth) || entry.nth < 1) {
      return bad(absl::StrCat("@N must be an integer >= 1, got '", count, "'"));
    }
    action = action.substr(0, at);
  }
  action = absl::StripAsciiWhitespace(action);
  if (action == "kill") {
    entry.action = Action::kKill;
  } else if (action == "stop") {
    entry.action = Action::kStop;
  } else if (action == "abort") {
    entry.action = Action::kAbort;
  } else if (action == "exit") {
    entry.action = Action::kExit;
  } else if (action == "fail") {
    entry.action = Action::kFail;
  } else if (absl::ConsumePrefix(&action, "sleep=")) {
    entry.action = Action::kSleep;
    if (!absl::SimpleAtoi(action, &entry.sleep_ms) || entry.sleep_ms < 0) {
      return bad(
          absl::StrCat("sleep=MS needs milliseconds >= 0, got '", action, "'"));
    }
  } else {
    return bad(absl::StrCat("unknown action '", action,
                            "' (kill, stop, abort, exit, sleep=MS, fail)"));
  }
  return entry;
}

void Act(const Entry& entry, int64_t hit) {
  const std::string line = absl::StrCat(
      "failpoint ", entry.name, ": ", ActionText(entry), " (hit ", hit, ")\n");
  // stderr is unbuffered, but write(2) directly so that the line is out in
  // one piece before a signal ends the process.
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n =
        ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  switch (entry.action) {
    case Action::kKill:
      ::kill(::getpid(), SIGKILL);
      ::_exit(137);  // Not reached.
    case Action::kStop:
      ::kill(::getpid(), SIGSTOP);
      return;
    case Action::kAbort:
      std::abort();
    case Action::kExit:
      ::_exit(3);
    case Action::kSleep:
      absl::SleepFor(absl::Milliseconds(entry.sleep_ms));
      return;
    case Action::kFail:
      return;  // The site acts on Hit's result.
  }
}

}  // namespace

const std::vector<absl::string_view>& Failpoints::KnownNames() {
  static const std::vector<absl::string_view>* names =
      new std::vector<absl::string_view>{
          "allgather.mid",
          "reducescatter.mid",
          "allreduce.mid",
          "vote.before",
          "vote.answer",
          "vote.after",
          "optimizer.mid",
          "transfer.source.mid",
          "transfer.target.mid",
          "checkpoint.write.mid",
          "recovery.before_install",
          "recovery.before_ready",
          "register.agreed",
          "export.mid",
          "export.concluded",
          "commit.decided",
      };
  return *names;
}

absl::Status Failpoints::Configure(absl::string_view spec) {
  std::vector<Entry> entries;
  for (absl::string_view part : absl::StrSplit(spec, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    absl::StatusOr<Entry> entry = ParseEntry(part);
    if (!entry.ok()) return entry.status();
    for (const Entry& other : entries) {
      if (other.name == entry->name && other.nth == entry->nth) {
        return absl::InvalidArgumentError(
            absl::StrCat("failpoint entry '", part, "': ", entry->name, "@",
                         entry->nth, " is armed twice"));
      }
    }
    entries.push_back(*std::move(entry));
  }
  State& state = GetState();
  absl::MutexLock lock(&state.mu);
  const bool any = !entries.empty();
  state.entries = std::move(entries);
  state.counts.clear();
  armed_.store(any, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Failpoints::ConfigureFromEnv() {
  const char* spec = std::getenv("SHARDD_FAILPOINT");
  absl::Status status = Configure(spec == nullptr ? "" : spec);
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("SHARDD_FAILPOINT: ", status.message()));
  }
  return status;
}

bool Failpoints::Hit(absl::string_view name) {
  State& state = GetState();
  std::optional<Entry> fire;
  int64_t hit = 0;
  {
    absl::MutexLock lock(&state.mu);
    auto it = state.counts.find(name);
    if (it == state.counts.end()) {
      it = state.counts.emplace(std::string(name), 0).first;
    }
    hit = ++it->second;
    for (const Entry& entry : state.entries) {
      if (entry.name == name && entry.nth == hit) {
        fire = entry;
        break;
      }
    }
  }
  if (!fire.has_value()) return false;
  Act(*fire, hit);
  return fire->action == Action::kFail;
}

int64_t Failpoints::hits(absl::string_view name) {
  State& state = GetState();
  absl::MutexLock lock(&state.mu);
  auto it = state.counts.find(name);
  return it == state.counts.end() ? 0 : it->second;
}

void Failpoints::ResetForTest() {
  State& state = GetState();
  absl::MutexLock lock(&state.mu);
  state.entries.clear();
  state.counts.clear();
  armed_.store(false, std::memory_order_relaxed);
}

}  // namespace shardd::recovery
