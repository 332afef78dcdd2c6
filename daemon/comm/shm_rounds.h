#ifndef SHARDD_DAEMON_COMM_SHM_ROUNDS_H_
#define SHARDD_DAEMON_COMM_SHM_ROUNDS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/comm/peer_liveness.h"
#include "daemon/core/mono_time.h"

namespace shardd::comm {

// The synchronisation of a group's ranks through one shared-memory
// segment: a sequence of rounds that every rank runs in the same order.
//
// Layout: a header (magic, W, slot size, epoch, the shared "poisoned"
// word), then per rank two counters on cache lines of their own,
// `published` (rounds whose data this rank has put in its buffer) and
// `consumed` (rounds this rank has finished reading), then per rank two
// buffers of slot_bytes, used by rounds alternately (double buffering).
//
// A round R on rank r: optionally BeginWrite (waits until every peer has
// consumed round R - 2, the last user of buffer R % 2) and fill the
// buffer; Publish; Read the buffers of the peers it needs (each waits
// until that peer published round R); EndRound. So one rank's copy into
// its buffer overlaps the others' reads of the previous round, and the
// memory is 2 × W × slot_bytes whatever the message size.
//
// Waits are futexes on the counters (shared, not FUTEX_PRIVATE), after a
// brief spin, in slices of at most kWaitSlice; between slices a wait
// checks this communicator's abort flag (ABORTED), the shared poisoned
// word (UNAVAILABLE naming the rank that set it: a rank that fails or
// aborts sets it and wakes every waiter), the peers' liveness (UNAVAILABLE
// naming a dead rank) and the deadline (DEADLINE_EXCEEDED). Counters are
// 32-bit and compared modulo 2^32.
//
// Not thread-safe except Poison() and WakeAll(), which any thread may
// call; one worker thread runs the rounds. Borrows the segment memory,
// the liveness and the abort flag.
class ShmRounds {
 public:
  // Bytes of the segment for `world` ranks with slots of `slot_bytes`.
  static int64_t SegmentBytes(int world, int64_t slot_bytes);
  // Writes the header of a fresh (zeroed) segment.
  static void Initialize(uint8_t* base, int world, int64_t slot_bytes,
                         int64_t epoch);
  // Checks a mapped segment's header: FAILED_PRECONDITION naming what
  // differs.
  static absl::Status Validate(const uint8_t* base, int world,
                               int64_t slot_bytes, int64_t epoch);

  ShmRounds(uint8_t* base, int world, int rank, int64_t slot_bytes,
            const PeerLiveness* liveness, const std::atomic<bool>* aborted);

  int64_t slot_bytes() const { return slot_bytes_; }

  // This rank's buffer for the current round, once no peer can still be
  // reading the round that used it last.
  absl::StatusOr<uint8_t*> BeginWrite(MonoTime deadline);
  // The current round's data of this rank is in place (or it has none).
  void Publish();
  // Rank q's buffer for the current round, once q has published it.
  absl::StatusOr<const uint8_t*> Read(int q, MonoTime deadline);
  // This rank is done reading the current round; the next one starts.
  void EndRound();

  // Sets the shared poisoned word (first poisoner wins) and wakes every
  // waiter of every rank.
  void Poison();
  // Wakes every waiter on every counter (they re-check their conditions).
  void WakeAll();

 private:
  std::atomic<uint32_t>& Published(int q) const;
  std::atomic<uint32_t>& Consumed(int q) const;
  uint8_t* Buffer(int q, uint32_t round) const;
  // Waits until word - target >= 0 (mod 2^32); see the class comment.
  absl::Status WaitFor(std::atomic<uint32_t>& word, uint32_t target,
                       MonoTime deadline, int peer);
  absl::Status Interrupted(int peer, MonoTime deadline) const;

  uint8_t* const base_;
  const int world_;
  const int rank_;
  const int64_t slot_bytes_;
  const PeerLiveness* const liveness_;
  const std::atomic<bool>* const aborted_;
  uint32_t round_ = 0;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_SHM_ROUNDS_H_
