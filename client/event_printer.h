#ifndef SHARDD_CLIENT_EVENT_PRINTER_H_
#define SHARDD_CLIENT_EVENT_PRINTER_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::client {

// Writes a Trainer.WatchEvents stream (shardctl watch) for a person or a
// program:
//   text: one line per event, "<UTC time>  #<sequence>  epoch <e>  <kind>
//         <what matters>", the kind being the event's field name in
//         trainer.proto (step_committed, export_progress, ...);
//   json: one line of proto3 JSON per event (the TrainerEvent as sent).
// On a terminal (text only) an export or shard copy in progress is one
// progress bar redrawn in place rather than a line per report: other
// events are printed above it, and the bar becomes a plain line when the
// export is done or the copy leaves TRANSFERRING_STATE. A shard copy's bar
// belongs to one attempt (RecoveryProgress.attempt, in one epoch): a retry
// from another source, which starts again from 0 bytes, leaves the
// previous attempt's bar as it was and gets a bar of its own, "from rank R
// (attempt N)". Off a terminal a log or a pipe gets the same lines without
// control characters.
//
// Every Print flushes, so that a reader of a pipe or file sees each event
// as it arrives. Thread-compatible; does not own `out`.
class EventPrinter {
 public:
  enum class Format { kText, kJson };
  struct Options {
    Format format = Format::kText;
    // Redraw progress bars in place ("\r", erase to end of line).
    bool terminal = false;
    int bar_width = 30;
    // The terminal's width (0: unknown). A bar is kept narrower, since one
    // that wraps cannot be redrawn in place.
    int columns = 0;
  };

  EventPrinter(std::FILE* out, Options options);
  EventPrinter(const EventPrinter&) = delete;
  EventPrinter& operator=(const EventPrinter&) = delete;

  // Writes `event`. INTERNAL when it cannot be converted to JSON; the
  // write's errno as a status when `out` refuses it (a full disk).
  absl::Status Print(const v1::TrainerEvent& event);

  // Ends a progress bar left open with its newline, so that whatever is
  // written next starts on a line of its own. Idempotent.
  void Finish();

  // The text line of `event`, without a newline (no bar).
  static std::string TextLine(const v1::TrainerEvent& event);

 private:
  // What a bar tracks: an export (by path) or a shard copy.
  enum class BarKind { kNone, kExport, kCopy };

  // True when `event` reports bytes of an export or a copy still running;
  // sets `kind` and the bytes.
  static bool InProgress(const v1::TrainerEvent& event, BarKind* kind,
                         int64_t* done, int64_t* total);
  // Whether `event` ends the bar of `kind`.
  static bool Ends(const v1::TrainerEvent& event, BarKind kind);
  // Whether `event` is another copy attempt's TRANSFERRING_STATE than the
  // open copy bar's.
  bool Supersedes(const v1::TrainerEvent& event) const;
  std::string BarLine(const v1::TrainerEvent& event, int64_t done,
                      int64_t total) const;
  absl::Status Write(const std::string& text);
  void StartBar(BarKind kind, const v1::TrainerEvent& event);

  std::FILE* const out_;
  const Options options_;
  BarKind bar_ = BarKind::kNone;
  // The bar as last drawn (redrawn below any other event).
  std::string bar_text_;
  // The first report of the running export or copy: its time is where the
  // bar's rate starts.
  int64_t bar_started_unix_ms_ = 0;
  std::string bar_path_;
  // The copy attempt the bar shows (and its epoch).
  int64_t bar_epoch_ = 0;
  int bar_attempt_ = 0;
};

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_EVENT_PRINTER_H_
