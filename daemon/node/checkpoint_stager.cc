#include "daemon/node/checkpoint_stager.h"

#include <new>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/deadline_waker.h"
#include "daemon/core/mono_time.h"

namespace shardd::node {

bool CheckpointStager::Job::discarded() const {
  absl::MutexLock lock(&owner_->mu_);
  return owner_->discarded_;
}

CheckpointStager::CheckpointStager(Options options)
    : options_(std::move(options)), writer_([this] { WriterLoop(); }) {}

CheckpointStager::~CheckpointStager() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
  if (options_.held && capacity_ > 0) options_.held(0);
}

absl::Status CheckpointStager::Reserve(int64_t bytes) {
  int64_t capacity = 0;
  {
    absl::MutexLock lock(&mu_);
    capacity = capacity_;
  }
  if (bytes <= capacity) return absl::OkStatus();
  // Free the old buffer first: the admission sees only the new one, and
  // a refusal leaves nothing held.
  buffer_.reset();
  {
    absl::MutexLock lock(&mu_);
    capacity_ = 0;
  }
  if (options_.held && capacity > 0) options_.held(0);
  if (options_.admit) {
    if (absl::Status admitted = options_.admit(bytes); !admitted.ok()) {
      return admitted;
    }
  }
  buffer_.reset(new (std::nothrow) uint8_t[static_cast<size_t>(bytes)]);
  if (buffer_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint staging: allocating ", bytes, " bytes failed"));
  }
  {
    absl::MutexLock lock(&mu_);
    capacity_ = bytes;
  }
  if (options_.held) options_.held(bytes);
  return absl::OkStatus();
}

absl::Status CheckpointStager::Stage(
    v1::ShardHeader header, const std::vector<recovery::SectionSource>& sources,
    const recovery::ShardMemory& memory, int rank, int64_t step,
    int64_t epoch) {
  {
    absl::MutexLock lock(&mu_);
    if (busy_.has_value()) {
      return absl::UnavailableError(absl::StrCat(
          "the checkpoint of step ", *busy_, " is still being written"));
    }
    busy_ = step;
    discarded_ = false;
  }
  // Anything but a queued job frees the slot again.
  bool queued = false;
  absl::Cleanup release = [&] {
    if (queued) return;
    absl::MutexLock lock(&mu_);
    busy_.reset();
  };
  int64_t total = 0;
  for (const recovery::SectionSource& source : sources) {
    total += source.section.byte_length();
  }
  if (absl::Status reserved = Reserve(total); !reserved.ok()) return reserved;
  auto job = std::make_unique<Job>();
  job->owner_ = this;
  job->header = std::move(header);
  job->rank = rank;
  job->step = step;
  job->epoch = epoch;
  job->sources.reserve(sources.size());
  int64_t offset = 0;
  for (const recovery::SectionSource& source : sources) {
    const int64_t n = source.section.byte_length();
    recovery::SectionSource copy{.section = source.section, .data = nullptr};
    if (n > 0) {
      copy.data = buffer_.get() + offset;
      if (absl::Status read =
              memory.Read(buffer_.get() + offset, source.data, n);
          !read.ok()) {
        return read;
      }
    }
    offset += n;
    job->sources.push_back(std::move(copy));
  }
  absl::MutexLock lock(&mu_);
  queued_ = std::move(job);
  queued = true;
  return absl::OkStatus();
}

void CheckpointStager::WriterLoop() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](CheckpointStager* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->queued_ != nullptr || self->stop_;
          },
          this));
      if (queued_ == nullptr) return;  // Stopped with nothing queued.
      job = std::move(queued_);
    }
    options_.write(*job);
    absl::MutexLock lock(&mu_);
    busy_.reset();
    discarded_ = false;
  }
}

std::optional<int64_t> CheckpointStager::DiscardAbove(int64_t step) {
  absl::MutexLock lock(&mu_);
  if (!busy_.has_value() || *busy_ <= step) return std::nullopt;
  discarded_ = true;
  return busy_;
}

absl::Status CheckpointStager::Quiesce(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !busy_.has_value();
  };
  // On the monotonic clock: a wall-clock step neither stretches nor cuts
  // a rollback's or a shutdown's wait (AwaitUntil says why).
  if (AwaitUntil(&mu_, absl::Condition(&idle), MonoNow() + timeout)) {
    return absl::OkStatus();
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "the checkpoint of step ", *busy_, " is still being written after ",
      absl::FormatDuration(timeout)));
}

std::optional<int64_t> CheckpointStager::in_flight() const {
  absl::MutexLock lock(&mu_);
  return busy_;
}

int64_t CheckpointStager::staging_bytes() const {
  absl::MutexLock lock(&mu_);
  return capacity_;
}

}  // namespace shardd::node
