#ifndef SHARDD_CLIENT_EXPORT_DRIVER_H_
#define SHARDD_CLIENT_EXPORT_DRIVER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/trainer_client.h"
#include "daemon/core/mono_time.h"
#include "shardd/v1/trainer.pb.h"

namespace shardd::client {

// Drives one Trainer.ExportState on several daemons at once (for shardctl
// export --sockets=...): a FULL export is collective, so every rank's
// daemon must be asked at the same time. Progress comes from the first
// daemon's WatchEvents (ExportProgress; every rank reports the same
// figures), subscribed before any export starts so that nothing is missed.
//
// Not thread-safe (one Run at a time). Does not own the clients, which
// must outlive it.
class ExportDriver {
 public:
  explicit ExportDriver(std::vector<TrainerClient*> clients);

  // Calls ExportState(request) on every client at once, each until
  // `deadline`. `on_progress` (may be null) is called from one watcher
  // thread with this export's progress reports (matched by path), the last
  // one done unless the exports returned first. Returns each client's
  // result, in the clients' order.
  std::vector<absl::StatusOr<v1::ExportStateResponse>> Run(
      const v1::ExportStateRequest& request, MonoTime deadline,
      const std::function<void(const v1::ExportProgress&)>& on_progress);

 private:
  std::vector<TrainerClient*> clients_;
};

// A default deadline for exporting `bytes`: two minutes plus the bytes at
// 20 MB/s (a slow network file system), so that a large model is not cut
// short by a deadline meant for small calls.
absl::Duration DefaultExportDeadline(int64_t bytes);

// The bytes of an export of the model `status` describes: every unit's
// fp32 elements, times (1 + state_kinds) optimizer states.
int64_t ExportBytesOf(const v1::GetStatusResponse& status, int state_kinds);

// One progress line: a bar of `width` cells when width > 0, then percent,
// bytes done / total and the rate since `elapsed` began, e.g.
// "[##########          ]  50%  1.00 GiB / 2.00 GiB  512.0 MiB/s".
std::string FormatExportProgress(int64_t done, int64_t total,
                                 absl::Duration elapsed, int width);

}  // namespace shardd::client

#endif  // SHARDD_CLIENT_EXPORT_DRIVER_H_
