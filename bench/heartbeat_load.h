#ifndef SHARDD_BENCH_HEARTBEAT_LOAD_H_
#define SHARDD_BENCH_HEARTBEAT_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "bench/simulated_members.h"

namespace shardd::bench {

struct HeartbeatLoadOptions {
  std::string address;
  // Threads, each with its own connection and completion queue.
  int threads = 4;
  // Heartbeats each thread keeps outstanding.
  int in_flight = 16;
  absl::Duration duration = absl::Seconds(3);
};

struct HeartbeatLoadResult {
  int64_t ok = 0;
  int64_t failed = 0;
  double seconds = 0;
};

// Back-to-back Heartbeat RPCs with valid leases (READY in the lease's
// epoch, at its step), to find how many the coordinator process sustains:
// its heartbeat path without the members' own pacing.
//
// Stateless between runs; Run blocks the caller until the load threads end.
class HeartbeatLoad {
 public:
  // Cycles over `leases` (which must not be empty) for options.duration.
  static HeartbeatLoadResult Run(const HeartbeatLoadOptions& options,
                                 const std::vector<MemberLease>& leases);
};

}  // namespace shardd::bench

#endif  // SHARDD_BENCH_HEARTBEAT_LOAD_H_
