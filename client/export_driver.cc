#include "client/export_driver.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "daemon/core/mono_notification.h"
#include "daemon/core/mono_time.h"

namespace shardd::client {
namespace {

std::string HumanBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f %s", bytes, units[u])
                : absl::StrFormat("%.2f %s", bytes, units[u]);
}

}  // namespace

// How long a finished export waits for its done report.
constexpr absl::Duration kDoneReportGrace = absl::Seconds(2);

ExportDriver::ExportDriver(std::vector<TrainerClient*> clients)
    : clients_(std::move(clients)) {}

std::vector<absl::StatusOr<v1::ExportStateResponse>> ExportDriver::Run(
    const v1::ExportStateRequest& request, MonoTime deadline,
    const std::function<void(const v1::ExportProgress&)>& on_progress) {
  std::vector<absl::StatusOr<v1::ExportStateResponse>> results(
      clients_.size(), absl::UnknownError("not called"));
  if (clients_.empty()) return results;
  // Subscribed (the snapshot read) before the export starts.
  std::unique_ptr<EventStream> events;
  std::thread watcher;
  MonoNotification saw_done;
  if (on_progress) {
    events = clients_[0]->WatchEvents(v1::WatchEventsRequest(), deadline);
    v1::TrainerEvent snapshot;
    if (events->Next(&snapshot)) {
      watcher = std::thread([&] {
        v1::TrainerEvent event;
        while (events->Next(&event)) {
          if (!event.has_export_progress() ||
              event.export_progress().path() != request.path()) {
            continue;
          }
          on_progress(event.export_progress());
          if (event.export_progress().done()) {
            saw_done.Notify();
            break;
          }
        }
      });
    }
  }
  std::vector<std::thread> calls;
  for (size_t i = 0; i < clients_.size(); ++i) {
    calls.emplace_back(
        [&, i] { results[i] = clients_[i]->ExportState(request, deadline); });
  }
  for (std::thread& t : calls) t.join();
  if (events != nullptr) {
    // The exports returned. The daemon publishes its done report before it
    // replies, but the report travels on another stream: give it a moment
    // (bounded) so that a finished export ends its progress at 100%.
    if (watcher.joinable()) {
      saw_done.WaitUntil(std::min(deadline, MonoNow() + kDoneReportGrace));
    }
    events->Cancel();
    if (watcher.joinable()) watcher.join();
    (void)events->Finish();
  }
  return results;
}

absl::Duration DefaultExportDeadline(int64_t bytes) {
  return absl::Minutes(2) +
         absl::Seconds(static_cast<double>(std::max<int64_t>(bytes, 0)) / 20e6);
}

int64_t ExportBytesOf(const v1::GetStatusResponse& status, int state_kinds) {
  int64_t elements = 0;
  for (const v1::UnitMemory& unit : status.memory().units()) {
    elements += unit.numel();
  }
  return elements * 4 * (1 + state_kinds);
}

std::string FormatExportProgress(int64_t done, int64_t total,
                                 absl::Duration elapsed, int width) {
  const double fraction =
      total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 0;
  std::string out;
  if (width > 0) {
    const int filled = static_cast<int>(fraction * width);
    out = absl::StrCat("[", std::string(filled, '#'),
                       std::string(width - filled, ' '), "] ");
  }
  const double seconds = absl::ToDoubleSeconds(elapsed);
  absl::StrAppend(&out,
                  absl::StrFormat("%3d%%  ", static_cast<int>(fraction * 100)),
                  HumanBytes(done), " / ", HumanBytes(total));
  if (seconds > 0) {
    absl::StrAppend(&out, "  ", HumanBytes(done / seconds), "/s");
  }
  return out;
}

}  // namespace shardd::client
