#include "client/event_printer.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::client {
namespace {

// 2026-12-04T18:00:00.250Z
constexpr int64_t kT0 = 1796407200250;

v1::TrainerEvent Event(int64_t sequence, int64_t ms_after) {
  v1::TrainerEvent event;
  event.set_sequence(sequence);
  event.set_time_unix_ms(kT0 + ms_after);
  event.set_epoch(3);
  return event;
}

v1::TrainerEvent Committed(int64_t sequence, int64_t step) {
  v1::TrainerEvent event = Event(sequence, 0);
  event.mutable_step_committed()->set_step(step);
  event.mutable_step_committed()->set_grad_norm(0.25);
  return event;
}

v1::TrainerEvent ExportAt(int64_t sequence, int64_t ms_after, int64_t done,
                          bool finished = false) {
  v1::TrainerEvent event = Event(sequence, ms_after);
  v1::ExportProgress* p = event.mutable_export_progress();
  p->set_path("/x/m.safetensors");
  p->set_bytes_done(done);
  p->set_bytes_total(1000);
  p->set_done(finished);
  if (finished) p->set_status("OK");
  return event;
}

v1::TrainerEvent CopyAt(int64_t sequence, v1::RecoveryPhase phase,
                        int64_t done) {
  v1::TrainerEvent event = Event(sequence, 0);
  event.mutable_recovery()->set_phase(phase);
  event.mutable_recovery()->set_bytes_done(done);
  event.mutable_recovery()->set_bytes_total(4096);
  return event;
}

// A replacement's report of copy attempt `attempt` from `source` (4 KiB in
// all), `ms_after` kT0.
v1::TrainerEvent AttemptAt(int64_t sequence, int64_t ms_after, int attempt,
                           int source, int64_t done, int64_t total = 4096) {
  v1::TrainerEvent event = Event(sequence, ms_after);
  v1::RecoveryProgress* r = event.mutable_recovery();
  r->set_phase(v1::RECOVERY_PHASE_TRANSFERRING_STATE);
  r->set_bytes_done(done);
  r->set_bytes_total(total);
  r->set_attempt(attempt);
  r->set_source_rank(source);
  return event;
}

// An EventPrinter writing into memory.
class EventPrinterTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (file_ != nullptr) std::fclose(file_);
    std::free(buffer_);
  }

  EventPrinter& Printer(EventPrinter::Format format, bool terminal,
                        int columns = 0) {
    file_ = open_memstream(&buffer_, &size_);
    printer_.emplace(file_, EventPrinter::Options{
                                .format = format,
                                .terminal = terminal,
                                .bar_width = 10,
                                .columns = columns,
                            });
    return *printer_;
  }
  // What has been written so far (every Print flushes).
  std::string Written() const { return std::string(buffer_, size_); }

 private:
  std::FILE* file_ = nullptr;
  char* buffer_ = nullptr;
  size_t size_ = 0;
  std::optional<EventPrinter> printer_;
};

TEST_F(EventPrinterTest, TextLineHasTimeSequenceEpochKindAndFields) {
  EXPECT_EQ(EventPrinter::TextLine(Committed(7, 5)),
            "2026-12-04T18:00:00.250Z  #7  epoch 3  step_committed  step 5, "
            "grad norm 0.25");
  v1::TrainerEvent aborted = Event(8, 0);
  aborted.mutable_step_aborted()->set_step(6);
  aborted.mutable_step_aborted()->set_reason("peer 1 failed");
  aborted.mutable_step_aborted()->add_failed_ranks(1);
  EXPECT_EQ(EventPrinter::TextLine(aborted),
            "2026-12-04T18:00:00.250Z  #8  epoch 3  step_aborted  step 6: "
            "peer 1 failed; failed ranks [1]");
}

TEST_F(EventPrinterTest, SnapshotLineSummarisesTheDaemonState) {
  v1::TrainerEvent event = Event(1, 0);
  v1::GetStatusResponse* s = event.mutable_snapshot();
  s->set_rank(2);
  s->set_member_state(v1::MEMBER_STATE_READY);
  s->set_epoch(3);
  s->set_ready(true);
  s->set_committed_step(10);
  s->set_registered(true);
  EXPECT_EQ(EventPrinter::TextLine(event),
            "2026-12-04T18:00:00.250Z  #1  epoch 3  snapshot  rank 2 READY, "
            "epoch 3 ready, committed step 10, model registered");
}

TEST_F(EventPrinterTest, EpochChangeNamesTheReasonAndMembers) {
  v1::TrainerEvent event = Event(4, 0);
  v1::EpochChanged* e = event.mutable_epoch_changed();
  e->set_previous_epoch(2);
  e->set_epoch(3);
  e->set_reason("rank 1 joined");
  v1::MemberInfo* m = e->add_members();
  m->set_rank(1);
  m->set_state(v1::MEMBER_STATE_JOINING);
  m->set_identity("node-1");
  m->set_peer_address("10.0.0.2:7000");
  EXPECT_EQ(EventPrinter::TextLine(event),
            "2026-12-04T18:00:00.250Z  #4  epoch 3  epoch_changed  2 -> 3: "
            "rank 1 joined; members: 1 JOINING node-1@10.0.0.2:7000");
}

TEST_F(EventPrinterTest, UnknownEventKindSaysSoInsteadOfPrintingNothing) {
  EXPECT_NE(EventPrinter::TextLine(Event(9, 0)).find("does not know"),
            std::string::npos);
}

TEST_F(EventPrinterTest, OffATerminalEachExportReportIsAPlainLine) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, false);
  ASSERT_TRUE(printer.Print(ExportAt(1, 0, 0)).ok());
  ASSERT_TRUE(printer.Print(ExportAt(2, 1000, 400)).ok());
  ASSERT_TRUE(printer.Print(ExportAt(3, 2000, 1000, true)).ok());
  printer.Finish();
  const std::string out = Written();
  EXPECT_EQ(out.find('\r'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  const std::vector<std::string> lines =
      absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << out;
  EXPECT_NE(lines[1].find("export_progress  /x/m.safetensors   40%  400 B / "
                          "1000 B  400 B/s"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[2].find("100%"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("done: OK"), std::string::npos) << lines[2];
}

TEST_F(EventPrinterTest, OnATerminalAnExportIsOneBarRedrawnInPlace) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, true);
  ASSERT_TRUE(printer.Print(ExportAt(1, 0, 0)).ok());
  ASSERT_TRUE(printer.Print(ExportAt(2, 1000, 500)).ok());
  // No newline while the export runs: the bar is redrawn over itself.
  EXPECT_EQ(Written().find('\n'), std::string::npos) << Written();
  EXPECT_NE(Written().rfind("\r2026-12-04T18:00:01.250Z  #2  epoch 3  "
                            "export_progress  /x/m.safetensors  [#####     ]  "
                            "50%"),
            std::string::npos)
      << Written();
  // Another event goes above the bar, which is drawn again below it.
  ASSERT_TRUE(printer.Print(Committed(3, 5)).ok());
  const std::string after_step = Written();
  const size_t step = after_step.find("step_committed  step 5");
  ASSERT_NE(step, std::string::npos);
  EXPECT_NE(after_step.find("\x1b[K\n", step), std::string::npos);
  EXPECT_NE(after_step.find("[#####     ]", step), std::string::npos);
  // Done: the final line replaces the bar and ends with a newline.
  ASSERT_TRUE(printer.Print(ExportAt(4, 2000, 1000, true)).ok());
  const std::string out = Written();
  EXPECT_EQ(out.back(), '\n') << out;
  const size_t done = out.rfind("done: OK");
  ASSERT_NE(done, std::string::npos);
  EXPECT_EQ(out.substr(done), "done: OK\x1b[K\n") << "bar redrawn: " << out;
}

TEST_F(EventPrinterTest, OnATerminalAShardCopyBarEndsWhenThePhaseChanges) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, true);
  ASSERT_TRUE(
      printer.Print(CopyAt(1, v1::RECOVERY_PHASE_TRANSFERRING_STATE, 1024))
          .ok());
  EXPECT_NE(Written().find("recovery  TRANSFERRING_STATE  [##        ]  25%"),
            std::string::npos)
      << Written();
  EXPECT_EQ(Written().find('\n'), std::string::npos);
  ASSERT_TRUE(printer.Print(CopyAt(2, v1::RECOVERY_PHASE_COMPLETE, 4096)).ok());
  const std::string out = Written();
  EXPECT_EQ(out.back(), '\n');
  EXPECT_NE(out.find("recovery  COMPLETE  100%  4.00 KiB / 4.00 KiB"),
            std::string::npos)
      << out;
}

TEST_F(EventPrinterTest, ACopyReportNamesItsSourceAndARetrysAttempt) {
  EXPECT_EQ(EventPrinter::TextLine(AttemptAt(5, 0, 1, 3, 0, 0)),
            "2026-12-04T18:00:00.250Z  #5  epoch 3  recovery  "
            "TRANSFERRING_STATE  from rank 3");
  EXPECT_EQ(EventPrinter::TextLine(AttemptAt(6, 0, 2, 1, 1024)),
            "2026-12-04T18:00:00.250Z  #6  epoch 3  recovery  "
            "TRANSFERRING_STATE  from rank 1 (attempt 2)   25%  1.00 KiB / "
            "4.00 KiB");
}

TEST_F(EventPrinterTest, OffATerminalEachCopyReportIsAPlainLineWithItsRate) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, false);
  ASSERT_TRUE(printer.Print(AttemptAt(1, 0, 1, 3, 0)).ok());
  ASSERT_TRUE(printer.Print(AttemptAt(2, 1000, 1, 3, 2048)).ok());
  const std::vector<std::string> lines =
      absl::StrSplit(Written(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << Written();
  EXPECT_NE(lines[1].find("recovery  TRANSFERRING_STATE  from rank 3   50%  "
                          "2.00 KiB / 4.00 KiB  2.00 KiB/s"),
            std::string::npos)
      << lines[1];
}

TEST_F(EventPrinterTest, OnATerminalARetriedCopyGetsABarOfItsOwn) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, true);
  ASSERT_TRUE(printer.Print(AttemptAt(1, 0, 1, 3, 0)).ok());
  ASSERT_TRUE(printer.Print(AttemptAt(2, 500, 1, 3, 3072)).ok());
  EXPECT_EQ(Written().find('\n'), std::string::npos) << Written();
  // The retry's start (no bytes yet) ends the first attempt's bar where it
  // got to (75%) rather than overwriting it.
  ASSERT_TRUE(printer.Print(AttemptAt(3, 600, 2, 1, 0, 0)).ok());
  const std::string retried = Written();
  const size_t start = retried.find(
      "\n2026-12-04T18:00:00.850Z  #3  epoch 3  "
      "recovery  TRANSFERRING_STATE  from rank 1 "
      "(attempt 2)\n");
  ASSERT_NE(start, std::string::npos) << retried;
  EXPECT_NE(retried.rfind("[#######   ]  75%", start), std::string::npos)
      << retried;
  // The retry's bytes, from 0 again: a new bar below, its rate counted
  // from its own first report.
  ASSERT_TRUE(printer.Print(AttemptAt(4, 700, 2, 1, 0)).ok());
  ASSERT_TRUE(printer.Print(AttemptAt(5, 1700, 2, 1, 1024)).ok());
  const std::string out = Written();
  const size_t start_end = out.find("(attempt 2)\n");
  ASSERT_NE(start_end, std::string::npos);
  EXPECT_EQ(out.find('\n', start_end + 12), std::string::npos)
      << "the new bar is redrawn in place: " << out;
  EXPECT_NE(out.rfind("\r2026-12-04T18:00:01.950Z  #5  epoch 3  recovery  "
                      "TRANSFERRING_STATE  from rank 1 (attempt 2)  "
                      "[##        ]  25%  1.00 KiB / 4.00 KiB  1.00 KiB/s"),
            std::string::npos)
      << out;
  // COMPLETE replaces the retry's bar.
  v1::TrainerEvent complete = AttemptAt(6, 2000, 2, 1, 4096);
  complete.mutable_recovery()->set_phase(v1::RECOVERY_PHASE_COMPLETE);
  ASSERT_TRUE(printer.Print(complete).ok());
  const std::string end = Written();
  EXPECT_EQ(end.substr(end.rfind('\r')),
            "\r2026-12-04T18:00:02.250Z  #6  epoch 3  recovery  COMPLETE  "
            "from rank 1 (attempt 2)  100%  4.00 KiB / 4.00 KiB\x1b[K\n")
      << end;
}

TEST_F(EventPrinterTest, OnANarrowTerminalTheBarFitsOnOneLine) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, true, 72);
  ASSERT_TRUE(printer.Print(ExportAt(1, 0, 500)).ok());
  const std::string out = Written();
  ASSERT_EQ(out.substr(0, 1), "\r");
  const std::string bar = out.substr(1, out.size() - 1 - 3);  // \x1b[K
  EXPECT_LT(bar.size(), 72u) << bar;
  EXPECT_EQ(bar,
            "#1  export_progress  m.safetensors  [#####     ]  50%  500 B / "
            "1000 B");
}

TEST_F(EventPrinterTest, FinishEndsABarLeftOpenWithANewline) {
  EventPrinter& printer = Printer(EventPrinter::Format::kText, true);
  ASSERT_TRUE(printer.Print(ExportAt(1, 0, 300)).ok());
  EXPECT_NE(Written().back(), '\n');
  printer.Finish();
  EXPECT_EQ(Written().back(), '\n');
  printer.Finish();
  EXPECT_EQ(Written().find("\n\n"), std::string::npos);
}

TEST_F(EventPrinterTest, JsonIsOneParsableLinePerEventEvenOnATerminal) {
  EventPrinter& printer = Printer(EventPrinter::Format::kJson, true);
  const std::vector<v1::TrainerEvent> events = {
      Committed(1, 4), ExportAt(2, 0, 500), ExportAt(3, 10, 1000, true)};
  for (const v1::TrainerEvent& e : events) ASSERT_TRUE(printer.Print(e).ok());
  printer.Finish();
  const std::vector<std::string> lines =
      absl::StrSplit(Written(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), events.size()) << Written();
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].find('\r'), std::string::npos);
    v1::TrainerEvent parsed;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(lines[i], &parsed).ok())
        << lines[i];
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(parsed, events[i]))
        << lines[i];
  }
  // The .proto field names, not lowerCamelCase.
  EXPECT_NE(lines[0].find("\"step_committed\""), std::string::npos);
  EXPECT_NE(lines[0].find("\"time_unix_ms\""), std::string::npos);
}

}  // namespace
}  // namespace shardd::client
