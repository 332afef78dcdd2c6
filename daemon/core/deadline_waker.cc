#include "daemon/core/deadline_waker.h"

#include <chrono>

namespace shardd {
namespace {

// A TryLock can fail without anyone holding the mutex (Abseil's queue
// spinlock); the waker tries again this soon rather than block.
constexpr absl::Duration kRetry = absl::Milliseconds(1);

std::chrono::steady_clock::time_point SteadyPoint(absl::Duration since) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          absl::ToChronoNanoseconds(since)));
}

struct WaitArgs {
  const absl::Condition* cond;
  MonoTime deadline;
};

bool CondOrExpired(WaitArgs* args) {
  return args->cond->Eval() || MonoNow() >= args->deadline;
}

bool IsSet(bool* b) { return *b; }

}  // namespace

bool AwaitUntil(absl::Mutex* mu, const absl::Condition& cond,
                MonoTime deadline) {
  if (cond.Eval()) return true;
  if (deadline == MonoTime::InfiniteFuture()) {
    mu->Await(cond);
    return true;
  }
  if (MonoNow() >= deadline) return false;
  WaitArgs args{&cond, deadline};
  DeadlineWaker& waker = DeadlineWaker::Default();
  const DeadlineWaker::Ticket ticket = waker.Schedule(deadline, mu);
  mu->Await(absl::Condition(&CondOrExpired, &args));
  waker.Cancel(ticket, mu);
  return cond.Eval();
}

void SleepUntil(MonoTime deadline) {
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  bool never = false;
  AwaitUntil(&mu, absl::Condition(&IsSet, &never), deadline);
}

DeadlineWaker::DeadlineWaker() : thread_([this] { Run(); }) {}

DeadlineWaker::~DeadlineWaker() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

DeadlineWaker& DeadlineWaker::Default() {
  static DeadlineWaker* const waker = new DeadlineWaker();
  return *waker;
}

DeadlineWaker::Ticket DeadlineWaker::Schedule(MonoTime at, absl::Mutex* mu) {
  std::lock_guard<std::mutex> l(m_);
  const Ticket t = next_ticket_++;
  const absl::Duration key = at.SinceOrigin();
  entries_[t] = {key, mu};
  const bool first = queue_.empty() || key < queue_.begin()->first;
  queue_.insert({key, t});
  if (first) cv_.notify_all();
  return t;
}

void DeadlineWaker::Cancel(Ticket ticket,
                           absl::Mutex* mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  std::unique_lock<std::mutex> l(m_);
  const auto erase = [&] {
    auto it = entries_.find(ticket);
    if (it == entries_.end()) return;
    queue_.erase({it->second.first, ticket});
    entries_.erase(it);
  };
  erase();
  if (firing_ != ticket) return;
  // The waker thread is between TryLock and Unlock of `mu`, or about to
  // TryLock it: let it finish (it may queue a retry) before the waiter, and
  // perhaps `mu`, goes away.
  l.unlock();
  mu->Unlock();
  l.lock();
  done_cv_.wait(l, [&] { return firing_ != ticket; });
  erase();
  l.unlock();
  mu->Lock();
}

void DeadlineWaker::Run() {
  std::unique_lock<std::mutex> l(m_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(l);
      continue;
    }
    const auto [key, ticket] = *queue_.begin();
    const MonoTime now = MonoNow();
    if (now.SinceOrigin() < key) {
      cv_.wait_until(l, SteadyPoint(key));
      continue;
    }
    queue_.erase(queue_.begin());
    auto it = entries_.find(ticket);
    absl::Mutex* const mu = it->second.second;
    entries_.erase(it);
    firing_ = ticket;
    l.unlock();
    const bool touched = mu->TryLock();
    if (touched) mu->Unlock();
    l.lock();
    firing_ = 0;
    done_cv_.notify_all();
    // Not touched: another thread holds `mu` and its Unlock evaluates the
    // waiter's condition, or the TryLock lost a race with Abseil's queue
    // spinlock; either way try again soon until the waiter cancels.
    if (!touched && !stop_) {
      const absl::Duration again = (MonoNow() + kRetry).SinceOrigin();
      entries_[ticket] = {again, mu};
      queue_.insert({again, ticket});
    }
  }
}

}  // namespace shardd
