#ifndef SHARDD_DAEMON_COORDINATOR_CONCURRENCY_LIMIT_H_
#define SHARDD_DAEMON_COORDINATOR_CONCURRENCY_LIMIT_H_

#include <condition_variable>
#include <mutex>

#include "daemon/core/mono_time.h"

namespace shardd::coordinator {

// At most `limit` holders at a time; the others sleep until a slot frees
// or their monotonic deadline passes (std::condition_variable over
// steady_clock: libstdc++ 12's std::counting_semaphore::try_acquire_for
// was measured sleeping out its whole timeout although slots were free).
//
// Thread-safe. Holders must release what they acquired (Slot does).
class ConcurrencyLimit {
 public:
  explicit ConcurrencyLimit(int limit) : free_(limit) {}

  // True with a slot taken; false at the deadline (nothing taken).
  bool Acquire(MonoTime deadline);
  void Release();

  // Holds a slot while alive, if one came by the deadline.
  class Slot {
   public:
    Slot(ConcurrencyLimit& limit, MonoTime deadline)
        : limit_(limit), held_(limit.Acquire(deadline)) {}
    ~Slot() {
      if (held_) limit_.Release();
    }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    bool held() const { return held_; }

   private:
    ConcurrencyLimit& limit_;
    const bool held_;
  };

 private:
  std::mutex mu_;
  std::condition_variable freed_;
  int free_;
};

}  // namespace shardd::coordinator

#endif  // SHARDD_DAEMON_COORDINATOR_CONCURRENCY_LIMIT_H_
