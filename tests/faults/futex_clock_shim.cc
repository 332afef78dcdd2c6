// LD_PRELOAD companion of libfaketime for clock_step_test: it makes the
// kernel's absolute CLOCK_REALTIME futex deadlines agree with the faked
// wall clock, so that a faked process lives with one wall clock, as after
// a real step of the machine's clock.
//
// Why it is needed: libfaketime fakes what a process reads (clock_gettime
// and friends) and the waits it knows (pthread_cond_timedwait, poll, ...),
// not what the kernel compares. Debian's abseil (20220623) hands timed
// waits to the kernel as syscall(SYS_futex, ..., FUTEX_WAIT_BITSET |
// FUTEX_CLOCK_REALTIME, deadline) with the deadline computed from the
// faked clock, and gRPC's own waits (its pollers' and timer thread's
// condition variables) are abseil's. With the faked clock 60 s ahead each
// such wait sleeps 60 s too long, 60 s behind each returns at once, for as
// long as the offset holds: gRPC's timer thread spins on a core and
// pollers that rely on a timeout stall. No real step does that (both
// clocks move together; only the waits in flight at the step are off,
// once). Measured before this shim: 1 in 5 runs of clock_step_test had
// every member evicted within 25 ms at +60 s, and with two runs at once
// the -60 s holds slowed the faked processes past 8x the reference.
//
// What it does: for FUTEX_WAIT_BITSET with FUTEX_CLOCK_REALTIME and a
// deadline, it subtracts the current offset (faked minus kernel
// CLOCK_REALTIME) from the deadline. Every other system call goes through
// unchanged. Not for production: a test tool only.
#include <dlfcn.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstdarg>
#include <cstdint>

namespace {

using SyscallFn = long (*)(long, ...);

SyscallFn RealSyscall() {
  static const SyscallFn real =
      reinterpret_cast<SyscallFn>(dlsym(RTLD_NEXT, "syscall"));
  return real;
}

constexpr int64_t kNanos = 1000000000;

int64_t ToNanos(const timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * kNanos + t.tv_nsec;
}

}  // namespace

extern "C" long syscall(long number, ...) {
  // Every Linux system call takes at most six arguments, passed in
  // registers: reading six is what glibc's own syscall() does.
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  const SyscallFn real = RealSyscall();
  if (number == SYS_futex && a[3] != 0) {
    const int op = static_cast<int>(a[1]);
    if ((op & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET &&
        (op & FUTEX_CLOCK_REALTIME) != 0) {
      timespec faked{};
      timespec kernel{};
      clock_gettime(CLOCK_REALTIME, &faked);  // libfaketime's
      real(SYS_clock_gettime, CLOCK_REALTIME, &kernel);
      const int64_t offset = ToNanos(faked) - ToNanos(kernel);
      int64_t at = ToNanos(*reinterpret_cast<const timespec*>(a[3])) - offset;
      if (at < 0) at = 0;
      timespec shifted{};
      shifted.tv_sec = static_cast<time_t>(at / kNanos);
      shifted.tv_nsec = static_cast<long>(at % kNanos);
      return real(number, a[0], a[1], a[2], &shifted, a[4], a[5]);
    }
  }
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
