#include "daemon/node/shm_janitor.h"

#include <cstdio>
#include <utility>

#include "daemon/comm/shm_segment.h"
#include "daemon/memory/shm_sweeper.h"

namespace shardd::node {
namespace {

// Every daemon's prefix is "shardd-<pid>" (shardd_main): the family swept.
constexpr char kFamily[] = "shardd-";
// Where shm_open puts the communicators' segments (comm::kShmSegmentFamily).
constexpr char kPosixShmDir[] = "/dev/shm";

}  // namespace

ShmJanitor::ShmJanitor(std::string dir, std::string prefix,
                       absl::Duration interval, metrics::NodeObserver* observer)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      interval_(interval),
      observer_(observer) {}

absl::StatusOr<std::unique_ptr<ShmJanitor>> ShmJanitor::Start(
    std::string dir, std::string prefix, absl::Duration interval,
    metrics::NodeObserver* observer) {
  std::unique_ptr<ShmJanitor> janitor(
      new ShmJanitor(std::move(dir), std::move(prefix), interval, observer));
  // Before the lock: a dead incarnation with this very prefix goes first.
  janitor->SweepOnce();
  absl::StatusOr<std::unique_ptr<memory::ShmOwnerLock>> lock =
      memory::ShmOwnerLock::Acquire(janitor->dir_, janitor->prefix_);
  if (!lock.ok()) return lock.status();
  janitor->lock_ = *std::move(lock);
  if (janitor->interval_ > absl::ZeroDuration()) {
    ShmJanitor* self = janitor.get();
    janitor->thread_ = std::thread([self] {
      while (!self->stop_.WaitFor(self->interval_)) {
        self->SweepOnce();
      }
    });
  }
  return janitor;
}

ShmJanitor::~ShmJanitor() {
  stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void ShmJanitor::SweepCommunicatorSegments() {
  // A segment's name lives only while its communicator forms, so one whose
  // creator is alive is no leftover: only removals are reported.
  absl::StatusOr<memory::ShmSweepResult> swept =
      memory::SweepShmDirectory(kPosixShmDir, comm::kShmSegmentFamily);
  if (!swept.ok()) return;  // No /dev/shm: shm_open has nowhere either.
  for (const std::string& line : swept->removed) {
    std::printf(
        "shardd: shm sweep: removed a dead daemon's communicator segment: "
        "%s\n",
        line.c_str());
  }
  if (!swept->removed.empty()) std::fflush(stdout);
  swept_bytes_.fetch_add(swept->bytes_removed);
  if (observer_ != nullptr && swept->files_removed > 0) {
    observer_->ShmSwept(swept->files_removed, swept->bytes_removed);
  }
}

bool ShmJanitor::SweepOnce() {
  SweepCommunicatorSegments();
  absl::StatusOr<memory::ShmSweepResult> swept =
      memory::SweepShmDirectory(dir_, kFamily);
  if (!swept.ok()) {
    std::fprintf(stderr, "shardd: shm sweep of %s: %s\n", dir_.c_str(),
                 swept.status().ToString().c_str());
    return false;
  }
  for (const std::string& line : swept->removed) {
    std::printf("shardd: shm sweep: removed a dead daemon's files: %s\n",
                line.c_str());
  }
  if (!swept->removed.empty()) std::fflush(stdout);
  swept_bytes_.fetch_add(swept->bytes_removed);
  leftover_bytes_.store(swept->unknown_bytes);
  if (observer_ != nullptr) {
    if (swept->files_removed > 0) {
      observer_->ShmSwept(swept->files_removed, swept->bytes_removed);
    }
    observer_->ShmLeftoverBytes(swept->unknown_bytes);
  }
  return true;
}

}  // namespace shardd::node
