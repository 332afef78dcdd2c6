#ifndef SHARDD_DAEMON_NODE_CHECKPOINT_STAGER_H_
#define SHARDD_DAEMON_NODE_CHECKPOINT_STAGER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/recovery/shard_memory.h"
#include "daemon/recovery/shard_stream.h"
#include "shardd/v1/peer.pb.h"

namespace shardd::node {

// The background half of asynchronous checkpoints (--async_checkpoints): a
// checkpoint's sections are copied into one host staging buffer on the step
// path (a memcpy, or a device-to-host copy), and one writer thread writes
// them to disk while training goes on. So a slow disk (an NFS stall longer
// than the collective timeout) holds neither the step nor, through it, the
// peers' collectives, as torch DCP's async_save does.
//
// At most one checkpoint is staged or being written at a time: one offered
// meanwhile is refused (UNAVAILABLE; the caller skips it and the next
// interval tries again), so the staging never holds more than one copy of
// the shard. The buffer is kept for the next checkpoint and admitted
// (Options::admit) whenever it has to grow.
//
// A write can be discarded while it runs (a rollback to an older step
// abandons the timeline it belongs to): Job::discarded() is then true when
// the write callback looks, and the callback removes what it wrote.
//
// Thread-safe. Owns the staging buffer and the writer thread; the
// destructor lets an in-flight write finish (a checkpoint of a committed
// step is worth the wait of a shutdown) and joins the thread. The
// callbacks in Options must outlive it.
class CheckpointStager {
 public:
  // A staged checkpoint, as the write callback gets it.
  class Job {
   public:
    v1::ShardHeader header;
    // Host copies in the staging buffer, in the sources' order.
    std::vector<recovery::SectionSource> sources;
    int rank = 0;
    int64_t step = 0;
    int64_t epoch = 0;
    // Whether a rollback abandoned this step while it was being written.
    bool discarded() const;

   private:
    friend class CheckpointStager;
    const CheckpointStager* owner_ = nullptr;
  };

  struct Options {
    // Admits `bytes` of host staging before they are allocated (the
    // buffer's new size; the old buffer is freed first). Null: admitted.
    std::function<absl::Status(int64_t bytes)> admit = nullptr;
    // Told the staging bytes held whenever they change. Optional.
    std::function<void(int64_t bytes)> held = nullptr;
    // Writes a staged checkpoint; runs on the writer thread. Required.
    std::function<void(const Job& job)> write = nullptr;
  };
  explicit CheckpointStager(Options options);
  ~CheckpointStager();
  CheckpointStager(const CheckpointStager&) = delete;
  CheckpointStager& operator=(const CheckpointStager&) = delete;

  // Copies `sources` (read through `memory`) into the staging buffer and
  // queues their write as `rank`'s checkpoint of (step, epoch). Returns when
  // the copy is done; the write goes on behind it. UNAVAILABLE naming the step
  // still staged or being written (nothing copied); RESOURCE_EXHAUSTED,
  // the admission's refusal, when the buffer had to grow (nothing
  // allocated: the caller may write synchronously instead); a read error of
  // `memory` (nothing queued).
  absl::Status Stage(v1::ShardHeader header,
                     const std::vector<recovery::SectionSource>& sources,
                     const recovery::ShardMemory& memory, int rank,
                     int64_t step, int64_t epoch);

  // Marks the checkpoint staged or being written as discarded when its step
  // is above `step`; returns the step it discarded, if any.
  std::optional<int64_t> DiscardAbove(int64_t step);

  // Waits until no checkpoint is staged or being written: OK, or
  // DEADLINE_EXCEEDED naming the step still being written after `timeout`.
  absl::Status Quiesce(absl::Duration timeout);

  // The step staged or being written, if any.
  std::optional<int64_t> in_flight() const;
  // The staging buffer's size.
  int64_t staging_bytes() const;

 private:
  void WriterLoop();
  // Makes the buffer hold `bytes`; RESOURCE_EXHAUSTED as the admission's.
  absl::Status Reserve(int64_t bytes);

  const Options options_;
  mutable absl::Mutex mu_;
  // The step staged or being written.
  std::optional<int64_t> busy_ ABSL_GUARDED_BY(mu_);
  bool discarded_ ABSL_GUARDED_BY(mu_) = false;
  // The staged job, handed to the writer (set once the copy is done).
  std::unique_ptr<Job> queued_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Only the stager holding busy_ touches the buffer: Stage fills it, the
  // writer reads it, one after the other.
  std::unique_ptr<uint8_t[]> buffer_;
  int64_t capacity_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread writer_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_CHECKPOINT_STAGER_H_
