#include "daemon/comm/shm_rounds.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardd::comm {
namespace {

constexpr uint64_t kMagic = 0x314d485344524148ull;  // "HARDSHM1"
constexpr uint32_t kVersion = 1;
constexpr int64_t kPage = 4096;
constexpr int64_t kLine = 64;
// How long one futex wait sleeps before the wait checks abort, poison,
// liveness and the deadline again (a peer that dies wakes nobody).
constexpr absl::Duration kWaitSlice = absl::Milliseconds(20);
// Loads before sleeping: well under a microsecond. More would burn a core
// that another rank of the group needs (2 cores for 8 processes here).
constexpr int kSpins = 64;

struct Header {
  uint64_t magic;
  uint32_t version;
  int32_t world;
  int64_t slot_bytes;
  int64_t epoch;
  alignas(kLine) std::atomic<uint32_t> poisoned;  // 0, or poisoner rank + 1
};
static_assert(sizeof(Header) <= kPage);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

int64_t ControlBytes(int world) {
  const int64_t bytes = int64_t{world} * 2 * kLine;
  return (bytes + kPage - 1) / kPage * kPage;
}

Header& HeaderOf(uint8_t* base) { return *reinterpret_cast<Header*>(base); }
const Header& HeaderOf(const uint8_t* base) {
  return *reinterpret_cast<const Header*>(base);
}

bool Reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

void FutexWait(std::atomic<uint32_t>& word, uint32_t expected,
               absl::Duration timeout) {
  // FUTEX_WAIT's relative timeout runs on CLOCK_MONOTONIC.
  const timespec ts = absl::ToTimespec(timeout);
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected,
            &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX,
            nullptr, nullptr, 0);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

int64_t ShmRounds::SegmentBytes(int world, int64_t slot_bytes) {
  return kPage + ControlBytes(world) + int64_t{world} * 2 * slot_bytes;
}

void ShmRounds::Initialize(uint8_t* base, int world, int64_t slot_bytes,
                           int64_t epoch) {
  Header& header = HeaderOf(base);
  header.magic = kMagic;
  header.version = kVersion;
  header.world = world;
  header.slot_bytes = slot_bytes;
  header.epoch = epoch;
  header.poisoned.store(0, std::memory_order_release);
}

absl::Status ShmRounds::Validate(const uint8_t* base, int world,
                                 int64_t slot_bytes, int64_t epoch) {
  const Header& header = HeaderOf(base);
  if (header.magic != kMagic || header.version != kVersion) {
    return absl::FailedPreconditionError(
        "segment header: wrong magic or version");
  }
  if (header.world != world || header.slot_bytes != slot_bytes ||
      header.epoch != epoch) {
    return absl::FailedPreconditionError(absl::StrCat(
        "segment header: W=", header.world, " slot=", header.slot_bytes,
        " epoch=", header.epoch, ", expected W=", world, " slot=", slot_bytes,
        " epoch=", epoch));
  }
  return absl::OkStatus();
}

ShmRounds::ShmRounds(uint8_t* base, int world, int rank, int64_t slot_bytes,
                     const PeerLiveness* liveness,
                     const std::atomic<bool>* aborted)
    : base_(base),
      world_(world),
      rank_(rank),
      slot_bytes_(slot_bytes),
      liveness_(liveness),
      aborted_(aborted) {}

std::atomic<uint32_t>& ShmRounds::Published(int q) const {
  return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + kPage +
                                                   int64_t{q} * 2 * kLine);
}

std::atomic<uint32_t>& ShmRounds::Consumed(int q) const {
  return *reinterpret_cast<std::atomic<uint32_t>*>(
      base_ + kPage + int64_t{q} * 2 * kLine + kLine);
}

uint8_t* ShmRounds::Buffer(int q, uint32_t round) const {
  return base_ + kPage + ControlBytes(world_) +
         (int64_t{q} * 2 + (round & 1)) * slot_bytes_;
}

absl::StatusOr<uint8_t*> ShmRounds::BeginWrite(MonoTime deadline) {
  // Round R reuses the buffer of round R - 2: every peer must have
  // consumed it, i.e. consumed >= R - 1 rounds.
  if (round_ >= 2) {
    for (int q = 0; q < world_; ++q) {
      if (q == rank_) continue;
      if (absl::Status s = WaitFor(Consumed(q), round_ - 1, deadline, q);
          !s.ok()) {
        return s;
      }
    }
  }
  return Buffer(rank_, round_);
}

void ShmRounds::Publish() {
  Published(rank_).store(round_ + 1, std::memory_order_release);
  FutexWakeAll(Published(rank_));
}

absl::StatusOr<const uint8_t*> ShmRounds::Read(int q, MonoTime deadline) {
  if (q != rank_) {
    if (absl::Status s = WaitFor(Published(q), round_ + 1, deadline, q);
        !s.ok()) {
      return s;
    }
  }
  return Buffer(q, round_);
}

void ShmRounds::EndRound() {
  ++round_;
  Consumed(rank_).store(round_, std::memory_order_release);
  FutexWakeAll(Consumed(rank_));
}

void ShmRounds::Poison() {
  uint32_t expected = 0;
  HeaderOf(base_).poisoned.compare_exchange_strong(
      expected, static_cast<uint32_t>(rank_ + 1), std::memory_order_acq_rel);
  WakeAll();
}

void ShmRounds::WakeAll() {
  for (int q = 0; q < world_; ++q) {
    FutexWakeAll(Published(q));
    FutexWakeAll(Consumed(q));
  }
}

absl::Status ShmRounds::Interrupted(int peer, MonoTime deadline) const {
  if (aborted_->load(std::memory_order_acquire)) {
    return absl::AbortedError("aborted");
  }
  const uint32_t poisoned =
      HeaderOf(base_).poisoned.load(std::memory_order_acquire);
  if (poisoned != 0) {
    return absl::UnavailableError(
        absl::StrCat("rank ", poisoned - 1,
                     " failed or aborted its communicator (shared segment "
                     "poisoned)"));
  }
  if (absl::Status alive = liveness_->Check(); !alive.ok()) return alive;
  if (MonoNow() >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank ", peer, " did not reach round ", round_,
                     " in time (deadline passed)"));
  }
  return absl::OkStatus();
}

absl::Status ShmRounds::WaitFor(std::atomic<uint32_t>& word, uint32_t target,
                                MonoTime deadline, int peer) {
  // A poisoned segment fails every wait, even one whose data is there: a
  // peer that failed must not leave this rank's operation half a success.
  if (HeaderOf(base_).poisoned.load(std::memory_order_acquire) != 0) {
    return Interrupted(peer, deadline);
  }
  for (int i = 0; i < kSpins; ++i) {
    if (Reached(word.load(std::memory_order_acquire), target)) {
      return absl::OkStatus();
    }
    CpuRelax();
  }
  for (;;) {
    const uint32_t value = word.load(std::memory_order_acquire);
    if (Reached(value, target)) return absl::OkStatus();
    if (absl::Status s = Interrupted(peer, deadline); !s.ok()) return s;
    FutexWait(word, value, std::min(kWaitSlice, deadline - MonoNow()));
  }
}

}  // namespace shardd::comm
