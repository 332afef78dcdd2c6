#include "client/event_printer.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/export_driver.h"
#include "client/json_line.h"

namespace shardd::client {
namespace {

// Erases from the cursor to the end of the line (ECMA-48 EL).
constexpr absl::string_view kEraseLine = "\x1b[K";

std::string EnumName(const std::string& name, absl::string_view prefix) {
  absl::string_view view = name;
  absl::ConsumePrefix(&view, prefix);
  return std::string(view);
}

std::string Phase(v1::RecoveryPhase phase) {
  return EnumName(v1::RecoveryPhase_Name(phase), "RECOVERY_PHASE_");
}

std::string Prefix(const v1::TrainerEvent& event) {
  return absl::StrFormat(
      "%s  #%d  epoch %d  ",
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                       absl::FromUnixMillis(event.time_unix_ms()),
                       absl::UTCTimeZone()),
      event.sequence(), event.epoch());
}

std::string Members(const v1::EpochChanged& e) {
  std::vector<std::string> members;
  for (const v1::MemberInfo& m : e.members()) {
    members.push_back(absl::StrFormat(
        "%d %s %s@%s", m.rank(),
        EnumName(v1::MemberState_Name(m.state()), "MEMBER_STATE_"),
        m.identity(), m.peer_address()));
  }
  return absl::StrJoin(members, ", ");
}

std::string Snapshot(const v1::GetStatusResponse& s) {
  std::string out = absl::StrFormat(
      "snapshot  rank %d %s, epoch %d %s, committed step %d, %s", s.rank(),
      EnumName(v1::MemberState_Name(s.member_state()), "MEMBER_STATE_"),
      s.epoch(), s.ready() ? "ready" : "not ready", s.committed_step(),
      s.registered() ? "model registered" : "no model registered");
  if (s.recovery_phase() != v1::RECOVERY_PHASE_UNSPECIFIED) {
    absl::StrAppend(&out, ", recovery ", Phase(s.recovery_phase()));
  }
  if (s.job_state() == v1::JOB_STATE_FAILED) {
    absl::StrAppend(&out, ", job FAILED: ", s.job_failure());
  }
  return out;
}

// "from rank 3", "from rank 2 (attempt 2)" for a shard copy's report; ""
// for the others (and from daemons that predate the fields).
std::string CopySource(const v1::RecoveryProgress& r) {
  if (r.attempt() <= 0) return "";
  std::string out = absl::StrCat("from rank ", r.source_rank());
  if (r.attempt() > 1) absl::StrAppend(&out, " (attempt ", r.attempt(), ")");
  return out;
}

std::string Recovery(const v1::RecoveryProgress& r) {
  std::string out = absl::StrCat("recovery  ", Phase(r.phase()));
  if (const std::string from = CopySource(r); !from.empty()) {
    absl::StrAppend(&out, "  ", from);
  }
  if (r.bytes_total() > 0) {
    absl::StrAppend(&out, "  ",
                    FormatExportProgress(r.bytes_done(), r.bytes_total(),
                                         absl::ZeroDuration(), 0));
  }
  if (!r.plan().reason().empty()) {
    absl::StrAppend(&out, "  (", r.plan().reason(), ")");
  }
  return out;
}

std::string Export(const v1::ExportProgress& p) {
  std::string out =
      absl::StrCat("export_progress  ", p.path(), "  ",
                   FormatExportProgress(p.bytes_done(), p.bytes_total(),
                                        absl::ZeroDuration(), 0));
  if (p.done()) absl::StrAppend(&out, "  done: ", p.status());
  return out;
}

}  // namespace

EventPrinter::EventPrinter(std::FILE* out, Options options)
    : out_(out), options_(options) {}

std::string EventPrinter::TextLine(const v1::TrainerEvent& event) {
  std::string line = Prefix(event);
  switch (event.event_case()) {
    case v1::TrainerEvent::kSnapshot:
      absl::StrAppend(&line, Snapshot(event.snapshot()));
      break;
    case v1::TrainerEvent::kEpochChanged: {
      const v1::EpochChanged& e = event.epoch_changed();
      absl::StrAppendFormat(&line, "epoch_changed  %d -> %d: %s; members: %s",
                            e.previous_epoch(), e.epoch(), e.reason(),
                            Members(e));
      break;
    }
    case v1::TrainerEvent::kStepAborted: {
      const v1::StepAborted& a = event.step_aborted();
      absl::StrAppendFormat(&line, "step_aborted  step %d: %s", a.step(),
                            a.reason());
      if (!a.failed_ranks().empty()) {
        absl::StrAppend(&line, "; failed ranks [",
                        absl::StrJoin(a.failed_ranks(), ", "), "]");
      }
      break;
    }
    case v1::TrainerEvent::kRecovery:
      absl::StrAppend(&line, Recovery(event.recovery()));
      break;
    case v1::TrainerEvent::kReady:
      absl::StrAppendFormat(&line, "ready  committed step %d",
                            event.ready().committed_step());
      break;
    case v1::TrainerEvent::kStepCommitted:
      absl::StrAppendFormat(&line, "step_committed  step %d, grad norm %.6g",
                            event.step_committed().step(),
                            event.step_committed().grad_norm());
      break;
    case v1::TrainerEvent::kJobFailed:
      absl::StrAppend(&line, "job_failed  ", event.job_failed().reason());
      break;
    case v1::TrainerEvent::kExportProgress:
      absl::StrAppend(&line, Export(event.export_progress()));
      break;
    case v1::TrainerEvent::kCopyEngineReady: {
      const v1::CopyEngineReady& c = event.copy_engine_ready();
      absl::StrAppendFormat(
          &line, "copy_engine_ready  copying from rank %d, engine %s in %.3f s",
          c.source_rank(),
          c.prepared_during_rendezvous() ? "prepared during the rendezvous"
                                         : "built after the header",
          c.build_seconds());
      break;
    }
    case v1::TrainerEvent::EVENT_NOT_SET:
      // A kind this shardctl predates (the proto only grows); proto3 JSON
      // drops unknown fields, so -o json cannot show it either.
      absl::StrAppend(&line,
                      "an event kind this shardctl does not know (a newer "
                      "daemon)");
      break;
  }
  return line;
}

bool EventPrinter::InProgress(const v1::TrainerEvent& event, BarKind* kind,
                              int64_t* done, int64_t* total) {
  if (event.has_export_progress()) {
    const v1::ExportProgress& p = event.export_progress();
    if (p.done() || p.bytes_total() <= 0) return false;
    *kind = BarKind::kExport;
    *done = p.bytes_done();
    *total = p.bytes_total();
    return true;
  }
  if (event.has_recovery()) {
    const v1::RecoveryProgress& r = event.recovery();
    if (r.phase() != v1::RECOVERY_PHASE_TRANSFERRING_STATE ||
        r.bytes_total() <= 0) {
      return false;
    }
    *kind = BarKind::kCopy;
    *done = r.bytes_done();
    *total = r.bytes_total();
    return true;
  }
  return false;
}

bool EventPrinter::Supersedes(const v1::TrainerEvent& event) const {
  return bar_ == BarKind::kCopy && event.has_recovery() &&
         event.recovery().phase() == v1::RECOVERY_PHASE_TRANSFERRING_STATE &&
         (event.epoch() != bar_epoch_ ||
          event.recovery().attempt() != bar_attempt_);
}

bool EventPrinter::Ends(const v1::TrainerEvent& event, BarKind kind) {
  switch (kind) {
    case BarKind::kNone:
      return false;
    case BarKind::kExport:
      return event.has_export_progress() && event.export_progress().done();
    case BarKind::kCopy:
      return event.has_recovery() &&
             event.recovery().phase() != v1::RECOVERY_PHASE_TRANSFERRING_STATE;
  }
  return false;
}

std::string EventPrinter::BarLine(const v1::TrainerEvent& event, int64_t done,
                                  int64_t total) const {
  const absl::Duration elapsed =
      absl::Milliseconds(event.time_unix_ms() - bar_started_unix_ms_);
  const int width = options_.terminal ? options_.bar_width : 0;
  const std::string progress =
      FormatExportProgress(done, total, elapsed, width);
  const std::string path =
      bar_ == BarKind::kExport ? event.export_progress().path() : "";
  const std::string from =
      bar_ == BarKind::kCopy ? CopySource(event.recovery()) : "";
  auto line = [&](absl::string_view prefix, absl::string_view shown) {
    return bar_ == BarKind::kExport
               ? absl::StrCat(prefix, "export_progress  ", shown, "  ",
                              progress)
               : absl::StrCat(prefix, "recovery  TRANSFERRING_STATE  ", from,
                              from.empty() ? "" : "  ", progress);
  };
  std::string full = line(Prefix(event), path);
  const size_t columns =
      options_.terminal ? static_cast<size_t>(std::max(0, options_.columns))
                        : 0;
  if (columns == 0 || full.size() < columns) return full;
  // A bar that wraps cannot be redrawn with "\r": drop the time, then all
  // of the path but its file name, then whatever still does not fit.
  const size_t slash = path.rfind('/');
  const std::string file =
      slash == std::string::npos ? path : path.substr(slash + 1);
  std::string shorter = line(absl::StrFormat("#%d  ", event.sequence()), file);
  if (shorter.size() >= columns) shorter.resize(columns - 1);
  return shorter;
}

void EventPrinter::StartBar(BarKind kind, const v1::TrainerEvent& event) {
  bar_ = kind;
  bar_started_unix_ms_ = event.time_unix_ms();
  bar_path_ = event.has_export_progress() ? event.export_progress().path() : "";
  bar_epoch_ = event.epoch();
  bar_attempt_ = event.has_recovery() ? event.recovery().attempt() : 0;
}

absl::Status EventPrinter::Write(const std::string& text) {
  if (std::fputs(text.c_str(), out_) == EOF || std::fflush(out_) == EOF) {
    return absl::ErrnoToStatus(errno, "cannot write the events");
  }
  return absl::OkStatus();
}

absl::Status EventPrinter::Print(const v1::TrainerEvent& event) {
  if (options_.format == Format::kJson) {
    absl::StatusOr<std::string> line = JsonLine(event);
    if (!line.ok()) return line.status();
    return Write(absl::StrCat(*line, "\n"));
  }
  BarKind kind = BarKind::kNone;
  int64_t done = 0, total = 0;
  if (InProgress(event, &kind, &done, &total)) {
    absl::string_view text;
    const bool same =
        kind == bar_ &&
        (kind == BarKind::kExport ? event.export_progress().path() == bar_path_
                                  : !Supersedes(event));
    if (!same) {
      // Another export or copy: the previous bar stays as last drawn.
      if (options_.terminal && bar_ != BarKind::kNone) text = "\n";
      StartBar(kind, event);
    }
    const std::string line = BarLine(event, done, total);
    if (!options_.terminal) return Write(absl::StrCat(text, line, "\n"));
    bar_text_ = line;
    return Write(absl::StrCat(text, "\r", line, kEraseLine));
  }
  const bool bar_open = bar_ != BarKind::kNone;
  // Another attempt of the copy (a retry, or a new epoch's): the bar of
  // the one before stays as last drawn, showing how far it got.
  const bool superseded = Supersedes(event);
  const bool ends = superseded || Ends(event, bar_);
  if (ends) bar_ = BarKind::kNone;
  if (!options_.terminal || !bar_open) {
    return Write(absl::StrCat(TextLine(event), "\n"));
  }
  if (superseded) return Write(absl::StrCat("\n", TextLine(event), "\n"));
  // Over the bar's line, then the bar again below unless this ended it.
  return Write(absl::StrCat("\r", TextLine(event), kEraseLine, "\n",
                            ends ? "" : bar_text_));
}

void EventPrinter::Finish() {
  if (options_.terminal && bar_ != BarKind::kNone) {
    std::fputs("\n", out_);
    std::fflush(out_);
  }
  bar_ = BarKind::kNone;
}

}  // namespace shardd::client
